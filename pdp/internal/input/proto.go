package input

import (
	"encoding/base64"
	"fmt"
	"math"
	"slices"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/nexuspdp/nexus/pdp/internal/prune"
)

// This file writes a protobuf message the way opa-envoy-plugin has mapped
// the attributes of a CheckRequest since its reflection-based conversion,
// which differs from protojson:
//
//   - every populated field (a message that is set, a non-zero scalar, a
//     set oneof member even if zero, a non-empty list or map) under its JSON
//     name (lowerCamelCase: metadataContext, filterMetadata, rawBody);
//   - int64, uint64 and every other integer as a JSON number, never a
//     string; an enum as its number; bytes in standard base64;
//   - a double as OPA writes a float (the shortest %g form: 1.5e+09), a
//     float as the shortest decimal of its 32 bits;
//   - google.protobuf.Struct as the plain JSON object it holds (a NaN or
//     infinite number in it as the strings "NaN", "Infinity",
//     "-Infinity", as structpb gives them);
//   - every other message, the well-known ones included, as the object of
//     its own fields: a Timestamp is {"seconds": n, "nanos": n}, an Any is
//     {"typeUrl": s, "value": base64}, a Value outside a Struct is
//     {"stringValue": s} and so on.
//
// Map keys are written sorted, so equal messages give equal bytes; a
// selection (prune.Tree) leaves out the object members it does not keep,
// exactly as pruning the whole document would.

// appendMessage writes m as an object (a Struct as the object it holds).
func appendMessage(dst []byte, sel *prune.Tree, m protoreflect.Message) ([]byte, error) {
	if s, ok := m.Interface().(*structpb.Struct); ok {
		return appendStruct(dst, sel, s)
	}
	o := obj{sel: sel}
	o.open(dst)
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if !m.Has(fd) {
			continue
		}
		v := m.Get(fd)
		c, ok := o.member(fd.JSONName())
		if !ok {
			if err := validField(fd, v); err != nil {
				return dst, err
			}
			continue
		}
		var err error
		if o.buf, err = appendField(o.buf, c, fd, v); err != nil {
			return dst, err
		}
	}
	return o.close(), nil
}

// appendGeneric writes m as member name of o, or only validates it when
// the selection leaves it out.
func appendGeneric(o *obj, name string, m protoreflect.Message) error {
	c, ok := o.member(name)
	if !ok {
		return validMessage(m)
	}
	var err error
	o.buf, err = appendMessage(o.buf, c, m)
	return err
}

func appendField(dst []byte, sel *prune.Tree, fd protoreflect.FieldDescriptor, v protoreflect.Value) ([]byte, error) {
	switch {
	case fd.IsMap():
		return appendProtoMap(dst, sel, fd.MapKey(), fd.MapValue(), v.Map())
	case fd.IsList():
		// Arrays are kept or dropped whole.
		l := v.List()
		dst = append(dst, '[')
		for i := range l.Len() {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendSingular(dst, nil, fd, l.Get(i)); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	}
	return appendSingular(dst, sel, fd, v)
}

func appendSingular(dst []byte, sel *prune.Tree, fd protoreflect.FieldDescriptor, v protoreflect.Value) ([]byte, error) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return strconv.AppendBool(dst, v.Bool()), nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return strconv.AppendInt(dst, v.Int(), 10), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return strconv.AppendUint(dst, v.Uint(), 10), nil
	case protoreflect.EnumKind:
		return strconv.AppendInt(dst, int64(v.Enum()), 10), nil
	case protoreflect.FloatKind:
		f := v.Float()
		if nonFinite(f) {
			return appendNonFinite(dst, f), nil
		}
		return strconv.AppendFloat(dst, f, 'f', -1, 32), nil
	case protoreflect.DoubleKind:
		return appendDouble(dst, v.Float()), nil
	case protoreflect.StringKind:
		s := v.String()
		if err := validStrings(s); err != nil {
			return dst, err
		}
		return appendString(dst, s), nil
	case protoreflect.BytesKind:
		return appendBase64(dst, v.Bytes()), nil
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return appendMessage(dst, sel, v.Message())
	}
	return dst, fmt.Errorf("input: field %s has unknown kind %v", fd.FullName(), fd.Kind())
}

// appendProtoMap writes a map as an object, its keys (as text) sorted.
func appendProtoMap(dst []byte, sel *prune.Tree, kd, vd protoreflect.FieldDescriptor, m protoreflect.Map) ([]byte, error) {
	if kd.Kind() == protoreflect.StringKind && sel != nil {
		// Only the kept keys, looked up: the same members, in the same
		// (sorted) order, as the whole map pruned.
		o := obj{sel: sel}
		o.open(dst)
		var err error
		m.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
			err = validStrings(k.String())
			return err == nil
		})
		if err != nil {
			return dst, err
		}
		for _, k := range sel.Keys() {
			v := m.Get(protoreflect.ValueOfString(k).MapKey())
			if !v.IsValid() {
				continue
			}
			c, _ := o.member(k)
			if o.buf, err = appendSingular(o.buf, c, vd, v); err != nil {
				return dst, err
			}
		}
		m.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
			if _, kept := sel.Child(k.String()); !kept {
				err = validField(vd, v)
			}
			return err == nil
		})
		if err != nil {
			return dst, err
		}
		return o.close(), nil
	}
	keys := make([]protoreflect.MapKey, 0, m.Len())
	m.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys = append(keys, k)
		return true
	})
	slices.SortFunc(keys, func(a, b protoreflect.MapKey) int {
		switch as, bs := a.String(), b.String(); {
		case as < bs:
			return -1
		case as > bs:
			return 1
		}
		return 0
	})
	o := obj{sel: sel}
	o.open(dst)
	for _, k := range keys {
		ks := k.String()
		if err := validStrings(ks); err != nil {
			return dst, err
		}
		v := m.Get(k)
		c, ok := o.member(ks)
		if !ok {
			if err := validField(vd, v); err != nil {
				return dst, err
			}
			continue
		}
		var err error
		if o.buf, err = appendSingular(o.buf, c, vd, v); err != nil {
			return dst, err
		}
	}
	return o.close(), nil
}

// appendStruct writes a Struct as the JSON object it holds (structpb's
// AsMap), its keys sorted.
func appendStruct(dst []byte, sel *prune.Tree, s *structpb.Struct) ([]byte, error) {
	return appendObject(dst, sel, s.GetFields(), appendStructValue, validStructValue)
}

// appendObject writes m as an object, its keys sorted, only those sel
// keeps (when it is not nil); val writes a value, valid checks one that
// is left out.
func appendObject[V any](dst []byte, sel *prune.Tree, m map[string]V, val func([]byte, *prune.Tree, V) ([]byte, error), valid func(string, V) error) ([]byte, error) {
	o := obj{sel: sel}
	o.open(dst)
	if sel != nil {
		for k, v := range m {
			if _, kept := sel.Child(k); !kept {
				if err := valid(k, v); err != nil {
					return dst, err
				}
			}
		}
		for _, k := range sel.Keys() {
			v, ok := m[k]
			if !ok {
				continue
			}
			c, _ := o.member(k)
			var err error
			if o.buf, err = val(o.buf, c, v); err != nil {
				return dst, err
			}
		}
		return o.close(), nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		if err := validStrings(k); err != nil {
			return dst, err
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		o.key(k)
		var err error
		if o.buf, err = val(o.buf, nil, m[k]); err != nil {
			return dst, err
		}
	}
	return o.close(), nil
}

// appendMetadata writes Envoy's Metadata as member name of parent: the
// mapping of appendMessage, without reflection for filter_metadata.
func appendMetadata(parent *obj, name string, md *corev3.Metadata) error {
	sel, ok := parent.member(name)
	if !ok {
		return validMetadata(md)
	}
	o := obj{sel: sel}
	o.open(parent.buf)
	if len(md.FilterMetadata) > 0 {
		if c, ok := o.member("filterMetadata"); ok {
			var err error
			if o.buf, err = appendObject(o.buf, c, md.FilterMetadata, appendStruct, validStruct); err != nil {
				return err
			}
		} else if err := validMetadata(&corev3.Metadata{FilterMetadata: md.FilterMetadata}); err != nil {
			return err
		}
	}
	if len(md.TypedFilterMetadata) > 0 {
		m := md.ProtoReflect()
		fd := m.Descriptor().Fields().ByName("typed_filter_metadata")
		if c, ok := o.member(fd.JSONName()); ok {
			var err error
			if o.buf, err = appendField(o.buf, c, fd, m.Get(fd)); err != nil {
				return err
			}
		} else if err := validField(fd, m.Get(fd)); err != nil {
			return err
		}
	}
	parent.buf = o.close()
	return nil
}

func validMetadata(md *corev3.Metadata) error {
	for k, s := range md.FilterMetadata {
		if err := validStruct(k, s); err != nil {
			return err
		}
	}
	if len(md.TypedFilterMetadata) > 0 {
		return validMessage(md.ProtoReflect())
	}
	return nil
}

func validStruct(k string, s *structpb.Struct) error {
	if err := validStrings(k); err != nil {
		return err
	}
	for k, v := range s.GetFields() {
		if err := validStructValue(k, v); err != nil {
			return err
		}
	}
	return nil
}

// appendStructValue writes v as structpb's AsInterface gives it: a value
// without a kind is null.
func appendStructValue(dst []byte, sel *prune.Tree, v *structpb.Value) ([]byte, error) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		return appendDouble(dst, k.NumberValue), nil
	case *structpb.Value_StringValue:
		if err := validStrings(k.StringValue); err != nil {
			return dst, err
		}
		return appendString(dst, k.StringValue), nil
	case *structpb.Value_BoolValue:
		return strconv.AppendBool(dst, k.BoolValue), nil
	case *structpb.Value_StructValue:
		return appendStruct(dst, sel, k.StructValue)
	case *structpb.Value_ListValue:
		dst = append(dst, '[')
		for i, e := range k.ListValue.GetValues() {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendStructValue(dst, nil, e); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	}
	return append(dst, "null"...), nil
}

// appendDouble writes a double as OPA holds a Go float64 (strconv's
// shortest 'g' form), or, for NaN and the infinities, as the strings
// structpb turns them into.
func appendDouble(dst []byte, f float64) []byte {
	if nonFinite(f) {
		return appendNonFinite(dst, f)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, 64)
}

func nonFinite(f float64) bool { return math.IsNaN(f) || math.IsInf(f, 0) }

func appendNonFinite(dst []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, `"NaN"`...)
	case f > 0:
		return append(dst, `"Infinity"`...)
	}
	return append(dst, `"-Infinity"`...)
}

func appendBase64(dst, b []byte) []byte {
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, '"')
}

// validMessage checks what appendMessage would refuse (a string that is
// not UTF-8) without writing anything.
func validMessage(m protoreflect.Message) error {
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		err = validField(fd, v)
		return err == nil
	})
	return err
}

func validField(fd protoreflect.FieldDescriptor, v protoreflect.Value) error {
	switch {
	case fd.IsMap():
		var err error
		v.Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
			if err = validStrings(k.String()); err == nil {
				err = validSingular(fd.MapValue(), v)
			}
			return err == nil
		})
		return err
	case fd.IsList():
		l := v.List()
		for i := range l.Len() {
			if err := validSingular(fd, l.Get(i)); err != nil {
				return err
			}
		}
		return nil
	}
	return validSingular(fd, v)
}

func validSingular(fd protoreflect.FieldDescriptor, v protoreflect.Value) error {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return validStrings(v.String())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return validMessage(v.Message())
	}
	return nil
}

// validStructValue checks the key and value of a Struct's field, as
// appendStructValue would.
func validStructValue(k string, v *structpb.Value) error {
	if err := validStrings(k); err != nil {
		return err
	}
	switch x := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return validStrings(x.StringValue)
	case *structpb.Value_StructValue:
		return validStruct("", x.StructValue)
	case *structpb.Value_ListValue:
		for _, e := range x.ListValue.GetValues() {
			if err := validStructValue("", e); err != nil {
				return err
			}
		}
	}
	return nil
}
