package engine

import (
	"encoding/binary"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// An instance keeps the terms its calls of OPA's builtins read for small
// arguments, by the arguments' content: a policy calls a builtin again and
// again with the same constants (a glob pattern and its delimiters, a
// format string, a regular expression) and, within an evaluation, the same
// request fields, and reading them into new terms on every call was most
// of the cost of such calls. OPA's builtins do not change their operands
// (its evaluator shares terms between calls as well), and the cache
// belongs to one instance, used by one goroutine at a time.
const (
	// argCacheMaxKey bounds the content of a value kept (its key).
	argCacheMaxKey = 4 << 10
	// argCacheMaxEntries bounds the values kept; when full, the cache
	// starts again empty.
	argCacheMaxEntries = 256
)

type argCache struct {
	terms map[string]*ast.Term
	key   []byte
}

// term is the term of the value at p, from the cache when a value of the
// same content was read before; read reads it otherwise.
func (c *argCache) term(m []byte, p uint32, read func() (*ast.Term, error)) (*ast.Term, error) {
	key, ok := argKey(c.key[:0], m, p)
	c.key = key
	if !ok {
		return read()
	}
	return c.termKeyed(key, read)
}

// termKeyed is term for a value whose key (argKey) is known.
func (c *argCache) termKeyed(key []byte, read func() (*ast.Term, error)) (*ast.Term, error) {
	if t, hit := c.terms[string(key)]; hit {
		return t, nil
	}
	t, err := read()
	if err != nil {
		return t, err
	}
	if c.terms == nil || len(c.terms) >= argCacheMaxEntries {
		c.terms = make(map[string]*ast.Term, argCacheMaxEntries)
	}
	c.terms[string(key)] = t
	return t, nil
}

// argKey appends the key of the value at p in memory m: its type and
// content, written so that two values share a key only if readTerm reads
// them as the same term (a number's text, as the runtime holds it, is
// kept; collections in the runtime's order). false when the value is
// larger than argCacheMaxKey, nested deeper than a few levels, or not
// laid out as the runtime lays values out.
func argKey(dst, m []byte, p uint32) (key []byte, ok bool) {
	defer func() {
		if recover() != nil {
			key, ok = dst, false
		}
	}()
	return appendArgKey(dst, m, p, 0)
}

func appendArgKey(dst, m []byte, p uint32, depth int) ([]byte, bool) {
	if depth > 8 || len(dst) > argCacheMaxKey {
		return dst, false
	}
	t := valueType(m, p)
	dst = append(dst, t)
	switch t {
	case opaNull:
		return dst, true
	case opaBoolean:
		return append(dst, m[p+1]), true
	case opaNumber:
		i, text, isInt := numberAt(m, p)
		if isInt {
			return binary.AppendVarint(append(dst, 'i'), i), true
		}
		if len(text) > argCacheMaxKey {
			return dst, false
		}
		return append(binary.AppendUvarint(append(dst, 'r'), uint64(len(text))), text...), true
	case opaString:
		s := stringAt(m, p)
		if len(s) > argCacheMaxKey {
			return dst, false
		}
		return append(binary.AppendUvarint(dst, uint64(len(s))), s...), true
	case opaArray:
		es, n := le32(m, p+4), le32(m, p+8)
		if n > argCacheMaxKey {
			return dst, false
		}
		dst = binary.AppendUvarint(dst, uint64(n))
		ok := true
		for i := uint32(0); i < n && ok; i++ {
			dst, ok = appendArgKey(dst, m, le32(m, es+8*i+4), depth+1)
		}
		return dst, ok
	case opaObject, opaSet:
		// An entry of a bucket's list is (key, value, next) in an
		// object, (value, next) in a set.
		n, bk, nb := le32(m, p+12), le32(m, p+4), le32(m, p+8)
		if n > argCacheMaxKey || nb > uint32(len(m)/4) {
			return dst, false
		}
		dst = binary.AppendUvarint(dst, uint64(n))
		next := uint32(4)
		if t == opaObject {
			next = 8
		}
		seen := uint32(0)
		ok := true
		for b := uint32(0); b < nb && ok; b++ {
			for e := le32(m, bk+4*b); e != 0 && ok; e = le32(m, e+next) {
				if seen++; seen > n {
					return dst, false
				}
				dst, ok = appendArgKey(dst, m, le32(m, e), depth+1)
				if ok && t == opaObject {
					dst, ok = appendArgKey(dst, m, le32(m, e+4), depth+1)
				}
			}
		}
		return dst, ok && seen == n
	}
	return dst, false
}

// An instance also keeps the results of OPA's builtins that are functions
// of their arguments alone (pure), by the builtin and the arguments'
// content: a route table's glob.match of one path, a sprintf of the same
// values, an io.jwt.decode of a session's token are worked out once.
// Booleans come back as the module's own true and false; other results
// are written into the evaluation's heap on every use, as a call's are.
// Only calls that answered (a result or undefined) are kept, never one
// that failed, and results larger than resultMemoMaxSize are not kept.
const (
	resultMemoMaxEntries = 256
	resultMemoMaxSize    = 4 << 10
)

type resultMemo struct {
	results map[string]*ast.Term // nil: the call was undefined
	key     []byte
	// bounds[i] and bounds[i+1] delimit argument i's key (argKey) in key,
	// after the builtin's id.
	bounds [5]int
}

// memoKey appends the key of a call of builtin id with args to the memo's
// buffer; false when an argument cannot be keyed (argKey). After a true,
// argKey(i) is argument i's own key.
func (c *resultMemo) memoKey(m []byte, id uint32, args []uint32) (key []byte, ok bool) {
	defer func() {
		if recover() != nil { // a malformed value (argKey)
			key, ok = c.key[:0], false
		}
	}()
	key = binary.AppendUvarint(c.key[:0], uint64(id))
	c.bounds[0] = len(key)
	ok = true
	for i, a := range args {
		if key, ok = appendArgKey(key, m, a, 0); !ok {
			break
		}
		c.bounds[i+1] = len(key)
	}
	c.key = key
	return key, ok
}

// argKey is argument i's key in the last key memoKey made.
func (c *resultMemo) argKey(i int) []byte { return c.key[c.bounds[i]:c.bounds[i+1]] }

func (c *resultMemo) get(key []byte) (*ast.Term, bool) {
	t, ok := c.results[string(key)]
	return t, ok
}

func (c *resultMemo) put(key []byte, t *ast.Term) {
	if t != nil && !withinSize(t.Value, resultMemoMaxSize) {
		return
	}
	if c.results == nil || len(c.results) >= resultMemoMaxEntries {
		c.results = make(map[string]*ast.Term, resultMemoMaxEntries)
	}
	c.results[string(key)] = t
}

// withinSize reports whether v's content (its strings' and numbers' bytes
// and a few bytes per value) is at most budget bytes.
func withinSize(v ast.Value, budget int) bool {
	left := budget
	var walk func(v ast.Value) bool
	walk = func(v ast.Value) bool {
		left -= 8
		switch x := v.(type) {
		case ast.String:
			left -= len(x)
		case ast.Number:
			left -= len(x)
		case *ast.Array:
			for i := 0; i < x.Len() && left >= 0; i++ {
				walk(x.Elem(i).Value)
			}
		case ast.Object:
			x.Until(func(k, e *ast.Term) bool { return !walk(k.Value) || !walk(e.Value) })
		case ast.Set:
			x.Until(func(e *ast.Term) bool { return !walk(e.Value) })
		}
		return left >= 0
	}
	return walk(v)
}

// pureBuiltin reports whether OPA's builtin name answers from its
// arguments alone, so that its results may be kept: not one OPA marks
// nondeterministic (time.now_ns, rand.intn, http.send, ...), nor one that
// reads the clock or signs with randomness although OPA does not mark it
// (certificate chain verification, JWT signing and verification, whose
// verified tokens have a cache of their own), nor one called for its
// effect (trace, print).
func pureBuiltin(name string) bool {
	b, ok := ast.BuiltinMap[name]
	if !ok || b.Nondeterministic {
		return false
	}
	switch {
	case strings.HasPrefix(name, "io.jwt.") && name != ast.JWTDecode.Name,
		strings.HasPrefix(name, "crypto.x509.parse_and_verify"),
		name == ast.Trace.Name, name == ast.Print.Name:
		return false
	}
	return true
}

// An instance also keeps the heap images of the builtin results it
// writes more than once, by term: a pure builtin's kept result
// (resultMemo) and a verified token's cached answer (jwtCached) come back
// as the same term on every call, and writing it into the heap as the
// runtime's values again was most of such a call's cost. An image is the
// block written before, moved to where opa_malloc puts it this time
// (arena.relocate): the module gets a copy, never the image. A term gets
// an image the second time it is written, so a result new at every call
// costs two lookups; images are kept for at most imageMaxEntries terms of
// at most imageMaxBytes, and both maps hold their terms, so that an
// address is never reused while it is a key.
const (
	imageMaxEntries = 64
	imageMaxBytes   = 16 << 10
)

type termImage struct {
	a    arena
	root uint32 // the value's address in a, relative to a.base
}

type imageMemo struct {
	seen   map[*ast.Term]struct{}
	images map[*ast.Term]*termImage
}

// wrote records that t was written into a (relocated, its value at
// a.base+root), and keeps an image of it if it was written before.
func (m *imageMemo) wrote(t *ast.Term, a *arena, root uint32) {
	if len(a.b) > imageMaxBytes {
		return // neither seen nor kept: the maps hold small terms only
	}
	if _, again := m.seen[t]; !again {
		if m.seen == nil || len(m.seen) >= imageMaxEntries {
			m.seen = make(map[*ast.Term]struct{}, imageMaxEntries)
		}
		m.seen[t] = struct{}{}
		return
	}
	if m.images == nil || len(m.images) >= imageMaxEntries {
		m.images = make(map[*ast.Term]*termImage, imageMaxEntries)
	}
	m.images[t] = &termImage{a: arena{b: slices.Clone(a.b), marks: slices.Clone(a.marks), base: a.base}, root: root}
}
