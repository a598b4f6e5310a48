// Package prune drops the parts of an input document that a policy never
// reads, so that the Wasm module parses less JSON and equal requests that
// differ only in unread fields (a request id) share a cache entry.
package prune

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
)

// ErrMalformed reports input that is not a well-formed JSON object.
var ErrMalformed = errors.New("prune: malformed JSON")

// Tree is the set of input paths a policy reads. A nil *Tree keeps
// everything.
type Tree struct {
	// children are the keys read under this node; a node without children
	// is read whole.
	children map[string]*Tree
	keys     []string // the children's keys, sorted
	kids     []*Tree  // the children, in the order of keys
}

// linearKeys is the most children a node finds its child among by
// comparing keys one by one, which costs less than hashing the key when
// they are few (BenchmarkWriteEnvoy); a node with more uses its map.
const linearKeys = 8

// find returns the child of key and whether there is one.
func (t *Tree) find(key string) (*Tree, bool) {
	if len(t.keys) > linearKeys {
		c, ok := t.children[key]
		return c, ok
	}
	for i, k := range t.keys {
		if k == key {
			return t.kids[i], true
		}
	}
	return nil, false
}

// Child returns the node of key under t and whether key is kept at all. A
// nil node (from a nil t, or for a key kept whole) keeps everything under
// it.
func (t *Tree) Child(key string) (*Tree, bool) {
	if t == nil {
		return nil, true
	}
	c, ok := t.find(key)
	if !ok {
		return nil, false
	}
	if c.children == nil {
		return nil, true
	}
	return c, true
}

// Keys lists the keys kept under t, sorted; nil when t keeps everything.
func (t *Tree) Keys() []string {
	if t == nil {
		return nil
	}
	return t.keys
}

// New builds the tree of paths (each a list of object keys from the root
// of input; each path's whole subtree is kept). No paths at all means the
// policy reads no input: everything is dropped.
func New(paths [][]string) *Tree {
	root := &Tree{children: map[string]*Tree{}}
	for _, p := range paths {
		n := root
		for i, k := range p {
			c, ok := n.children[k]
			if !ok {
				c = &Tree{children: map[string]*Tree{}}
				n.children[k] = c
			} else if c.children == nil {
				break // an ancestor is already kept whole
			}
			n = c
			if i == len(p)-1 {
				n.children = nil // keep whole
			}
		}
	}
	root.sortKeys()
	return root
}

func (t *Tree) sortKeys() {
	if t.children == nil {
		return
	}
	t.keys = make([]string, 0, len(t.children))
	for k, c := range t.children {
		t.keys = append(t.keys, k)
		c.sortKeys()
	}
	slices.Sort(t.keys)
	t.kids = make([]*Tree, len(t.keys))
	for i, k := range t.keys {
		t.kids[i] = t.children[k]
	}
}

// Append appends src (a JSON object) with only the paths of t to dst. A nil
// t copies src.
func (t *Tree) Append(dst, src []byte) ([]byte, error) {
	if t == nil {
		return append(dst, src...), nil
	}
	i := skipSpace(src, 0)
	out, i, err := t.object(dst, src, i)
	if err != nil {
		return dst, err
	}
	if skipSpace(src, i) != len(src) {
		return dst, ErrMalformed
	}
	return out, nil
}

// object copies the object at src[i] keeping t's keys; it returns the
// index after it.
func (t *Tree) object(dst, src []byte, i int) ([]byte, int, error) {
	if i >= len(src) || src[i] != '{' {
		return dst, 0, ErrMalformed
	}
	dst = append(dst, '{')
	first := true
	i = skipSpace(src, i+1)
	if i < len(src) && src[i] == '}' {
		return append(dst, '}'), i + 1, nil
	}
	for {
		ks := skipSpace(src, i)
		ke, err := skipString(src, ks)
		if err != nil {
			return dst, 0, err
		}
		child, kept, err := t.lookup(src[ks:ke])
		if err != nil {
			return dst, 0, err
		}
		c := skipSpace(src, ke)
		if c >= len(src) || src[c] != ':' {
			return dst, 0, ErrMalformed
		}
		vs := skipSpace(src, c+1)
		ve, err := skipValue(src, vs)
		if err != nil {
			return dst, 0, err
		}
		if kept {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = append(dst, src[ks:ke]...)
			dst = append(dst, ':')
			if child.children != nil && src[vs] == '{' {
				if dst, _, err = child.object(dst, src, vs); err != nil {
					return dst, 0, err
				}
			} else {
				dst = append(dst, src[vs:ve]...)
			}
		}
		i = skipSpace(src, ve)
		if i >= len(src) {
			return dst, 0, ErrMalformed
		}
		switch src[i] {
		case ',':
			i++
		case '}':
			return append(dst, '}'), i + 1, nil
		default:
			return dst, 0, ErrMalformed
		}
	}
}

// lookup finds the child of the quoted key; only a key with escapes is
// decoded (and allocated).
func (t *Tree) lookup(quoted []byte) (*Tree, bool, error) {
	raw := quoted[1 : len(quoted)-1]
	if bytes.IndexByte(raw, '\\') < 0 {
		c, ok := t.find(string(raw))
		return c, ok, nil
	}
	var s string
	if err := json.Unmarshal(quoted, &s); err != nil {
		return nil, false, ErrMalformed
	}
	c, ok := t.find(s)
	return c, ok, nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

func skipString(b []byte, i int) (int, error) {
	if i >= len(b) || b[i] != '"' {
		return 0, ErrMalformed
	}
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1, nil
		}
	}
	return 0, ErrMalformed
}

// skipValue returns the index after the JSON value at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, ErrMalformed
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				e, err := skipString(b, i)
				if err != nil {
					return 0, err
				}
				i = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, nil
				}
			}
		}
		return 0, ErrMalformed
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\n' && b[j] != '\t' && b[j] != '\r' {
			j++
		}
		if j == i {
			return 0, ErrMalformed
		}
		return j, nil
	}
}
