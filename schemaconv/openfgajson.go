package schemaconv

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// The JSON form of an OpenFGA model (what the API stores and fga model get
// --format json prints):
//
//	{"schema_version": "1.1",
//	 "type_definitions": [{"type": "document",
//	   "relations": {"viewer": {"union": {"child": [{"this": {}}, {"computedUserset": {"relation": "editor"}}]}}},
//	   "metadata": {"relations": {"viewer": {"directly_related_user_types": [{"type": "user"}]}}}}],
//	 "conditions": {}}
//
// It is read through yaml.v3 (JSON is YAML) to keep the line and column
// of every value for errors.

func parseOpenFGAJSON(src []byte) (*model, error) {
	var probe any
	if err := json.Unmarshal(src, &probe); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, syntaxErr(offsetPos(src, int(se.Offset)-1), "json: %v", err)
		}
		return nil, syntaxErr(pos{1, 1}, "json: %v", err)
	}
	// Raw tabs can only be whitespace in valid JSON; YAML rejects them as
	// indentation, so make them spaces (columns stay the same).
	var doc yaml.Node
	if err := yaml.Unmarshal(bytes.ReplaceAll(src, []byte{'\t'}, []byte{' '}), &doc); err != nil {
		return nil, syntaxErr(pos{1, 1}, "json: %v", err)
	}
	root := doc.Content[0]
	if w := mapValue(root, "authorization_model"); w != nil {
		root = w
	}
	if root.Kind != yaml.MappingNode {
		return nil, syntaxErr(nodePos(root), "an OpenFGA model in JSON is an object with schema_version and type_definitions")
	}
	switch v := mapValue(root, "schema_version"); {
	case v == nil:
		return nil, syntaxErr(nodePos(root), "no schema_version")
	case v.Value == "1.0":
		return nil, unsupportedErr(nodePos(v), "OpenFGA schema 1.0 models", "migrate the model to schema 1.1 (type restrictions) first")
	case v.Value != "1.1":
		return nil, syntaxErr(nodePos(v), "want schema_version 1.1, found %q", v.Value)
	}
	if c := mapValue(root, "conditions"); c != nil && len(c.Content) > 0 {
		return nil, unsupportedErr(nodePos(c), "OpenFGA conditions", "")
	}
	tds := mapValue(root, "type_definitions")
	if tds == nil || tds.Kind != yaml.SequenceNode {
		return nil, syntaxErr(nodePos(root), "type_definitions must be a list")
	}
	m := &model{from: OpenFGA}
	for _, td := range tds.Content {
		if err := jsonTypeDef(m, td); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func nodePos(n *yaml.Node) pos { return pos{n.Line, n.Column} }

// offsetPos turns a byte offset into a 1-based line and column.
func offsetPos(src []byte, off int) pos {
	off = min(max(off, 0), len(src))
	line := 1 + bytes.Count(src[:off], []byte{'\n'})
	col := off - bytes.LastIndexByte(src[:off], '\n')
	return pos{line, col}
}

func jsonString(n *yaml.Node, key string) (string, *yaml.Node, error) {
	v := mapValue(n, key)
	if v == nil {
		if n == nil {
			return "", nil, &Error{Code: CodeSyntax, Msg: fmt.Sprintf("missing %q", key)}
		}
		return "", nil, syntaxErr(nodePos(n), "missing %q", key)
	}
	if v.Kind != yaml.ScalarNode || v.Value == "" {
		return "", nil, syntaxErr(nodePos(v), "%q must be a non-empty string", key)
	}
	return v.Value, v, nil
}

func jsonTypeDef(m *model, td *yaml.Node) error {
	if td.Kind != yaml.MappingNode {
		return syntaxErr(nodePos(td), "a type definition must be an object")
	}
	name, nameNode, err := jsonString(td, "type")
	if err != nil {
		return err
	}
	t, err := m.addType(name, nodePos(nameNode))
	if err != nil {
		return err
	}
	meta := mapValue(mapValue(td, "metadata"), "relations")
	rels := mapValue(td, "relations")
	if rels == nil || isNull(rels) {
		return nil
	}
	if rels.Kind != yaml.MappingNode {
		return syntaxErr(nodePos(rels), "relations must be an object")
	}
	for i := 0; i+1 < len(rels.Content); i += 2 {
		k, v := rels.Content[i], rels.Content[i+1]
		md, err := t.addMember(k.Value, nodePos(k))
		if err != nil {
			return err
		}
		e, err := jsonUserset(md, v, 0)
		if err != nil {
			return err
		}
		if md.hasDirect {
			if err := jsonDirect(md, mapValue(mapValue(meta, k.Value), "directly_related_user_types"), nodePos(k)); err != nil {
				return err
			}
		}
		if e.kind == nodeDirect {
			e = nil
		}
		md.expr = e
	}
	return nil
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

func jsonDirect(md *memberDef, types *yaml.Node, at pos) error {
	if types == nil || types.Kind != yaml.SequenceNode || len(types.Content) == 0 {
		return invalidErr(at, "%s is directly assignable (\"this\") but metadata lists no directly_related_user_types", md.name)
	}
	for _, rt := range types.Content {
		typ, tn, err := jsonString(rt, "type")
		if err != nil {
			return err
		}
		s := subjectRef{typ: typ, at: nodePos(tn)}
		if w := mapValue(rt, "wildcard"); w != nil && !isNull(w) {
			return unsupportedErr(nodePos(w), "wildcard subjects", "%s:* (public access) in %s", typ, md.name)
		}
		if c := mapValue(rt, "condition"); c != nil && c.Value != "" {
			return unsupportedErr(nodePos(c), "OpenFGA conditions", "%s with %s", typ, c.Value)
		}
		if r := mapValue(rt, "relation"); r != nil && r.Value != "" {
			s.rel = r.Value
		}
		md.direct = append(md.direct, s)
	}
	return nil
}

// jsonUserset converts one userset rewrite.
func jsonUserset(md *memberDef, n *yaml.Node, depth int) (*node, error) {
	if depth > maxDepth {
		return nil, syntaxErr(nodePos(n), "relation definition nested too deeply")
	}
	if n.Kind != yaml.MappingNode || len(n.Content) != 2 {
		return nil, syntaxErr(nodePos(n), "a relation definition must be an object with exactly one of this, computedUserset, tupleToUserset, union, intersection, difference")
	}
	k, v := n.Content[0], n.Content[1]
	at := nodePos(k)
	switch k.Value {
	case "this":
		md.hasDirect = true
		return &node{kind: nodeDirect, at: at}, nil
	case "computedUserset":
		rel, rn, err := jsonString(v, "relation")
		if err != nil {
			return nil, err
		}
		return &node{kind: nodeRef, name: rel, at: nodePos(rn)}, nil
	case "tupleToUserset":
		via, vn, err := jsonString(mapValue(v, "tupleset"), "relation")
		if err != nil {
			return nil, withPos(err, at)
		}
		rel, rn, err := jsonString(mapValue(v, "computedUserset"), "relation")
		if err != nil {
			return nil, withPos(err, at)
		}
		return &node{kind: nodeArrow, name: rel, via: via, at: nodePos(rn), viaAt: nodePos(vn)}, nil
	case "union", "intersection":
		kind := nodeUnion
		if k.Value == "intersection" {
			kind = nodeIntersect
		}
		ch := mapValue(v, "child")
		if ch == nil || ch.Kind != yaml.SequenceNode || len(ch.Content) == 0 {
			return nil, syntaxErr(at, "%s needs a non-empty child list", k.Value)
		}
		var out *node
		for _, c := range ch.Content {
			e, err := jsonUserset(md, c, depth+1)
			if err != nil {
				return nil, err
			}
			if out == nil {
				out = e
			} else {
				out = &node{kind: kind, l: out, r: e, at: at}
			}
		}
		return out, nil
	case "difference":
		b, s := mapValue(v, "base"), mapValue(v, "subtract")
		if b == nil || s == nil {
			return nil, syntaxErr(at, "difference needs base and subtract")
		}
		l, err := jsonUserset(md, b, depth+1)
		if err != nil {
			return nil, err
		}
		r, err := jsonUserset(md, s, depth+1)
		if err != nil {
			return nil, err
		}
		return &node{kind: nodeExclude, l: l, r: r, at: at}, nil
	}
	return nil, syntaxErr(at, "unknown relation definition %q (want this, computedUserset, tupleToUserset, union, intersection or difference)", k.Value)
}

// withPos gives a position to an error from a missing object.
func withPos(err error, at pos) error {
	var e *Error
	if errors.As(err, &e) && e.Line == 0 {
		e.Line, e.Column = at.line, at.col
	}
	return err
}
