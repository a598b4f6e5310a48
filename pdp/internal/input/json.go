package input

import (
	"encoding/base64"
	"math"
	"strconv"
	"sync"
	"unicode/utf8"
	"unsafe"

	"github.com/nexuspdp/nexus/internal/jsonw"
	"github.com/nexuspdp/nexus/pdp/internal/prune"
)

// Writer receives the input document as a sequence of values, as the
// engine's ValueWriter takes them: scalars with Null, Bool, Int, Number
// and String; a collection opened with BeginArray or BeginObject, filled
// and closed with End; an object's members as alternate key, value, key,
// value (keys written with String); JSON writes a whole JSON text (one
// compact, valid value) as one value.
//
// The values are those encoding/json reads from AppendEnvoy's JSON:
// every string is UTF-8 (a byte of a decoded path, query, form or
// multipart body that is not is given as U+FFFD, as the JSON escapes it),
// but for a string that Options.UTF8Checked wrongly vouches for. The
// strings and bytes given to a Writer are valid only during the call: one
// that keeps them copies them.
type Writer interface {
	Null()
	Bool(v bool)
	Int(v int64)
	Number(text string)
	String(s string)
	BeginArray()
	BeginObject()
	End()
	JSON(b []byte)
}

// jsonWriter is the Writer that appends the document as compact JSON
// text, strings escaped as encoding/json escapes them.
type jsonWriter struct {
	buf   []byte
	st    byte   // where the next value goes
	stack []byte // st of the enclosing collections
}

// The places of a value.
const (
	atTop       byte = iota
	atFirstElem      // an array's first element
	atElem           // an array's element after another
	atFirstKey       // an object's first key
	atKey            // an object's key after a member
	atValue          // an object's value (after its key)
)

// sepBefore is what goes before a value at each place: a comma after
// another element or member, a colon after a key.
var sepBefore = [8]byte{atElem: ',', atKey: ',', atValue: ':'}

// nextPlace is the place after a value at each place.
var nextPlace = [8]byte{atFirstElem: atElem, atElem: atElem, atFirstKey: atValue, atKey: atValue, atValue: atKey}

var _ Writer = (*jsonWriter)(nil)

func (w *jsonWriter) reset(dst []byte) {
	w.buf, w.st, w.stack = dst, atTop, w.stack[:0]
}

func (w *jsonWriter) before() {
	if c := sepBefore[w.st&7]; c != 0 {
		w.buf = append(w.buf, c)
	}
}

func (w *jsonWriter) after() { w.st = nextPlace[w.st&7] }

func (w *jsonWriter) Null() {
	w.before()
	w.buf = append(w.buf, "null"...)
	w.after()
}

func (w *jsonWriter) Bool(v bool) {
	w.before()
	w.buf = strconv.AppendBool(w.buf, v)
	w.after()
}

func (w *jsonWriter) Int(v int64) {
	w.before()
	w.buf = strconv.AppendInt(w.buf, v, 10)
	w.after()
}

func (w *jsonWriter) Number(text string) {
	w.before()
	w.buf = append(w.buf, text...)
	w.after()
}

func (w *jsonWriter) String(s string) {
	w.before()
	w.buf = jsonw.String(w.buf, s)
	w.after()
}

// JSON appends b as is: the builder passes compact, valid JSON.
func (w *jsonWriter) JSON(b []byte) {
	w.before()
	w.buf = append(w.buf, b...)
	w.after()
}

func (w *jsonWriter) BeginArray() {
	w.before()
	w.buf = append(w.buf, '[')
	w.stack = append(w.stack, w.st)
	w.st = atFirstElem
}

func (w *jsonWriter) BeginObject() {
	w.before()
	w.buf = append(w.buf, '{')
	w.stack = append(w.stack, w.st)
	w.st = atFirstKey
}

func (w *jsonWriter) End() {
	if w.st == atFirstElem || w.st == atElem {
		w.buf = append(w.buf, ']')
	} else {
		w.buf = append(w.buf, '}')
	}
	w.st = w.stack[len(w.stack)-1]
	w.stack = w.stack[:len(w.stack)-1]
	w.after()
}

// builder writes the values of a document to a Writer, with a scratch
// buffer for the text of numbers and base64.
//
// The JSON Writer is called through the interface too: a builder that
// called it directly when it is the one written to measured no faster.
type builder struct {
	w   Writer
	js  jsonWriter // the JSON Writer of appendJSON
	tmp []byte
	// ordered: maps are written with their keys sorted, as JSON text
	// needs (Options.AnyOrder).
	ordered bool
}

var builders = sync.Pool{New: func() any {
	return &builder{js: jsonWriter{stack: make([]byte, 0, 16)}, tmp: make([]byte, 0, 64)}
}}

// build runs f with a builder writing to w, maps with their keys sorted
// if ordered.
func build(w Writer, ordered bool, f func(*builder) error) error {
	b := builders.Get().(*builder)
	b.w, b.ordered = w, ordered
	err := f(b)
	b.release()
	return err
}

// appendJSON appends to dst the JSON of the values f writes, or returns
// dst and f's error.
func appendJSON(dst []byte, f func(*builder) error) ([]byte, error) {
	b := builders.Get().(*builder)
	b.js.reset(dst)
	b.w, b.ordered = &b.js, true
	err := f(b)
	out := b.js.buf
	b.release()
	if err != nil {
		return dst, err
	}
	return out, nil
}

func (b *builder) release() {
	b.w, b.js.buf = nil, nil
	if cap(b.tmp) <= 1<<16 && cap(b.js.stack) <= 1<<10 {
		builders.Put(b)
	}
}

// scratch is b.tmp as a string, valid until b.tmp is written again.
func (b *builder) scratch() string {
	return unsafe.String(unsafe.SliceData(b.tmp), len(b.tmp))
}

// uint writes an unsigned integer as a number.
func (b *builder) uint(v uint64) {
	if v <= math.MaxInt64 {
		b.w.Int(int64(v))
		return
	}
	b.tmp = strconv.AppendUint(b.tmp[:0], v, 10)
	b.w.Number(b.scratch())
}

// double writes a double as OPA holds a Go float64 (strconv's shortest
// 'g' form), or, for NaN and the infinities, as the strings structpb
// turns them into.
func (b *builder) double(f float64) { b.float(f, 'g', 64) }

// float32 writes a float as the shortest decimal of its 32 bits.
func (b *builder) float32(f float64) { b.float(f, 'f', 32) }

// float writes f as the shortest decimal of its bits in format fmt, or,
// for NaN and the infinities, as the strings structpb turns them into.
func (b *builder) float(f float64, fmt byte, bits int) {
	if nonFinite(f) {
		b.nonFinite(f)
		return
	}
	b.tmp = strconv.AppendFloat(b.tmp[:0], f, fmt, -1, bits)
	b.w.Number(b.scratch())
}

func nonFinite(f float64) bool { return math.IsNaN(f) || math.IsInf(f, 0) }

func (b *builder) nonFinite(f float64) {
	switch {
	case math.IsNaN(f):
		b.w.String("NaN")
	case f > 0:
		b.w.String("Infinity")
	default:
		b.w.String("-Infinity")
	}
}

// base64 writes bytes as a string in standard base64.
func (b *builder) base64(v []byte) {
	b.tmp = base64.StdEncoding.AppendEncode(b.tmp[:0], v)
	b.w.String(b.scratch())
}

// text writes a string that may not be UTF-8 (a percent-decoded path or
// query, a form or multipart body) as JSON carries it: each byte that is
// not part of a UTF-8 character becomes U+FFFD, as jsonw.String writes
// it, so that every Writer gets the same value.
func (b *builder) text(s string) {
	if _, ok := b.w.(*jsonWriter); ok || utf8.ValidString(s) {
		// jsonWriter escapes each such byte as \ufffd itself.
		b.w.String(s)
		return
	}
	b.tmp = b.tmp[:0]
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.tmp = utf8.AppendRune(b.tmp, utf8.RuneError)
		} else {
			b.tmp = append(b.tmp, s[i:i+size]...)
		}
		i += size
	}
	b.w.String(b.scratch())
}

// obj writes the members of an object. Members not in sel (when sel is
// not nil) are left out.
type obj struct {
	b   *builder
	sel *prune.Tree
}

// object opens an object whose members sel selects.
func (b *builder) object(sel *prune.Tree) obj {
	b.w.BeginObject()
	return obj{b: b, sel: sel}
}

// member starts member k if sel keeps it, and returns the selection under
// it.
func (o *obj) member(k string) (*prune.Tree, bool) {
	c, ok := o.sel.Child(k)
	if ok {
		o.b.w.String(k)
	}
	return c, ok
}

func (o *obj) str(k, v string) {
	if v == "" {
		return
	}
	if _, ok := o.member(k); !ok {
		return
	}
	o.b.w.String(v)
}

// int64 writes a non-zero integer as a number.
func (o *obj) int64(k string, v int64) {
	if v == 0 {
		return
	}
	if _, ok := o.member(k); !ok {
		return
	}
	o.b.w.Int(v)
}

func (o *obj) bytes(k string, v []byte) {
	if len(v) == 0 {
		return
	}
	if _, ok := o.member(k); !ok {
		return
	}
	o.b.base64(v)
}

func (o *obj) close() { o.b.w.End() }
