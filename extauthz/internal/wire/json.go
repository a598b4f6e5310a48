package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/nexuspdp/nexus/pdp"
)

// MaxDepth is how deeply the JSON body of a request may nest objects and
// arrays. Checks read a few levels; a deeper body only costs CPU in every
// parser it crosses (the decoder, the input document, the policy's).
const MaxDepth = 64

// ReadJSON reads a JSON request body of at most limit bytes (more is
// pdp.ErrTooLarge) and scans it (Scan): every API that takes JSON reads
// its body here.
func ReadJSON(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body, err := ReadBody(w, r, limit)
	if err != nil {
		return nil, err
	}
	if err := Scan(body); err != nil {
		return nil, err
	}
	return body, nil
}

// Scan refuses, as pdp.ErrBadRequest naming the byte offset, a body that
// is not valid UTF-8, that nests deeper than MaxDepth, or that has an
// object with a key twice (encoding/json would keep the last, and two
// readers of the same body could disagree on its meaning). It does not
// check the rest of the syntax: the decoder does. One pass, no
// allocation for objects of up to a few dozen keys.
func Scan(body []byte) error {
	if !utf8.Valid(body) {
		return pdp.Errorf(pdp.ErrBadRequest, "the body is not valid UTF-8 (at byte %d)", invalidUTF8At(body))
	}
	return scan(body)
}

// invalidUTF8At is the offset of the first byte of b that is not valid
// UTF-8.
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// level is one open object or array of a scan.
type level struct {
	obj bool
	// first is the index in keys of this object's first key; seen holds
	// its keys instead once it has more than linearKeys.
	first int
	seen  map[string]struct{}
}

// linearKeys is how many keys an object's duplicate test compares one by
// one before it uses a map.
const linearKeys = 16

// scan is Scan on valid UTF-8. Its state lives on the stack: the open
// levels, and the keys of the open objects (slices of body, or of their
// unescaped copies).
func scan(body []byte) error {
	var stack [MaxDepth]level
	var keyBuf [32][]byte
	keys := keyBuf[:0]
	depth := 0
	expectKey := false
	for i := 0; i < len(body); {
		switch c := body[i]; c {
		case '{', '[':
			if depth == MaxDepth {
				return pdp.Errorf(pdp.ErrBadRequest, "JSON nested deeper than %d (at byte %d)", MaxDepth, i)
			}
			stack[depth] = level{obj: c == '{', first: len(keys)}
			depth++
			expectKey = c == '{'
			i++
		case '}', ']':
			if depth > 0 {
				depth--
				keys = keys[:stack[depth].first]
				stack[depth].seen = nil
			}
			expectKey = false
			i++
		case ',':
			expectKey = depth > 0 && stack[depth-1].obj
			i++
		case ':':
			expectKey = false
			i++
		case '"':
			end, escaped := stringEnd(body, i)
			if end < 0 {
				return nil // unterminated: the decoder says so
			}
			if expectKey {
				key := body[i+1 : end]
				if escaped {
					var s string
					if json.Unmarshal(body[i:end+1], &s) == nil {
						key = []byte(s)
					}
				}
				var dup bool
				if keys, dup = duplicate(&stack[depth-1], keys, key); dup {
					return pdp.Errorf(pdp.ErrBadRequest, "duplicate key %q in a JSON object (at byte %d)", key, i)
				}
				expectKey = false
			}
			i = end + 1
		default:
			i++
		}
	}
	return nil
}

// stringEnd is the offset of the quote that ends the string starting at
// body[start] (-1 if none), and whether the string has escapes.
func stringEnd(body []byte, start int) (end int, escaped bool) {
	for j := start + 1; j < len(body); j++ {
		switch body[j] {
		case '"':
			return j, escaped
		case '\\':
			escaped = true
			j++
		}
	}
	return -1, escaped
}

// duplicate records key among the keys of the object l (those of keys
// from l.first, or l.seen) and reports whether it was already there.
func duplicate(l *level, keys [][]byte, key []byte) ([][]byte, bool) {
	if l.seen != nil {
		if _, ok := l.seen[string(key)]; ok {
			return keys, true
		}
		l.seen[string(key)] = struct{}{}
		return keys, false
	}
	mine := keys[l.first:]
	for _, k := range mine {
		if bytes.Equal(k, key) {
			return keys, true
		}
	}
	if len(mine) < linearKeys {
		return append(keys, key), false
	}
	l.seen = make(map[string]struct{}, 2*linearKeys)
	for _, k := range mine {
		l.seen[string(k)] = struct{}{}
	}
	l.seen[string(key)] = struct{}{}
	return keys[:l.first], false
}

// DecodeJSON decodes one JSON value of body (a body ReadJSON read, or a
// part of one) into v, numbers as json.Number. Strict refuses an object
// member v has no field for, naming it. Anything after the value is an
// error. Every error is pdp.ErrBadRequest, described without Go's type
// names; name is what the message calls the value ("the body" if "").
func DecodeJSON(body []byte, v any, strict bool, name string) error {
	if name == "" {
		name = "the body"
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return pdp.Errorf(pdp.ErrBadRequest, "%s", describeJSONError(err, name))
	}
	if dec.More() {
		return pdp.Errorf(pdp.ErrBadRequest, "unexpected data after the JSON value")
	}
	return nil
}

// describeJSONError says what is wrong with a value encoding/json could
// not decode, in the request's terms (JSON field names and types).
func describeJSONError(err error, name string) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("malformed JSON at byte %d: %s", syn.Offset, strings.TrimPrefix(syn.Error(), "json: "))
	case errors.As(err, &typ):
		if typ.Field != "" {
			return fmt.Sprintf("%s must be %s, not %s", typ.Field, typeName(typ.Type.Kind().String()), typ.Value)
		}
		return fmt.Sprintf("%s must be %s, not %s", name, typeName(typ.Type.Kind().String()), typ.Value)
	case errors.Is(err, io.EOF):
		return name + " is empty"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends early"
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return "unknown field " + f
	}
	// Other decoder errors name Go types: say only that the value does
	// not decode.
	return name + " is not a valid request"
}

func typeName(kind string) string {
	switch kind {
	case "map", "struct":
		return "an object"
	case "slice", "array":
		return "an array"
	case "bool":
		return "a boolean"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "float32", "float64":
		return "a number"
	case "interface":
		return "a value"
	}
	return "a " + kind
}

// CheckURL refuses, as pdp.ErrBadRequest, a request whose path or query
// parameters (names and values, percent-decoded) are not valid UTF-8.
func CheckURL(r *http.Request) error {
	if !utf8.ValidString(r.URL.Path) {
		return pdp.Errorf(pdp.ErrBadRequest, "the path is not valid UTF-8")
	}
	q := r.URL.RawQuery
	if q == "" {
		return nil
	}
	if !utf8.ValidString(q) {
		return pdp.Errorf(pdp.ErrBadRequest, "the query is not valid UTF-8")
	}
	for q != "" {
		var pair string
		pair, q, _ = strings.Cut(q, "&")
		k, v, _ := strings.Cut(pair, "=")
		for _, s := range [2]string{k, v} {
			// What url.ParseQuery reads; a pair it cannot read it drops.
			if d, err := url.QueryUnescape(s); err == nil && !utf8.ValidString(d) {
				return pdp.Errorf(pdp.ErrBadRequest, "a query parameter is not valid UTF-8")
			}
		}
	}
	return nil
}
