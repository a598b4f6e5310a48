// Package jsonscan reads JSON text in place, without decoding it: the
// values of a few keys of an object, a string's value. It serves the
// readers of documents nexus writes itself (nexus.envoy_decide's request,
// the input documents a policy's Go decider reads), where decoding the
// whole document would cost more than the decision.
package jsonscan

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Scanner reads JSON text from its start: values are consumed one
// after the other without being decoded.
type Scanner struct {
	s string
	i int
}

// NewScanner returns a Scanner of s.
func NewScanner(s string) Scanner { return Scanner{s: s} }

// Done reports whether the whole text was consumed.
func (sc *Scanner) Done() bool { return sc.i == len(sc.s) }

func (sc *Scanner) skipSpace() {
	for sc.i < len(sc.s) && (sc.s[sc.i] == ' ' || sc.s[sc.i] == '\t' || sc.s[sc.i] == '\n' || sc.s[sc.i] == '\r') {
		sc.i++
	}
}

// Next consumes c if it comes next.
func (sc *Scanner) Next(c byte) bool {
	sc.skipSpace()
	if sc.i < len(sc.s) && sc.s[sc.i] == c {
		sc.i++
		return true
	}
	return false
}

// Str consumes a string and returns its value.
func (sc *Scanner) Str() (string, bool) {
	raw, ok := sc.Value()
	if !ok || raw[0] != '"' {
		return "", false
	}
	return Unquote(raw)
}

// Unquote decodes a JSON string.
func Unquote(raw string) (string, bool) {
	if inner := raw[1 : len(raw)-1]; !strings.ContainsAny(inner, "\\\"") && utf8.ValidString(inner) {
		return inner, true
	}
	var s string
	err := json.Unmarshal([]byte(raw), &s)
	return s, err == nil
}

// Value consumes any JSON value and returns its text.
func (sc *Scanner) Value() (string, bool) {
	sc.skipSpace()
	start := sc.i
	depth := 0
	for sc.i < len(sc.s) {
		switch c := sc.s[sc.i]; c {
		case '"':
			sc.i++
			for sc.i < len(sc.s) && sc.s[sc.i] != '"' {
				if sc.s[sc.i] == '\\' {
					sc.i++
				}
				sc.i++
			}
			if sc.i >= len(sc.s) {
				return "", false
			}
			sc.i++
		case '[', '{':
			depth++
			sc.i++
		case ']', '}':
			if depth == 0 {
				return sc.end(start)
			}
			depth--
			sc.i++
		case ',':
			if depth == 0 {
				return sc.end(start)
			}
			sc.i++
		default:
			sc.i++
		}
		if depth == 0 && sc.i > start && (sc.s[sc.i-1] == '"' || sc.s[sc.i-1] == ']' || sc.s[sc.i-1] == '}') {
			return sc.end(start)
		}
	}
	return sc.end(start)
}

// end returns the value consumed since start. It is not validated: a
// string is when it is decoded, the JWT payloads when they are parsed, and
// any other subject is not a string, so not a valid one.
func (sc *Scanner) end(start int) (string, bool) {
	raw := strings.TrimSpace(sc.s[start:sc.i])
	return raw, raw != ""
}
