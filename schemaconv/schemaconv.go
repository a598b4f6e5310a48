package schemaconv

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"go.yaml.in/yaml/v3"
)

// Format is a schema language.
type Format string

// Schema languages.
const (
	// Nexus is nexus' own YAML schema (see package datastore).
	Nexus Format = "nexus"
	// OpenFGA is an OpenFGA authorization model: the DSL (schema 1.1) or
	// its JSON form.
	OpenFGA Format = "openfga"
	// SpiceDB is a SpiceDB schema (.zed).
	SpiceDB Format = "spicedb"
)

// ParseFormat accepts "nexus" (or "native", "yaml"), "openfga" (or "fga")
// and "spicedb" (or "zed", "authzed").
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(s) {
	case "nexus", "native", "yaml":
		return Nexus, nil
	case "openfga", "fga":
		return OpenFGA, nil
	case "spicedb", "zed", "authzed":
		return SpiceDB, nil
	}
	return "", fmt.Errorf("%w %q (want openfga, spicedb or nexus)", ErrUnknownFormat, s)
}

// FormatForPath picks a language from a file name: .fga is OpenFGA, .zed
// SpiceDB, anything else "" (unknown; see Detect).
func FormatForPath(name string) Format {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".fga":
		return OpenFGA
	case ".zed":
		return SpiceDB
	}
	return ""
}

// Detect guesses the language of src: an OpenFGA model starts with
// "model" (or is JSON with type_definitions), a SpiceDB schema with
// "definition", "caveat" or "use"; anything else is taken as nexus YAML.
// Comments before the first word are skipped.
func Detect(src []byte) Format {
	s := strings.TrimPrefix(string(src), "\ufeff")
	for {
		s = strings.TrimLeft(s, " \t\r\n")
		switch {
		case strings.HasPrefix(s, "#"), strings.HasPrefix(s, "//"):
			if i := strings.IndexByte(s, '\n'); i >= 0 {
				s = s[i+1:]
				continue
			}
			return Nexus
		case strings.HasPrefix(s, "/*"):
			if i := strings.Index(s, "*/"); i >= 0 {
				s = s[i+2:]
				continue
			}
			return Nexus
		}
		break
	}
	word := s
	if i := strings.IndexAny(word, " \t\r\n{"); i >= 0 {
		word = word[:i]
	}
	switch word {
	case "model", "module":
		return OpenFGA
	case "definition", "caveat", "use", "partial", "import":
		return SpiceDB
	}
	if strings.HasPrefix(s, "{") && bytes.Contains(src, []byte(`"type_definitions"`)) {
		return OpenFGA
	}
	return Nexus
}

// Result is a converted schema.
type Result struct {
	// YAML is the nexus schema in its YAML form, as Schema was parsed from.
	YAML []byte
	// Schema is the parsed and validated nexus schema.
	Schema *datastore.Schema
	// Renames maps an OpenFGA relation that was split ("document#viewer")
	// to the nexus relation that stores its tuples ("viewer_direct").
	// Empty for SpiceDB, which never needs a split.
	Renames Renames
}

// Convert turns a model in language from into a nexus schema. Nexus input
// is parsed as it is (datastore.ParseSchema).
func Convert(src []byte, from Format) (*Result, error) {
	src = bytes.TrimPrefix(src, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark
	switch from {
	case OpenFGA:
		return FromOpenFGA(src)
	case SpiceDB:
		return FromSpiceDB(src)
	case Nexus:
		sc, err := datastore.ParseSchema(src)
		if err != nil {
			return nil, err
		}
		return &Result{YAML: src, Schema: sc, Renames: RenamesFromSchema(src)}, nil
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownFormat, from)
}

// FromOpenFGA converts an OpenFGA model, in the DSL (schema 1.1) or in
// its JSON form (what fga model get --format json prints).
func FromOpenFGA(src []byte) (*Result, error) {
	src = bytes.TrimPrefix(src, []byte("\xef\xbb\xbf"))
	var m *model
	var err error
	if t := bytes.TrimLeft(src, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		m, err = parseOpenFGAJSON(src)
	} else {
		m, err = parseOpenFGA(src)
	}
	if err != nil {
		return nil, err
	}
	return m.convert()
}

// FromSpiceDB converts a SpiceDB schema.
func FromSpiceDB(src []byte) (*Result, error) {
	src = bytes.TrimPrefix(src, []byte("\xef\xbb\xbf"))
	m, err := parseSpiceDB(src)
	if err != nil {
		return nil, err
	}
	return m.convert()
}

// Renames maps "type#relation", as OpenFGA tuples name a relation that was
// split, to the nexus relation that stores those tuples.
type Renames map[string]string

// renameMarker starts the YAML line comment that marks the stored half of
// a split relation: "viewer_direct: [user]  # tuples of OpenFGA's viewer".
const renameMarker = "# tuples of OpenFGA's "

// Tuple returns t with its relation renamed if it names a split relation.
// The subject's relation is kept: a userset such as document:1#viewer
// means the permission, which keeps the original name.
func (r Renames) Tuple(t api.Tuple) api.Tuple {
	if n, ok := r[t.Object.Type+"#"+t.Relation]; ok {
		t.Relation = n
	}
	return t
}

// RenamesFromSchema reads the renames a converted schema records in its
// comments (see Result.Renames), so tuples can be imported into a store
// whose schema was converted earlier. A schema without such comments (or
// one that does not parse) has none.
func RenamesFromSchema(src []byte) Renames {
	out := Renames{}
	if !bytes.Contains(src, []byte(renameMarker)) {
		return out
	}
	var doc yaml.Node
	if yaml.Unmarshal(src, &doc) != nil || len(doc.Content) == 0 {
		return out
	}
	types := mapValue(doc.Content[0], "types")
	if types == nil || types.Kind != yaml.MappingNode {
		return out
	}
	for i := 0; i+1 < len(types.Content); i += 2 {
		tname := types.Content[i].Value
		rels := mapValue(types.Content[i+1], "relations")
		if rels == nil || rels.Kind != yaml.MappingNode {
			continue
		}
		for j := 0; j+1 < len(rels.Content); j += 2 {
			k, v := rels.Content[j], rels.Content[j+1]
			// The mark may end the relation's line or the comment above it.
			head := k.HeadComment
			if i := strings.LastIndexByte(head, '\n'); i >= 0 {
				head = head[i+1:]
			}
			for _, c := range []string{v.LineComment, k.LineComment, head} {
				orig, ok := strings.CutPrefix(c, renameMarker)
				if orig = strings.TrimSpace(orig); ok && api.ValidName(orig) && orig != k.Value {
					out[tname+"#"+orig] = k.Value
					break
				}
			}
		}
	}
	return out
}

func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
