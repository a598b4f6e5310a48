package bundle

import (
	"bytes"
	"encoding/json"
)

// MetadataInputPaths is the manifest metadata key under which the compiler
// records the paths of the input document the policy reads (see
// [Manifest.InputPaths]). Each path is a list of segments: a string is a key;
// an object {"data": ["a", "b"]} is a key the policy takes from the string
// at data.a.b (input.headers[data.nexus.subject_header]).
const MetadataInputPaths = "nexus_input_paths"

// MetadataEntrypointInputPaths is the manifest metadata key under which
// the compiler records, for each entrypoint, the paths of input that the
// rules it can reach read (see [Manifest.InputPathsFor]): an object from
// entrypoint to a list of paths as under [MetadataInputPaths]. An
// entrypoint it leaves out reads unknown paths.
const MetadataEntrypointInputPaths = "nexus_entrypoint_input_paths"

// InputPaths returns the paths under input that the policy reads, as
// recorded at compile time, and whether they are known. A path means the
// whole subtree under it may be read; unknown (false) means the policy may
// read anything (a bundle built elsewhere, or a policy that reads input as a
// whole, iterates over its keys or replaces it with `with`).
//
// Keys the policy takes from data are resolved against data, the bundle's
// data document as the engine loads it (JSON): a key that is a string there
// becomes a segment; a path whose key is absent is dropped (the policy's
// reference is undefined); any other value keeps the path up to that key.
func (m *Manifest) InputPaths(data []byte) ([][]string, bool) {
	raw, ok := m.Metadata[MetadataInputPaths].([]any)
	if !ok {
		return nil, false
	}
	return resolvePaths(raw, data)
}

// InputPathsFor is InputPaths for one entrypoint: the paths the rules it
// can reach read (a rule no evaluation of it reaches does not count). A
// manifest without the per-entrypoint record (a bundle compiled before it
// was written) answers InputPaths; one that records other entrypoints but
// not this one answers unknown.
func (m *Manifest) InputPathsFor(entrypoint string, data []byte) ([][]string, bool) {
	byEP, ok := m.Metadata[MetadataEntrypointInputPaths].(map[string]any)
	if !ok {
		return m.InputPaths(data)
	}
	raw, ok := byEP[entrypoint].([]any)
	if !ok {
		return nil, false
	}
	return resolvePaths(raw, data)
}

// resolvePaths reads a recorded list of paths, resolving its data keys
// against data.
func resolvePaths(raw []any, data []byte) ([][]string, bool) {
	var doc any
	decoded := false
	out := make([][]string, 0, len(raw))
paths:
	for _, r := range raw {
		segs, ok := r.([]any)
		if !ok || len(segs) == 0 {
			return nil, false
		}
		p := make([]string, 0, len(segs))
		for _, s := range segs {
			switch s := s.(type) {
			case string:
				p = append(p, s)
				continue
			case map[string]any:
				ref, ok := stringList(s["data"])
				if !ok || len(s) != 1 {
					return nil, false
				}
				if !decoded {
					decoded = true
					dec := json.NewDecoder(bytes.NewReader(data))
					dec.UseNumber()
					if err := dec.Decode(&doc); err != nil {
						doc = nil
					}
				}
				v, found := lookup(doc, ref)
				if !found {
					continue paths // undefined: this reference reads nothing
				}
				if key, ok := v.(string); ok {
					p = append(p, key)
				}
			default:
				return nil, false
			}
			break // a data key ends the path
		}
		if len(p) == 0 {
			return nil, false
		}
		out = append(out, p)
	}
	return out, true
}

func stringList(v any) ([]string, bool) {
	l, ok := v.([]any)
	if !ok || len(l) == 0 {
		return nil, false
	}
	out := make([]string, len(l))
	for i, x := range l {
		s, ok := x.(string)
		if !ok {
			return nil, false
		}
		out[i] = s
	}
	return out, true
}

func lookup(doc any, path []string) (any, bool) {
	for _, k := range path {
		m, ok := doc.(map[string]any)
		if !ok {
			return nil, false
		}
		if doc, ok = m[k]; !ok {
			return nil, false
		}
	}
	return doc, true
}
