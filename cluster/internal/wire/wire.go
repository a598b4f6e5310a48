// Package wire is the format of the messages in a cluster's log: one
// message per write batch, JSON with a version number, tuples in their
// text syntax (api.ParseTuple). Every replica decodes every message, so
// decoding is strict: an unknown version, kind or field is an error, and
// the replica records the message's revision as a rejected batch.
//
//	{"v":1,"kind":"write","touches":["folder:a#viewer@user:ann"],
//	 "preconditions":[{"filter":{"object_type":"folder","object_id":"a"},"must_exist":true}]}
//	{"v":1,"kind":"schema","schema":"types: ...","force":false}
//	{"v":1,"kind":"policy","policy":{"object":"policy/<sha256>","sha256":"<hex>","size":1234}}
package wire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/schema"
)

// Version is the message format version this package writes and reads.
const Version = 1

// Kinds of message.
const (
	KindWrite  = "write"  // relationship touches and deletes with preconditions
	KindSchema = "schema" // a schema write
	KindPolicy = "policy" // a policy bundle load; the bundle is in the object store
	KindFence  = "fence"  // voids an attempt of a write (its message id) that did not land before it
)

// ErrMalformed is wrapped by every Decode error.
var ErrMalformed = errors.New("wire: malformed log message")

// Message is one log entry.
type Message struct {
	V             int            `json:"v"`
	Kind          string         `json:"kind"`
	Origin        string         `json:"origin,omitempty"` // the replica that wrote it, for logs
	Touches       []string       `json:"touches,omitempty"`
	Deletes       []string       `json:"deletes,omitempty"`
	Preconditions []Precondition `json:"preconditions,omitempty"`
	Schema        string         `json:"schema,omitempty"`
	Force         bool           `json:"force,omitempty"`
	Policy        *PolicyRef     `json:"policy,omitempty"`
	Fence         string         `json:"fence,omitempty"` // the message id a fence voids

	write *datastore.WriteRequest // a write's tuples, parsed by Decode
}

// Precondition is datastore.Precondition on the wire.
type Precondition struct {
	Filter    Filter `json:"filter"`
	MustExist bool   `json:"must_exist,omitempty"`
}

// Filter is datastore.Filter on the wire (without Limit, which a
// precondition ignores).
type Filter struct {
	ObjectType      string `json:"object_type,omitempty"`
	ObjectID        string `json:"object_id,omitempty"`
	Relation        string `json:"relation,omitempty"`
	SubjectType     string `json:"subject_type,omitempty"`
	SubjectID       string `json:"subject_id,omitempty"`
	SubjectRelation string `json:"subject_relation,omitempty"`
}

// PolicyRef names a policy bundle in the cluster's object store.
type PolicyRef struct {
	Object string `json:"object"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// Write encodes a tuple write.
func Write(origin string, req datastore.WriteRequest) ([]byte, error) {
	m := Message{V: Version, Kind: KindWrite, Origin: origin}
	for _, t := range req.Touches {
		m.Touches = append(m.Touches, t.String())
	}
	for _, t := range req.Deletes {
		m.Deletes = append(m.Deletes, t.String())
	}
	for _, p := range req.Preconditions {
		f := p.Filter
		m.Preconditions = append(m.Preconditions, Precondition{MustExist: p.MustExist, Filter: Filter{
			ObjectType: f.ObjectType, ObjectID: f.ObjectID, Relation: f.Relation,
			SubjectType: f.SubjectType, SubjectID: f.SubjectID, SubjectRelation: f.SubjectRelation,
		}})
	}
	return json.Marshal(m)
}

// Schema encodes a schema write.
func Schema(origin string, sc *schema.Schema, force bool) ([]byte, error) {
	return json.Marshal(Message{V: Version, Kind: KindSchema, Origin: origin, Schema: string(sc.Source()), Force: force})
}

// Policy encodes a policy load.
func Policy(origin string, ref PolicyRef) ([]byte, error) {
	return json.Marshal(Message{V: Version, Kind: KindPolicy, Origin: origin, Policy: &ref})
}

// Fence encodes a fence: every replica that applies it voids the write
// attempt whose message id is msgID, if it comes later.
func Fence(origin, msgID string) ([]byte, error) {
	return json.Marshal(Message{V: Version, Kind: KindFence, Origin: origin, Fence: msgID})
}

// Decode parses a message and checks it completely: every tuple parses,
// a schema parses, a policy reference is well formed.
func Decode(b []byte) (Message, error) {
	if m, ok := decodePlainWrite(b); ok {
		return m, nil
	}
	return decode(b)
}

// decode is Decode through encoding/json, for every message.
func decode(b []byte) (Message, error) {
	var m Message
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if dec.More() {
		return m, fmt.Errorf("%w: trailing data", ErrMalformed)
	}
	if m.V != Version {
		return m, fmt.Errorf("%w: version %d, want %d", ErrMalformed, m.V, Version)
	}
	switch m.Kind {
	case KindWrite:
		if m.Schema != "" || m.Force || m.Policy != nil {
			return m, fmt.Errorf("%w: a write carries a schema or a policy", ErrMalformed)
		}
		req, err := m.WriteRequest()
		if err != nil {
			return m, err
		}
		m.write = &req
	case KindSchema:
		if len(m.Touches)+len(m.Deletes)+len(m.Preconditions) > 0 || m.Policy != nil {
			return m, fmt.Errorf("%w: a schema write carries tuples or a policy", ErrMalformed)
		}
		if _, err := schema.Parse([]byte(m.Schema)); err != nil {
			return m, fmt.Errorf("%w: schema: %w", ErrMalformed, err)
		}
	case KindPolicy:
		if len(m.Touches)+len(m.Deletes)+len(m.Preconditions) > 0 || m.Schema != "" || m.Force {
			return m, fmt.Errorf("%w: a policy load carries tuples or a schema", ErrMalformed)
		}
		if m.Policy == nil || m.Policy.Object == "" || m.Policy.Size < 0 {
			return m, fmt.Errorf("%w: policy reference missing or incomplete", ErrMalformed)
		}
		if d, err := hex.DecodeString(m.Policy.SHA256); err != nil || len(d) != 32 {
			return m, fmt.Errorf("%w: policy sha256 %q", ErrMalformed, m.Policy.SHA256)
		}
	case KindFence:
		if len(m.Touches)+len(m.Deletes)+len(m.Preconditions) > 0 || m.Schema != "" || m.Force || m.Policy != nil || m.Fence == "" {
			return m, fmt.Errorf("%w: a fence carries something else than a message id", ErrMalformed)
		}
	default:
		return m, fmt.Errorf("%w: kind %q", ErrMalformed, m.Kind)
	}
	return m, nil
}

// WriteRequest returns the tuple write of a KindWrite message (parsed
// once: Decode keeps what it checked).
func (m *Message) WriteRequest() (datastore.WriteRequest, error) {
	if m.write != nil {
		return *m.write, nil
	}
	var req datastore.WriteRequest
	var err error
	if req.Touches, err = parseTuples("touches", m.Touches); err != nil {
		return req, err
	}
	if req.Deletes, err = parseTuples("deletes", m.Deletes); err != nil {
		return req, err
	}
	for _, p := range m.Preconditions {
		f := p.Filter
		req.Preconditions = append(req.Preconditions, datastore.Precondition{MustExist: p.MustExist, Filter: datastore.Filter{
			ObjectType: f.ObjectType, ObjectID: f.ObjectID, Relation: f.Relation,
			SubjectType: f.SubjectType, SubjectID: f.SubjectID, SubjectRelation: f.SubjectRelation,
		}})
	}
	return req, nil
}

func parseTuples(field string, ss []string) ([]api.Tuple, error) {
	if len(ss) == 0 {
		return nil, nil
	}
	out := make([]api.Tuple, len(ss))
	for i, s := range ss {
		t, err := api.ParseTuple(s)
		if err != nil {
			return nil, fmt.Errorf("%w: %s[%d]: %w", ErrMalformed, field, i, err)
		}
		out[i] = t
	}
	return out, nil
}

// decodePlainWrite decodes, without reflection, a tuple write exactly as
// Write encodes it when no precondition, origin or tuple needs escaping:
// `{"v":1,"kind":"write"` then "origin", "touches" and "deletes" in that
// order, each optional, arrays not empty, strings of valid UTF-8 without
// a quote, a backslash or a control character, and nothing after the
// closing brace. Every replica decodes every write, and this is nearly
// all of them. Anything else, well formed or not, returns false and
// Decode takes the general path, whose answer is the reference.
func decodePlainWrite(b []byte) (Message, bool) {
	const head = `{"v":1,"kind":"write"`
	if !bytes.HasPrefix(b, []byte(head)) {
		return Message{}, false
	}
	m := Message{V: Version, Kind: KindWrite}
	rest := b[len(head):]
	if r, ok := bytes.CutPrefix(rest, []byte(`,"origin":`)); ok {
		var s string
		if s, rest, ok = plainString(r); !ok {
			return Message{}, false
		}
		m.Origin = s
	}
	var req datastore.WriteRequest
	for _, f := range []struct {
		key  string
		strs *[]string
		ts   *[]api.Tuple
	}{{`,"touches":[`, &m.Touches, &req.Touches}, {`,"deletes":[`, &m.Deletes, &req.Deletes}} {
		r, ok := bytes.CutPrefix(rest, []byte(f.key))
		if !ok {
			continue
		}
		for {
			var s string
			if s, r, ok = plainString(r); !ok {
				return Message{}, false
			}
			t, err := api.ParseTuple(s)
			if err != nil {
				return Message{}, false // the general path words the error
			}
			*f.strs = append(*f.strs, s)
			*f.ts = append(*f.ts, t)
			if len(r) == 0 {
				return Message{}, false
			}
			if r[0] == ']' {
				rest = r[1:]
				break
			}
			if r[0] != ',' {
				return Message{}, false
			}
			r = r[1:]
		}
	}
	if len(rest) != 1 || rest[0] != '}' {
		return Message{}, false
	}
	m.write = &req
	return m, true
}

// plainString reads a JSON string at the start of b that needs no
// unescaping and is valid UTF-8, and returns it and what follows it.
func plainString(b []byte) (string, []byte, bool) {
	if len(b) == 0 || b[0] != '"' {
		return "", nil, false
	}
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			if !utf8.Valid(b[1:i]) {
				return "", nil, false
			}
			return string(b[1:i]), b[i+1:], true
		case c == '\\' || c < 0x20:
			return "", nil, false
		}
	}
	return "", nil, false
}
