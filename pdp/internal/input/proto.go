package input

import (
	"fmt"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
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

// message writes m as an object (a Struct as the object it holds).
func (b *builder) message(sel *prune.Tree, m protoreflect.Message) error {
	if s, ok := m.Interface().(*structpb.Struct); ok {
		return b.structValue(sel, s)
	}
	o := b.object(sel)
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
				return err
			}
			continue
		}
		if err := b.field(c, fd, v); err != nil {
			return err
		}
	}
	o.close()
	return nil
}

// writeGeneric writes m as member name of o, or only validates it when
// the selection leaves it out.
func writeGeneric(o *obj, name string, m protoreflect.Message) error {
	c, ok := o.member(name)
	if !ok {
		return validMessage(m)
	}
	return o.b.message(c, m)
}

func (b *builder) field(sel *prune.Tree, fd protoreflect.FieldDescriptor, v protoreflect.Value) error {
	switch {
	case fd.IsMap():
		return b.protoMap(sel, fd.MapKey(), fd.MapValue(), v.Map())
	case fd.IsList():
		// Arrays are kept or dropped whole.
		l := v.List()
		b.w.BeginArray()
		for i := range l.Len() {
			if err := b.singular(nil, fd, l.Get(i)); err != nil {
				return err
			}
		}
		b.w.End()
		return nil
	}
	return b.singular(sel, fd, v)
}

func (b *builder) singular(sel *prune.Tree, fd protoreflect.FieldDescriptor, v protoreflect.Value) error {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		b.w.Bool(v.Bool())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		b.w.Int(v.Int())
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		b.uint(v.Uint())
	case protoreflect.EnumKind:
		b.w.Int(int64(v.Enum()))
	case protoreflect.FloatKind:
		b.float32(v.Float())
	case protoreflect.DoubleKind:
		b.double(v.Float())
	case protoreflect.StringKind:
		s := v.String()
		if err := validStrings(s); err != nil {
			return err
		}
		b.w.String(s)
	case protoreflect.BytesKind:
		b.base64(v.Bytes())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return b.message(sel, v.Message())
	default:
		return fmt.Errorf("input: field %s has unknown kind %v", fd.FullName(), fd.Kind())
	}
	return nil
}

// protoMap writes a map as an object, its keys (as text) sorted.
func (b *builder) protoMap(sel *prune.Tree, kd, vd protoreflect.FieldDescriptor, m protoreflect.Map) error {
	if kd.Kind() == protoreflect.StringKind && sel != nil {
		// Only the kept keys, looked up: the same members, in the same
		// (sorted) order, as the whole map pruned.
		var err error
		m.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
			err = validStrings(k.String())
			return err == nil
		})
		if err != nil {
			return err
		}
		o := b.object(sel)
		for _, k := range sel.Keys() {
			v := m.Get(protoreflect.ValueOfString(k).MapKey())
			if !v.IsValid() {
				continue
			}
			c, _ := o.member(k)
			if err := b.singular(c, vd, v); err != nil {
				return err
			}
		}
		m.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
			if _, kept := sel.Child(k.String()); !kept {
				err = validField(vd, v)
			}
			return err == nil
		})
		if err != nil {
			return err
		}
		o.close()
		return nil
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
	o := b.object(sel)
	for _, k := range keys {
		ks := k.String()
		if err := validStrings(ks); err != nil {
			return err
		}
		v := m.Get(k)
		c, ok := o.member(ks)
		if !ok {
			if err := validField(vd, v); err != nil {
				return err
			}
			continue
		}
		if err := b.singular(c, vd, v); err != nil {
			return err
		}
	}
	o.close()
	return nil
}

// structValue writes a Struct as the JSON object it holds (structpb's
// AsMap), its keys sorted.
func (b *builder) structValue(sel *prune.Tree, s *structpb.Struct) error {
	return writeObject(b, sel, s.GetFields(), (*builder).value, validStructValue)
}

// writeObject writes m as an object (its keys sorted when b.ordered),
// only those sel keeps (when it is not nil); val writes a value, valid
// checks one that is left out.
func writeObject[V any](b *builder, sel *prune.Tree, m map[string]V, val func(*builder, *prune.Tree, V) error, valid func(string, V) error) error {
	if sel != nil {
		for k, v := range m {
			if _, kept := sel.Child(k); !kept {
				if err := valid(k, v); err != nil {
					return err
				}
			}
		}
		o := b.object(sel)
		for _, k := range sel.Keys() {
			v, ok := m[k]
			if !ok {
				continue
			}
			c, _ := o.member(k)
			if err := val(b, c, v); err != nil {
				return err
			}
		}
		o.close()
		return nil
	}
	for k := range m {
		if err := validStrings(k); err != nil {
			return err
		}
	}
	var kb [8]string
	b.w.BeginObject()
	for k, v := range entries(b, m, kb[:0]) {
		b.w.String(k)
		if err := val(b, nil, v); err != nil {
			return err
		}
	}
	b.w.End()
	return nil
}

// writeMetadata writes Envoy's Metadata as member name of parent: the
// mapping of message, without reflection.
func writeMetadata(parent *obj, name string, md *corev3.Metadata) error {
	sel, ok := parent.member(name)
	if !ok {
		return validMetadata(md)
	}
	b := parent.b
	o := b.object(sel)
	if len(md.FilterMetadata) > 0 {
		if c, ok := o.member("filterMetadata"); ok {
			if err := writeObject(b, c, md.FilterMetadata, (*builder).structValue, validStruct); err != nil {
				return err
			}
		} else if err := validMetadata(&corev3.Metadata{FilterMetadata: md.FilterMetadata}); err != nil {
			return err
		}
	}
	if len(md.TypedFilterMetadata) > 0 {
		if c, ok := o.member("typedFilterMetadata"); ok {
			if err := writeObject(b, c, md.TypedFilterMetadata, (*builder).anyMessage, validAnyEntry); err != nil {
				return err
			}
		} else if err := validMetadata(&corev3.Metadata{TypedFilterMetadata: md.TypedFilterMetadata}); err != nil {
			return err
		}
	}
	o.close()
	return nil
}

func validMetadata(md *corev3.Metadata) error {
	for k, s := range md.FilterMetadata {
		if err := validStruct(k, s); err != nil {
			return err
		}
	}
	for k, a := range md.TypedFilterMetadata {
		if err := validAnyEntry(k, a); err != nil {
			return err
		}
	}
	return nil
}

// anyMessage writes an Any as the plugin maps it, without reflection: the
// object of its populated fields, typeUrl and value (in base64).
func (b *builder) anyMessage(sel *prune.Tree, a *anypb.Any) error {
	if err := validStrings(a.GetTypeUrl()); err != nil {
		return err
	}
	o := b.object(sel)
	o.str("typeUrl", a.GetTypeUrl())
	o.bytes("value", a.GetValue())
	o.close()
	return nil
}

func validAnyEntry(k string, a *anypb.Any) error {
	return validStrings(k, a.GetTypeUrl())
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

// value writes a Struct's value as structpb's AsInterface gives it: a
// value without a kind is null.
func (b *builder) value(sel *prune.Tree, v *structpb.Value) error {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		b.double(k.NumberValue)
	case *structpb.Value_StringValue:
		if err := validStrings(k.StringValue); err != nil {
			return err
		}
		b.w.String(k.StringValue)
	case *structpb.Value_BoolValue:
		b.w.Bool(k.BoolValue)
	case *structpb.Value_StructValue:
		return b.structValue(sel, k.StructValue)
	case *structpb.Value_ListValue:
		b.w.BeginArray()
		for _, e := range k.ListValue.GetValues() {
			if err := b.value(nil, e); err != nil {
				return err
			}
		}
		b.w.End()
	default:
		b.w.Null()
	}
	return nil
}

// validMessage checks what message would refuse (a string that is
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
// value would.
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
