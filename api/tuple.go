package api

import (
	"errors"
	"fmt"
	"strings"
)

// Limits on names and IDs; see the package documentation.
const (
	// MaxNameLen is the longest type or relation name, in bytes.
	MaxNameLen = 64
	// MaxIDLen is the longest object or subject ID, in bytes.
	MaxIDLen = 256
)

// Object is a typed object, written type:id.
type Object struct {
	Type string
	ID   string
}

// Subject is who a tuple grants to: an object (type:id, Relation empty) or a
// userset (type:id#relation: every subject that has Relation on type:id).
type Subject struct {
	Type     string
	ID       string
	Relation string
}

// Tuple is one relationship: Subject has Relation on Object.
type Tuple struct {
	Object   Object
	Relation string
	Subject  Subject
}

// ValidName reports whether s is a valid type or relation name.
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > MaxNameLen || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

var idChar = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "_-.=+/|~" {
		t[c] = true
	}
	return t
}()

// ValidID reports whether s is a valid object or subject ID.
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > MaxIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !idChar[s[i]] {
			return false
		}
	}
	return true
}

// String returns type:id.
func (o Object) String() string { return o.Type + ":" + o.ID }

// String returns type:id or type:id#relation.
func (s Subject) String() string {
	if s.Relation == "" {
		return s.Type + ":" + s.ID
	}
	return s.Type + ":" + s.ID + "#" + s.Relation
}

// Object returns the subject's object (its type and ID).
func (s Subject) Object() Object { return Object{Type: s.Type, ID: s.ID} }

// String returns the tuple in its text syntax.
func (t Tuple) String() string {
	var b strings.Builder
	b.Grow(len(t.Object.Type) + len(t.Object.ID) + len(t.Relation) + len(t.Subject.Type) + len(t.Subject.ID) + len(t.Subject.Relation) + 5)
	b.WriteString(t.Object.Type)
	b.WriteByte(':')
	b.WriteString(t.Object.ID)
	b.WriteByte('#')
	b.WriteString(t.Relation)
	b.WriteByte('@')
	b.WriteString(t.Subject.Type)
	b.WriteByte(':')
	b.WriteString(t.Subject.ID)
	if t.Subject.Relation != "" {
		b.WriteByte('#')
		b.WriteString(t.Subject.Relation)
	}
	return b.String()
}

// Validate checks every name and ID of the tuple against the documented limits.
func (t Tuple) Validate() error {
	if err := t.Object.Validate(); err != nil {
		return err
	}
	if !ValidName(t.Relation) {
		return &SyntaxError{Input: t.Relation, Msg: "invalid relation name"}
	}
	return t.Subject.Validate()
}

// Validate checks the object's type and ID.
func (o Object) Validate() error {
	if !ValidName(o.Type) {
		return &SyntaxError{Input: o.Type, Msg: "invalid type name"}
	}
	if !ValidID(o.ID) {
		return &SyntaxError{Input: o.ID, Msg: "invalid object id"}
	}
	return nil
}

// Validate checks the subject's type, ID and relation.
func (s Subject) Validate() error {
	if err := (Object{Type: s.Type, ID: s.ID}).Validate(); err != nil {
		return err
	}
	if s.Relation != "" && !ValidName(s.Relation) {
		return &SyntaxError{Input: s.Relation, Msg: "invalid subject relation name"}
	}
	return nil
}

// ErrSyntax is matched (errors.Is) by every *SyntaxError.
var ErrSyntax = errors.New("api: invalid syntax")

// SyntaxError reports text that is not a valid object, subject or tuple.
type SyntaxError struct {
	Input string // the offending text (truncated to 300 bytes)
	Msg   string // what is wrong
}

func (e *SyntaxError) Error() string {
	in := e.Input
	if len(in) > 300 {
		in = in[:300] + "..."
	}
	return fmt.Sprintf("api: %s: %q", e.Msg, in)
}

// Is makes errors.Is(err, ErrSyntax) true.
func (e *SyntaxError) Is(target error) bool { return target == ErrSyntax }

// ParseObject parses type:id.
func ParseObject(s string) (Object, error) {
	o, ok := parseObject(s)
	if !ok {
		return Object{}, &SyntaxError{Input: s, Msg: "want object type:id"}
	}
	return o, nil
}

func parseObject(s string) (Object, bool) {
	i := strings.IndexByte(s, ':')
	if i < 0 {
		return Object{}, false
	}
	o := Object{Type: s[:i], ID: s[i+1:]}
	return o, ValidName(o.Type) && ValidID(o.ID)
}

// SplitObject splits "type:id" without validating either part, for a
// caller that hands the parts to something that validates them (the
// store) and should not pay for it twice.
func SplitObject(s string) (Object, error) {
	typ, id, ok := strings.Cut(s, ":")
	if !ok {
		return Object{}, &SyntaxError{Input: s, Msg: "want object type:id"}
	}
	return Object{Type: typ, ID: id}, nil
}

// SplitSubject splits "type:id" or "type:id#relation" without validating
// the parts, as SplitObject; only an empty relation after '#' is refused.
func SplitSubject(s string) (Subject, error) {
	obj, rel, hasRel := strings.Cut(s, "#")
	o, err := SplitObject(obj)
	if err != nil || (hasRel && rel == "") {
		return Subject{}, &SyntaxError{Input: s, Msg: "want subject type:id or type:id#relation"}
	}
	return Subject{Type: o.Type, ID: o.ID, Relation: rel}, nil
}

// ParseSubject parses type:id or type:id#relation.
func ParseSubject(s string) (Subject, error) {
	sub, ok := parseSubject(s)
	if !ok {
		return Subject{}, &SyntaxError{Input: s, Msg: "want subject type:id or type:id#relation"}
	}
	return sub, nil
}

func parseSubject(s string) (Subject, bool) {
	rel := ""
	if i := strings.IndexByte(s, '#'); i >= 0 {
		rel = s[i+1:]
		s = s[:i]
		if !ValidName(rel) {
			return Subject{}, false
		}
	}
	o, ok := parseObject(s)
	return Subject{Type: o.Type, ID: o.ID, Relation: rel}, ok
}

// ParseTuple parses type:id#relation@type:id[#relation]. It does not allocate
// unless the input is invalid.
func ParseTuple(s string) (Tuple, error) {
	t, ok := parseTuple(s)
	if !ok {
		return Tuple{}, &SyntaxError{Input: s, Msg: "want tuple type:id#relation@type:id[#relation]"}
	}
	return t, nil
}

func parseTuple(s string) (Tuple, bool) {
	at := strings.IndexByte(s, '@')
	if at < 0 {
		return Tuple{}, false
	}
	left := s[:at]
	hash := strings.IndexByte(left, '#')
	if hash < 0 {
		return Tuple{}, false
	}
	obj, ok := parseObject(left[:hash])
	if !ok {
		return Tuple{}, false
	}
	rel := left[hash+1:]
	if !ValidName(rel) {
		return Tuple{}, false
	}
	sub, ok := parseSubject(s[at+1:])
	if !ok {
		return Tuple{}, false
	}
	return Tuple{Object: obj, Relation: rel, Subject: sub}, true
}
