package datastore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"unsafe"

	"github.com/nexuspdp/nexus/api"
)

// Key encoding (format 1). Type and relation names are interned: each name
// gets a small integer in the dict bucket (never reused; 0 is the empty
// relation), written as an unsigned varint (encoding/binary.AppendUvarint).
// IDs are written as raw bytes and ended by 0x00 where another field
// follows (IDs never contain 0x00, see package api).
//
//	obj  bucket: uv(objType) objID 0x00 uv(relation) uv(subjRelation) uv(subjType) subjID
//	subj bucket: uv(subjType) subjID 0x00 uv(subjRelation) uv(objType) objID 0x00 uv(relation)
//	log  bucket: revision (8 bytes big endian) -> change set (see encodeChangeSet)
//
// Values in obj and subj are the CRC-32C of their key (entry.go; empty in
// files written before it). The object-first order puts the direct
// subjects of object#relation (subject relation 0) before its usersets, so
// a check is one point read for the direct case and one prefix scan per
// userset type.

// ids are the interned numbers of a tuple's names.
type ids struct {
	ot, rel, st, sr uint64
}

func appendObjPrefix(b []byte, ot uint64, oid string) []byte {
	b = binary.AppendUvarint(b, ot)
	b = append(b, oid...)
	return append(b, 0)
}

func appendObjKey(b []byte, n ids, oid, sid string) []byte {
	b = appendObjPrefix(b, n.ot, oid)
	b = binary.AppendUvarint(b, n.rel)
	b = binary.AppendUvarint(b, n.sr)
	b = binary.AppendUvarint(b, n.st)
	return append(b, sid...)
}

func appendSubjPrefix(b []byte, st uint64, sid string) []byte {
	b = binary.AppendUvarint(b, st)
	b = append(b, sid...)
	return append(b, 0)
}

func appendSubjKey(b []byte, n ids, oid, sid string) []byte {
	b = appendSubjPrefix(b, n.st, sid)
	b = binary.AppendUvarint(b, n.sr)
	b = binary.AppendUvarint(b, n.ot)
	b = append(b, oid...)
	b = append(b, 0)
	return binary.AppendUvarint(b, n.rel)
}

// errBadKey reports a stored key or value that does not decode: the
// methods' guard turns it into a *CorruptError.
var errBadKey = errors.New("stored data does not decode")

func uvarint(b []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, errBadKey
	}
	return v, b[n:], nil
}

func cutID(b []byte) ([]byte, []byte, error) {
	i := bytes.IndexByte(b, 0)
	if i <= 0 { // no end, or an empty ID
		return nil, nil, errBadKey
	}
	return b[:i], b[i+1:], nil
}

// decodeObjKey splits an obj key. The returned IDs alias k.
func decodeObjKey(k []byte) (n ids, oid, sid []byte, err error) {
	if n.ot, k, err = uvarint(k); err != nil {
		return
	}
	if oid, k, err = cutID(k); err != nil {
		return
	}
	if n.rel, k, err = uvarint(k); err != nil {
		return
	}
	if n.sr, k, err = uvarint(k); err != nil {
		return
	}
	if n.st, k, err = uvarint(k); err != nil {
		return
	}
	if len(k) == 0 {
		return n, nil, nil, errBadKey
	}
	return n, oid, k, nil
}

// decodeSubjKey splits a subj key. The returned IDs alias k.
func decodeSubjKey(k []byte) (n ids, oid, sid []byte, err error) {
	if n.st, k, err = uvarint(k); err != nil {
		return
	}
	if sid, k, err = cutID(k); err != nil {
		return
	}
	if n.sr, k, err = uvarint(k); err != nil {
		return
	}
	if n.ot, k, err = uvarint(k); err != nil {
		return
	}
	if oid, k, err = cutID(k); err != nil {
		return
	}
	if n.rel, k, err = uvarint(k); err != nil {
		return
	}
	if len(k) != 0 {
		return n, nil, nil, errBadKey
	}
	return n, oid, sid, nil
}

// bstr returns a string that aliases b without copying. Only for strings
// that do not outlive the read transaction b comes from.
func bstr(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// dict maps interned names to numbers and back. It is immutable once
// published; WriteSchema publishes a new one.
type dict struct {
	ids   map[string]uint64
	names []string // index = id; names[0] = ""
}

func (d *dict) id(name string) (uint64, bool) {
	if name == "" {
		return 0, true
	}
	v, ok := d.ids[name]
	return v, ok
}

func (d *dict) name(id uint64) (string, bool) {
	if id >= uint64(len(d.names)) || (id != 0 && d.names[id] == "") {
		return "", false
	}
	return d.names[id], true
}

func be64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

// tupleIDs interns the names of t; ok is false if one is unknown.
func tupleIDs(d *dict, t api.Tuple) (ids, bool) {
	var n ids
	var ok1, ok2, ok3, ok4 bool
	n.ot, ok1 = d.id(t.Object.Type)
	n.rel, ok2 = d.id(t.Relation)
	n.st, ok3 = d.id(t.Subject.Type)
	n.sr, ok4 = d.id(t.Subject.Relation)
	return n, ok1 && ok2 && ok3 && ok4
}

func decodeTuple(d *dict, k []byte) (api.Tuple, error) {
	n, oid, sid, err := decodeObjKey(k)
	if err != nil {
		return api.Tuple{}, err
	}
	return tupleFromIDs(d, n, oid, sid)
}

func tupleFromIDs(d *dict, n ids, oid, sid []byte) (api.Tuple, error) {
	ot, ok1 := d.name(n.ot)
	rel, ok2 := d.name(n.rel)
	st, ok3 := d.name(n.st)
	sr, ok4 := d.name(n.sr)
	if !ok1 || !ok2 || !ok3 || !ok4 || !api.ValidID(bstr(oid)) || !api.ValidID(bstr(sid)) {
		return api.Tuple{}, errBadKey
	}
	return api.Tuple{Object: api.Object{Type: ot, ID: string(oid)}, Relation: rel, Subject: api.Subject{Type: st, ID: string(sid), Relation: sr}}, nil
}
