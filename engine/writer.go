package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// Input is an evaluation's input written ahead of it (EvalInput) as OPA's
// Wasm runtime lays values out, ready to be copied into a policy
// instance's memory. Writer empties it and returns the writer that fills
// it; the zero Input holds no input. An Input is not safe for concurrent
// use.
type Input struct {
	a    arena // empty until Writer is first called
	w    ValueWriter
	ctxp uint32 // the eval context, the arena's first block
}

// Writer empties in and returns the writer of its value, valid until the
// next call of Writer.
func (in *Input) Writer() *ValueWriter {
	in.a.reset()
	in.ctxp = in.a.alloc(sizeCtx)
	in.w.reset(&in.a)
	return &in.w
}

// ValueWriter writes one value, the input of an evaluation, as OPA's Wasm
// runtime lays values out, so that no JSON is written or parsed on the
// way. An Input's Writer returns it.
//
// Scalars are written with Null, Bool, Int, Number and String; a
// collection is opened with BeginArray, BeginObject or BeginSet, filled
// with values (an object's alternate key, value, key, value, ... and keys
// may be any value) and closed with End. A key given twice in an object
// keeps its last value; a set keeps one of equal elements. JSON writes a
// whole JSON text as one value. The first misuse (a second top-level
// value, an End without a Begin, an odd object, an invalid number or
// JSON text) is kept and returned by EvalInput as an *EvalError of code
// CodeInvalidInput.
type ValueWriter struct {
	a      *arena
	stack  []entry
	frames []frame
	root   entry
	has    bool
	err    error
	sbuf   []byte
}

type frame struct {
	kind  byte // opaArray, opaObject or opaSet
	start int
}

func (w *ValueWriter) reset(a *arena) {
	w.a = a
	w.stack = w.stack[:0]
	w.frames = w.frames[:0]
	w.has = false
	w.err = nil
}

func (w *ValueWriter) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

func (w *ValueWriter) push(e entry) {
	if len(w.frames) > 0 {
		w.stack = append(w.stack, e)
		return
	}
	if w.has {
		w.fail(errors.New("more than one top-level value"))
		return
	}
	w.root, w.has = e, true
}

// result is the written value, once every collection is closed.
func (w *ValueWriter) result() (entry, bool, error) {
	if w.err == nil && len(w.frames) > 0 {
		w.fail(errors.New("a collection is not closed"))
	}
	return w.root, w.has, w.err
}

// Null writes null.
func (w *ValueWriter) Null() { w.push(w.a.null()) }

// Bool writes a boolean.
func (w *ValueWriter) Bool(v bool) { w.push(w.a.boolean(v)) }

// Int writes an integer.
func (w *ValueWriter) Int(v int64) { w.push(w.a.integer(v)) }

// Number writes a number given as JSON number text ("1", "-2.5e3"); the
// text is kept as written, as when the number is read from JSON.
func (w *ValueWriter) Number(text string) {
	if !validNumber(text) {
		w.fail(fmt.Errorf("%q is not a JSON number", text))
		return
	}
	w.push(w.a.number(text))
}

// String writes a string (any bytes; input read from JSON is UTF-8).
func (w *ValueWriter) String(s string) { w.push(w.a.str(s)) }

// BeginArray opens an array.
func (w *ValueWriter) BeginArray() { w.frames = append(w.frames, frame{opaArray, len(w.stack)}) }

// BeginObject opens an object.
func (w *ValueWriter) BeginObject() { w.frames = append(w.frames, frame{opaObject, len(w.stack)}) }

// BeginSet opens a set.
func (w *ValueWriter) BeginSet() { w.frames = append(w.frames, frame{opaSet, len(w.stack)}) }

// End closes the innermost open collection.
func (w *ValueWriter) End() {
	if len(w.frames) == 0 {
		w.fail(errors.New("End without Begin"))
		return
	}
	f := w.frames[len(w.frames)-1]
	w.frames = w.frames[:len(w.frames)-1]
	elems := w.stack[f.start:]
	var e entry
	switch f.kind {
	case opaArray:
		e = w.a.array(elems)
	case opaSet:
		e = w.a.set(elems)
	default:
		if len(elems)%2 != 0 {
			w.fail(errors.New("an object has a key without a value"))
			elems = elems[:len(elems)-1]
		}
		e = w.a.object(elems)
	}
	w.stack = w.stack[:f.start]
	w.push(e)
}

// JSON writes the JSON text b (one value) as a value.
func (w *ValueWriter) JSON(b []byte) {
	if !utf8.Valid(b) {
		w.fail(errors.New("JSON text is not UTF-8"))
		return
	}
	p := jsonParser{w: w, b: b}
	if err := p.document(); err != nil {
		w.fail(err)
	}
}

// maxJSONDepth is the nesting encoding/json's scanner accepts.
const maxJSONDepth = 10000

var errSyntax = errors.New("input is not valid JSON")

// jsonParser reads strict JSON (RFC 8259, as json.Valid accepts it) from
// UTF-8 text into a ValueWriter.
type jsonParser struct {
	w     *ValueWriter
	b     []byte
	i     int
	depth int
}

func (p *jsonParser) document() error {
	p.ws()
	if err := p.value(); err != nil {
		return err
	}
	p.ws()
	if p.i != len(p.b) {
		return errSyntax
	}
	return nil
}

func (p *jsonParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) lit(s string) bool {
	if len(p.b)-p.i >= len(s) && string(p.b[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return true
	}
	return false
}

func (p *jsonParser) value() error {
	if p.i >= len(p.b) {
		return errSyntax
	}
	w := p.w
	switch c := p.b[p.i]; {
	case c == '{':
		return p.container('}')
	case c == '[':
		return p.container(']')
	case c == '"':
		return p.str()
	case c == 't':
		if !p.lit("true") {
			return errSyntax
		}
		w.Bool(true)
	case c == 'f':
		if !p.lit("false") {
			return errSyntax
		}
		w.Bool(false)
	case c == 'n':
		if !p.lit("null") {
			return errSyntax
		}
		w.Null()
	case c == '-' || isDigit(c):
		start := p.i
		if !p.number() {
			return errSyntax
		}
		w.push(w.a.number(unsafeString(p.b[start:p.i])))
	default:
		return errSyntax
	}
	return nil
}

func (p *jsonParser) number() bool {
	b, i := p.b, p.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	p.i = i
	return true
}

// validNumber reports whether s is exactly one JSON number.
func validNumber(s string) bool {
	p := jsonParser{b: []byte(s)}
	return len(s) > 0 && p.number() && p.i == len(s)
}

func (p *jsonParser) enter() error {
	if p.depth++; p.depth > maxJSONDepth {
		return errSyntax
	}
	return nil
}

// container reads an array (close ']') or an object (close '}'), whose
// members are a string key, ':' and a value.
func (p *jsonParser) container(close byte) error {
	if err := p.enter(); err != nil {
		return err
	}
	p.i++ // [ or {
	object := close == '}'
	if object {
		p.w.BeginObject()
	} else {
		p.w.BeginArray()
	}
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == close {
		p.i++
	} else {
		for {
			p.ws()
			if object {
				if p.i >= len(p.b) || p.b[p.i] != '"' {
					return errSyntax
				}
				if err := p.str(); err != nil {
					return err
				}
				p.ws()
				if p.i >= len(p.b) || p.b[p.i] != ':' {
					return errSyntax
				}
				p.i++
				p.ws()
			}
			if err := p.value(); err != nil {
				return err
			}
			p.ws()
			if p.i >= len(p.b) {
				return errSyntax
			}
			if p.b[p.i] == ',' {
				p.i++
				continue
			}
			if p.b[p.i] == close {
				p.i++
				break
			}
			return errSyntax
		}
	}
	p.depth--
	p.w.End()
	return nil
}

// str reads a string; text without escapes is copied as is, escapes are
// decoded as encoding/json does (an unpaired surrogate becomes U+FFFD).
func (p *jsonParser) str() error {
	b := p.b
	start := p.i + 1
	i := start + plainLen(b[start:])
	if i >= len(b) {
		return errSyntax
	}
	if b[i] < 0x20 {
		return errSyntax
	}
	if b[i] == '"' {
		p.w.push(p.w.a.str(unsafeString(b[start:i])))
		p.i = i + 1
		return nil
	}
	out := append(p.w.sbuf[:0], b[start:i]...)
	for {
		if i >= len(b) {
			return errSyntax
		}
		c := b[i]
		switch {
		case c == '"':
			p.w.sbuf = out
			p.w.push(p.w.a.str(unsafeString(out)))
			p.i = i + 1
			return nil
		case c < 0x20:
			return errSyntax
		case c != '\\':
			out = append(out, c)
			i++
			continue
		}
		i++
		if i >= len(b) {
			return errSyntax
		}
		switch b[i] {
		case '"', '\\', '/':
			out = append(out, b[i])
			i++
		case 'b':
			out = append(out, '\b')
			i++
		case 'f':
			out = append(out, '\f')
			i++
		case 'n':
			out = append(out, '\n')
			i++
		case 'r':
			out = append(out, '\r')
			i++
		case 't':
			out = append(out, '\t')
			i++
		case 'u':
			r, ok := hex4(b, i+1)
			if !ok {
				return errSyntax
			}
			i += 5
			if utf16.IsSurrogate(r) {
				if r2, ok := hex4(b, i+2); ok && i+1 < len(b) && b[i] == '\\' && b[i+1] == 'u' {
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						out = utf8.AppendRune(out, dec)
						i += 6
						continue
					}
				}
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
		default:
			return errSyntax
		}
	}
}

// plainLen is the length of the prefix of b that a string's text may
// hold as is: up to the first '"', '\\' or control character (or all of b).
// It reads eight bytes at a time.
func plainLen(b []byte) int {
	const (
		lo = 0x0101010101010101
		hi = 0x8080808080808080
	)
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q := x ^ ('"' * lo)  // zero bytes where '"'
		s := x ^ ('\\' * lo) // zero bytes where '\\'
		// A byte has its high bit set in m if it is zero in q or s or
		// below 0x20 in x (exact for bytes < 0x80; a byte >= 0x80 never
		// sets it, as ^x clears it).
		m := ((q - lo) | (s - lo) | (x - 0x20*lo)) & ^x & hi
		if m != 0 {
			break
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return i
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r*16 + rune(c)
	}
	return r, true
}
