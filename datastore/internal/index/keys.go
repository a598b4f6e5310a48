package index

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

// IDs are the interned numbers of a tuple's names: its object type,
// relation, subject type and subject relation.
type IDs struct {
	OT, Rel, ST, SR uint64
}

// AppendObjPrefix appends the obj key prefix of object ot:oid.
func AppendObjPrefix(b []byte, ot uint64, oid string) []byte {
	b = binary.AppendUvarint(b, ot)
	b = append(b, oid...)
	return append(b, 0)
}

// AppendObjKey appends the obj key of tuple n with IDs oid and sid.
func AppendObjKey(b []byte, n IDs, oid, sid string) []byte {
	b = AppendObjPrefix(b, n.OT, oid)
	b = binary.AppendUvarint(b, n.Rel)
	b = binary.AppendUvarint(b, n.SR)
	b = binary.AppendUvarint(b, n.ST)
	return append(b, sid...)
}

// AppendSubjPrefix appends the subj key prefix of subject st:sid.
func AppendSubjPrefix(b []byte, st uint64, sid string) []byte {
	b = binary.AppendUvarint(b, st)
	b = append(b, sid...)
	return append(b, 0)
}

// AppendSubjKey appends the subj key of tuple n with IDs oid and sid.
func AppendSubjKey(b []byte, n IDs, oid, sid string) []byte {
	b = AppendSubjPrefix(b, n.ST, sid)
	b = binary.AppendUvarint(b, n.SR)
	b = binary.AppendUvarint(b, n.OT)
	b = append(b, oid...)
	b = append(b, 0)
	return binary.AppendUvarint(b, n.Rel)
}

// ErrBadKey reports a stored key or value that does not decode: the
// methods' guard turns it into a *CorruptError.
var ErrBadKey = errors.New("stored data does not decode")

// Uvarint reads one unsigned varint from b and returns the rest.
func Uvarint(b []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, ErrBadKey
	}
	return v, b[n:], nil
}

func cutID(b []byte) ([]byte, []byte, error) {
	i := bytes.IndexByte(b, 0)
	if i <= 0 { // no end, or an empty ID
		return nil, nil, ErrBadKey
	}
	return b[:i], b[i+1:], nil
}

// DecodeObjKey splits an obj key. The returned IDs alias k.
func DecodeObjKey(k []byte) (n IDs, oid, sid []byte, err error) {
	if n.OT, k, err = Uvarint(k); err != nil {
		return
	}
	if oid, k, err = cutID(k); err != nil {
		return
	}
	if n.Rel, k, err = Uvarint(k); err != nil {
		return
	}
	if n.SR, k, err = Uvarint(k); err != nil {
		return
	}
	if n.ST, k, err = Uvarint(k); err != nil {
		return
	}
	if len(k) == 0 {
		return n, nil, nil, ErrBadKey
	}
	return n, oid, k, nil
}

// DecodeSubjKey splits a subj key. The returned IDs alias k.
func DecodeSubjKey(k []byte) (n IDs, oid, sid []byte, err error) {
	if n.ST, k, err = Uvarint(k); err != nil {
		return
	}
	if sid, k, err = cutID(k); err != nil {
		return
	}
	if n.SR, k, err = Uvarint(k); err != nil {
		return
	}
	if n.OT, k, err = Uvarint(k); err != nil {
		return
	}
	if oid, k, err = cutID(k); err != nil {
		return
	}
	if n.Rel, k, err = Uvarint(k); err != nil {
		return
	}
	if len(k) != 0 {
		return n, nil, nil, ErrBadKey
	}
	return n, oid, sid, nil
}

// Bstr returns a string that aliases b without copying. Only for strings
// that do not outlive the read transaction b comes from.
func Bstr(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// Dict maps interned names to numbers and back. It is immutable once
// published; a schema write publishes a new one.
type Dict struct {
	Numbers map[string]uint64
	Names   []string // index = number; Names[0] = ""
}

// ID is name's number; "" is always 0.
func (d *Dict) ID(name string) (uint64, bool) {
	if name == "" {
		return 0, true
	}
	v, ok := d.Numbers[name]
	return v, ok
}

// Name is the name numbered id.
func (d *Dict) Name(id uint64) (string, bool) {
	if id >= uint64(len(d.Names)) || (id != 0 && d.Names[id] == "") {
		return "", false
	}
	return d.Names[id], true
}

// BE64 is v, 8 bytes big endian.
func BE64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

// TupleIDs numbers the names of t; ok is false if one is unknown.
func TupleIDs(d *Dict, t api.Tuple) (IDs, bool) {
	var n IDs
	var ok1, ok2, ok3, ok4 bool
	n.OT, ok1 = d.ID(t.Object.Type)
	n.Rel, ok2 = d.ID(t.Relation)
	n.ST, ok3 = d.ID(t.Subject.Type)
	n.SR, ok4 = d.ID(t.Subject.Relation)
	return n, ok1 && ok2 && ok3 && ok4
}

// DecodeTuple is the tuple of obj key k, its strings copied.
func DecodeTuple(d *Dict, k []byte) (api.Tuple, error) {
	n, oid, sid, err := DecodeObjKey(k)
	if err != nil {
		return api.Tuple{}, err
	}
	return TupleFromIDs(d, n, oid, sid)
}

// TupleFromIDs is the tuple of n and the IDs oid and sid, its strings
// copied; ErrBadKey when a number is not in d or an ID is not valid.
func TupleFromIDs(d *Dict, n IDs, oid, sid []byte) (api.Tuple, error) {
	ot, ok1 := d.Name(n.OT)
	rel, ok2 := d.Name(n.Rel)
	st, ok3 := d.Name(n.ST)
	sr, ok4 := d.Name(n.SR)
	if !ok1 || !ok2 || !ok3 || !ok4 || !api.ValidID(Bstr(oid)) || !api.ValidID(Bstr(sid)) {
		return api.Tuple{}, ErrBadKey
	}
	return api.Tuple{Object: api.Object{Type: ot, ID: string(oid)}, Relation: rel, Subject: api.Subject{Type: st, ID: string(sid), Relation: sr}}, nil
}
