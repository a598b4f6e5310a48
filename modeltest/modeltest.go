package modeltest

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/schemaconv"
	"go.yaml.in/yaml/v3"
)

// Suite is a parsed test file, ready to run.
type Suite struct {
	file   string
	schema *schemaconv.Result
	tuples []srcTuple
	groups []*group
	// skipped lists what the file asks and the runner does not do.
	skipped []string
}

// group is the top-level assertions (name "") or one OpenFGA test.
type group struct {
	name   string
	tuples []srcTuple
	checks []*assertion
}

type srcTuple struct {
	t    api.Tuple
	file string
	line int
}

// assertion is a check, a list_objects or a list_users assertion.
type assertion struct {
	kind       string // "check", "list_objects", "list_users"
	file       string
	line       int
	object     api.Object  // check, list_users
	subject    api.Subject // check, list_objects
	permission string
	typ        string // list_objects: resource type; list_users: subject type
	want       bool
	wantList   []string // list_*: "type:id", sorted
}

func (a *assertion) String() string {
	switch a.kind {
	case "list_objects":
		return fmt.Sprintf("list_objects %s %s %s", a.subject, a.permission, a.typ)
	case "list_users":
		return fmt.Sprintf("list_users %s %s %s", a.object, a.permission, a.typ)
	}
	return fmt.Sprintf("check %s %s %s", a.object, a.permission, a.subject)
}

// Load reads a test file; file names in it are relative to its directory.
func Load(file string) (*Suite, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return Parse(src, file, filepath.Dir(file))
}

// Parse parses a test file named name (for messages), resolving the file
// names it holds against dir.
func Parse(src []byte, name, dir string) (*Suite, error) {
	p := &parser{name: name, dir: dir, src: src, s: &Suite{file: name}}
	if err := p.parse(); err != nil {
		return nil, err
	}
	return p.s, nil
}

type parser struct {
	name, dir string
	src       []byte
	s         *Suite
}

func (p *parser) errf(n *yaml.Node, format string, args ...any) error {
	e := &Error{File: p.name, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	return e
}

var topKeys = []string{"name", "description", "schema", "schema_file", "schemaFile", "model", "model_file", "from",
	"tuples", "tuple_file", "tuple_files", "relationships", "check", "tests", "assertions", "validation"}

func (p *parser) parse() error {
	var doc yaml.Node
	if err := yaml.Unmarshal(p.src, &doc); err != nil {
		return &Error{File: p.name, Msg: err.Error()}
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return p.errf(nil, "a test file is a YAML mapping with schema, tuples and check")
	}
	root := doc.Content[0]
	keys := map[string]*yaml.Node{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k := root.Content[i]
		if !slices.Contains(topKeys, k.Value) {
			return p.errf(k, "unknown key %q (want one of %s)", k.Value, strings.Join(topKeys, ", "))
		}
		keys[k.Value] = root.Content[i+1]
	}
	if err := p.parseSchema(keys); err != nil {
		return err
	}
	var err error
	base := &group{}
	if n := keys["tuples"]; n != nil {
		if base.tuples, err = p.tupleList(n); err != nil {
			return err
		}
	}
	if n := keys["relationships"]; n != nil {
		ts, err := p.tupleBlock(n)
		if err != nil {
			return err
		}
		base.tuples = append(base.tuples, ts...)
	}
	var files []*yaml.Node
	if n := keys["tuple_file"]; n != nil {
		files = append(files, n)
	}
	if n := keys["tuple_files"]; n != nil {
		if n.Kind != yaml.SequenceNode {
			return p.errf(n, "tuple_files must be a list of file names")
		}
		files = append(files, n.Content...)
	}
	for _, f := range files {
		ts, err := p.tupleFile(f)
		if err != nil {
			return err
		}
		base.tuples = append(base.tuples, ts...)
	}
	p.s.tuples = base.tuples
	base.tuples = nil
	if n := keys["check"]; n != nil {
		if base.checks, err = p.checks(n); err != nil {
			return err
		}
	}
	if n := keys["assertions"]; n != nil {
		as, err := p.zedAssertions(n)
		if err != nil {
			return err
		}
		base.checks = append(base.checks, as...)
	}
	p.s.groups = append(p.s.groups, base)
	if n := keys["tests"]; n != nil {
		if err := p.fgaTests(n); err != nil {
			return err
		}
	}
	if n := keys["validation"]; n != nil && !(n.Kind == yaml.ScalarNode && n.Value == "") && len(n.Content) > 0 {
		p.s.skipped = append(p.s.skipped, fmt.Sprintf("%s:%d: validation (expected relations) is not checked", p.name, n.Line))
	}
	total := 0
	for _, g := range p.s.groups {
		total += len(g.checks)
	}
	if total == 0 {
		return p.errf(root, "no assertions (want check, tests or assertions)")
	}
	return nil
}

// parseSchema reads schema, schema_file/schemaFile or model/model_file and
// converts it.
func (p *parser) parseSchema(keys map[string]*yaml.Node) error {
	from := schemaconv.Format("")
	if n := keys["from"]; n != nil {
		f, err := schemaconv.ParseFormat(n.Value)
		if err != nil {
			return p.errf(n, "from: %v", err)
		}
		from = f
	}
	var inline, file *yaml.Node
	var which []string
	for _, k := range []string{"schema", "model"} {
		if n := keys[k]; n != nil {
			inline = n
			which = append(which, k)
		}
	}
	for _, k := range []string{"schema_file", "schemaFile", "model_file"} {
		if n := keys[k]; n != nil {
			file = n
			which = append(which, k)
		}
	}
	switch len(which) {
	case 0:
		return p.errf(nil, "no schema (want schema, schema_file, model or model_file)")
	case 1:
	default:
		return p.errf(nil, "several schemas given (%s): want one", strings.Join(which, ", "))
	}
	var src []byte
	srcName := p.name
	if inline != nil {
		if inline.Kind != yaml.ScalarNode {
			return p.errf(inline, "the schema must be text, e.g. schema: |")
		}
		src = []byte(inline.Value)
	} else {
		path := p.path(file.Value)
		var err error
		if src, err = os.ReadFile(path); err != nil {
			return p.errf(file, "%v", err)
		}
		srcName = path
		if from == "" {
			from = schemaconv.FormatForPath(path)
		}
	}
	if from == "" {
		from = schemaconv.Detect(src)
	}
	res, err := schemaconv.Convert(src, from)
	if err != nil {
		if inline != nil {
			shiftPositions(err, p.src, inline)
		}
		return &Error{File: srcName, Msg: fmt.Sprintf("%s schema: ", from), Err: err}
	}
	p.s.schema = res
	return nil
}

// shiftPositions turns positions inside a block scalar into positions in
// the test file.
func shiftPositions(err error, file []byte, n *yaml.Node) {
	lineOff, colOff := n.Line-1, n.Column-1
	if n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		lineOff = n.Line
		lines := bytes.Split(file, []byte("\n"))
		for i := n.Line; i < len(lines); i++ {
			if t := bytes.TrimLeft(lines[i], " "); len(t) > 0 {
				colOff = len(lines[i]) - len(t)
				break
			}
		}
	} else if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
		colOff++
	}
	var list []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	} else {
		list = []error{err}
	}
	for _, e := range list {
		var ce *schemaconv.Error
		var se *datastore.SchemaError
		switch {
		case errors.As(e, &ce) && ce.Line > 0:
			if ce.Line == 1 {
				ce.Column += colOff
			} else if lineOff == n.Line {
				ce.Column += colOff
			}
			ce.Line += lineOff
		case errors.As(e, &se) && se.Line > 0:
			if se.Line == 1 || lineOff == n.Line {
				se.Column += colOff
			}
			se.Line += lineOff
		}
	}
}

func (p *parser) path(name string) string {
	if filepath.IsAbs(name) || p.dir == "" {
		return name
	}
	return filepath.Join(p.dir, name)
}

// tupleList reads a YAML list whose items are tuple strings
// (doc:1#viewer@user:anne), {object, relation, subject} or OpenFGA's
// {user, relation, object}.
func (p *parser) tupleList(n *yaml.Node) ([]srcTuple, error) {
	if n.Kind != yaml.SequenceNode {
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			return nil, nil
		}
		return nil, p.errf(n, "tuples must be a list")
	}
	var out []srcTuple
	for _, it := range n.Content {
		t, err := p.tupleItem(it)
		if err != nil {
			return nil, err
		}
		out = append(out, srcTuple{t, p.name, it.Line})
	}
	return out, nil
}

func (p *parser) tupleItem(it *yaml.Node) (api.Tuple, error) {
	switch it.Kind {
	case yaml.ScalarNode:
		t, err := parseTupleText(it.Value)
		if err != nil {
			return t, p.errf(it, "%v", err)
		}
		return t, nil
	case yaml.MappingNode:
		get := func(k string) string {
			for i := 0; i+1 < len(it.Content); i += 2 {
				if it.Content[i].Value == k {
					return it.Content[i+1].Value
				}
			}
			return ""
		}
		if get("subject") != "" {
			t, err := parseTupleText(get("object") + "#" + get("relation") + "@" + get("subject"))
			if err != nil {
				return t, p.errf(it, "%v", err)
			}
			return t, nil
		}
		var t api.Tuple
		seq := &yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{it}, Line: it.Line, Column: it.Column}
		err := schemaconv.FGATupleNodes(seq, func(x api.Tuple, _ int) error { t = x; return nil })
		if err != nil {
			return t, &Error{File: p.name, Err: err}
		}
		return t, nil
	}
	return api.Tuple{}, p.errf(it, "a tuple is object#relation@subject or a mapping with user, relation and object")
}

func parseTupleText(s string) (api.Tuple, error) {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '['); i >= 0 && strings.HasSuffix(s, "]") {
		return api.Tuple{}, fmt.Errorf("%s: caveated or expiring relationships are not supported by nexus", s)
	}
	return api.ParseTuple(s)
}

// tupleBlock reads SpiceDB's relationships: one tuple per line of a text.
func (p *parser) tupleBlock(n *yaml.Node) ([]srcTuple, error) {
	if n.Kind != yaml.ScalarNode {
		return nil, p.errf(n, "relationships must be text with one relationship per line")
	}
	first := n.Line
	if n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		first++
	}
	var out []srcTuple
	for i, l := range strings.Split(n.Value, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "//") || strings.HasPrefix(l, "#") {
			continue
		}
		t, err := parseTupleText(l)
		if err != nil {
			return nil, &Error{File: p.name, Line: first + i, Column: 1, Msg: err.Error()}
		}
		out = append(out, srcTuple{t, p.name, first + i})
	}
	return out, nil
}

// tupleFile reads a tuple file: text (.txt, .tuples), CSV (nexus'
// object,relation,subject or OpenFGA's user_type,...), or JSON, JSONL and
// YAML whose items have either shape.
func (p *parser) tupleFile(n *yaml.Node) ([]srcTuple, error) {
	path := p.path(n.Value)
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, p.errf(n, "%v", err)
	}
	var out []srcTuple
	add := func(t api.Tuple, line int) error {
		out = append(out, srcTuple{t, path, line})
		return nil
	}
	fail := func(line int, err error) error {
		return &Error{File: path, Line: line, Column: 1, Msg: err.Error()}
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".txt", ".tuples":
		for i, l := range strings.Split(string(src), "\n") {
			l = strings.TrimSpace(l)
			if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "//") {
				continue
			}
			t, err := parseTupleText(l)
			if err != nil {
				return nil, fail(i+1, err)
			}
			_ = add(t, i+1)
		}
		return out, nil
	case ".csv":
		head, _, _ := bytes.Cut(src, []byte("\n"))
		if bytes.Contains(head, []byte("user_type")) {
			if err := schemaconv.ReadOpenFGATuples(bytes.NewReader(src), schemaconv.TuplesCSV, add); err != nil {
				return nil, &Error{File: path, Err: err}
			}
			return out, nil
		}
		r := csv.NewReader(bytes.NewReader(src))
		r.FieldsPerRecord = -1
		for {
			rec, err := r.Read()
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			if err != nil {
				return nil, &Error{File: path, Msg: err.Error()}
			}
			line, _ := r.FieldPos(0)
			if len(rec) != 3 {
				return nil, fail(line, fmt.Errorf("want object,relation,subject"))
			}
			if line == 1 && rec[0] == "object" {
				continue
			}
			t, err := parseTupleText(rec[0] + "#" + rec[1] + "@" + rec[2])
			if err != nil {
				return nil, fail(line, err)
			}
			_ = add(t, line)
		}
	case ".jsonl", ".ndjson":
		sc := bufio.NewScanner(bytes.NewReader(src))
		sc.Buffer(nil, 1<<20)
		for line := 1; sc.Scan(); line++ {
			b := bytes.TrimSpace(sc.Bytes())
			if len(b) == 0 {
				continue
			}
			var k struct{ Object, Relation, Subject, User string }
			if err := json.Unmarshal(b, &k); err != nil {
				return nil, fail(line, fmt.Errorf("json: %w", err))
			}
			if k.User == "" {
				t, err := parseTupleText(k.Object + "#" + k.Relation + "@" + k.Subject)
				if err != nil {
					return nil, fail(line, err)
				}
				_ = add(t, line)
				continue
			}
			err := schemaconv.ReadOpenFGATuples(bytes.NewReader(b), schemaconv.TuplesJSONL, func(t api.Tuple, _ int) error { return add(t, line) })
			var ce *schemaconv.Error
			if errors.As(err, &ce) {
				ce.Line = line
			}
			if err != nil {
				return nil, &Error{File: path, Err: err}
			}
		}
		return out, sc.Err()
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(bytes.ReplaceAll(src, []byte{'\t'}, []byte{' '}), &doc); err != nil {
		return nil, &Error{File: path, Msg: err.Error()}
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	list := doc.Content[0]
	if list.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(list.Content); i += 2 {
			if list.Content[i].Value == "tuples" {
				list = list.Content[i+1]
				break
			}
		}
	}
	sub := &parser{name: path, dir: p.dir, src: src, s: p.s}
	return sub.tupleList(list)
}

// checks reads nexus' check list: object, permission (or relation),
// subject (or user), expected (or allowed).
func (p *parser) checks(n *yaml.Node) ([]*assertion, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, p.errf(n, "check must be a list of {object, permission, subject, expected}")
	}
	var out []*assertion
	for _, it := range n.Content {
		if it.Kind != yaml.MappingNode {
			return nil, p.errf(it, "a check is {object, permission, subject, expected}")
		}
		// An OpenFGA-style item: {user, object, assertions: {relation: bool}}.
		if a := mapGet(it, "assertions"); a != nil {
			as, err := p.fgaCheck(it)
			if err != nil {
				return nil, err
			}
			out = append(out, as...)
			continue
		}
		a := &assertion{kind: "check", file: p.name, line: it.Line}
		var obj, sub, want *yaml.Node
		for i := 0; i+1 < len(it.Content); i += 2 {
			k, v := it.Content[i], it.Content[i+1]
			switch k.Value {
			case "object":
				obj = v
			case "permission", "relation":
				a.permission = v.Value
			case "subject", "user":
				sub = v
			case "expected", "allowed":
				want = v
			default:
				return nil, p.errf(k, "unknown key %q in a check (want object, permission, subject, expected)", k.Value)
			}
		}
		if obj == nil || sub == nil || a.permission == "" || want == nil {
			return nil, p.errf(it, "a check needs object, permission, subject and expected")
		}
		var err error
		if a.object, err = api.ParseObject(obj.Value); err != nil {
			return nil, p.errf(obj, "%v", err)
		}
		if a.subject, err = api.ParseSubject(sub.Value); err != nil {
			return nil, p.errf(sub, "%v", err)
		}
		if a.want, err = strconv.ParseBool(want.Value); err != nil {
			return nil, p.errf(want, "expected must be true or false")
		}
		out = append(out, a)
	}
	return out, nil
}

func mapGet(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// fgaCheck reads an OpenFGA check: {user, object, assertions: {r: bool}}.
func (p *parser) fgaCheck(it *yaml.Node) ([]*assertion, error) {
	user, object, as := mapGet(it, "user"), mapGet(it, "object"), mapGet(it, "assertions")
	if c := mapGet(it, "context"); c != nil {
		return nil, p.errf(c, "nexus does not support OpenFGA conditions (a check with context)")
	}
	if user == nil || object == nil || as.Kind != yaml.MappingNode {
		return nil, p.errf(it, "an OpenFGA check needs user, object and assertions {relation: true|false}")
	}
	sub, err := api.ParseSubject(user.Value)
	if err != nil {
		return nil, p.errf(user, "%v", err)
	}
	obj, err := api.ParseObject(object.Value)
	if err != nil {
		return nil, p.errf(object, "%v", err)
	}
	var out []*assertion
	for i := 0; i+1 < len(as.Content); i += 2 {
		k, v := as.Content[i], as.Content[i+1]
		want, err := strconv.ParseBool(v.Value)
		if err != nil {
			return nil, p.errf(v, "want true or false")
		}
		out = append(out, &assertion{kind: "check", file: p.name, line: k.Line, object: obj, subject: sub, permission: k.Value, want: want})
	}
	return out, nil
}

// fgaTests reads OpenFGA's tests: [{name, tuples, check, list_objects,
// list_users}].
func (p *parser) fgaTests(n *yaml.Node) error {
	if n.Kind != yaml.SequenceNode {
		return p.errf(n, "tests must be a list")
	}
	for i, t := range n.Content {
		g := &group{name: fmt.Sprintf("test %d", i+1)}
		if nm := mapGet(t, "name"); nm != nil {
			g.name = nm.Value
		}
		for j := 0; j+1 < len(t.Content); j += 2 {
			k, v := t.Content[j], t.Content[j+1]
			var err error
			switch k.Value {
			case "name", "description":
			case "tuples":
				var ts []srcTuple
				ts, err = p.tupleList(v)
				g.tuples = append(g.tuples, ts...)
			case "check":
				var cs []*assertion
				cs, err = p.checks(v)
				g.checks = append(g.checks, cs...)
			case "list_objects":
				var cs []*assertion
				cs, err = p.listObjects(v)
				g.checks = append(g.checks, cs...)
			case "list_users":
				var cs []*assertion
				cs, err = p.listUsers(v)
				g.checks = append(g.checks, cs...)
			default:
				err = p.errf(k, "unknown key %q in a test (want name, tuples, check, list_objects, list_users)", k.Value)
			}
			if err != nil {
				return err
			}
		}
		p.s.groups = append(p.s.groups, g)
	}
	return nil
}

// listObjects reads {user, type, assertions: {relation: [objects]}}.
func (p *parser) listObjects(n *yaml.Node) ([]*assertion, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, p.errf(n, "list_objects must be a list")
	}
	var out []*assertion
	for _, it := range n.Content {
		user, typ, as := mapGet(it, "user"), mapGet(it, "type"), mapGet(it, "assertions")
		if c := mapGet(it, "context"); c != nil {
			return nil, p.errf(c, "nexus does not support OpenFGA conditions (list_objects with context)")
		}
		if user == nil || typ == nil || as == nil || as.Kind != yaml.MappingNode {
			return nil, p.errf(it, "list_objects needs user, type and assertions {relation: [objects]}")
		}
		sub, err := api.ParseSubject(user.Value)
		if err != nil {
			return nil, p.errf(user, "%v", err)
		}
		for i := 0; i+1 < len(as.Content); i += 2 {
			k, v := as.Content[i], as.Content[i+1]
			want, err := p.stringList(v)
			if err != nil {
				return nil, err
			}
			out = append(out, &assertion{kind: "list_objects", file: p.name, line: k.Line, subject: sub, typ: typ.Value, permission: k.Value, wantList: want})
		}
	}
	return out, nil
}

// listUsers reads {object, user_filter: [{type}], assertions: {relation:
// {users: [...]}}}.
func (p *parser) listUsers(n *yaml.Node) ([]*assertion, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, p.errf(n, "list_users must be a list")
	}
	var out []*assertion
	for _, it := range n.Content {
		object, filter, as := mapGet(it, "object"), mapGet(it, "user_filter"), mapGet(it, "assertions")
		if c := mapGet(it, "context"); c != nil {
			return nil, p.errf(c, "nexus does not support OpenFGA conditions (list_users with context)")
		}
		if object == nil || filter == nil || filter.Kind != yaml.SequenceNode || len(filter.Content) != 1 || as == nil || as.Kind != yaml.MappingNode {
			return nil, p.errf(it, "list_users needs object, user_filter with one type, and assertions {relation: {users: [...]}}")
		}
		typ := mapGet(filter.Content[0], "type")
		if typ == nil {
			return nil, p.errf(filter.Content[0], "user_filter needs a type")
		}
		if r := mapGet(filter.Content[0], "relation"); r != nil && r.Value != "" {
			p.s.skipped = append(p.s.skipped, fmt.Sprintf("%s:%d: list_users with a userset filter (%s#%s)", p.name, r.Line, typ.Value, r.Value))
			continue
		}
		obj, err := api.ParseObject(object.Value)
		if err != nil {
			return nil, p.errf(object, "%v", err)
		}
		for i := 0; i+1 < len(as.Content); i += 2 {
			k, v := as.Content[i], as.Content[i+1]
			users := mapGet(v, "users")
			if users == nil {
				return nil, p.errf(v, "want {users: [...]}")
			}
			want, err := p.stringList(users)
			if err != nil {
				return nil, err
			}
			out = append(out, &assertion{kind: "list_users", file: p.name, line: k.Line, object: obj, typ: typ.Value, permission: k.Value, wantList: want})
		}
	}
	return out, nil
}

func (p *parser) stringList(n *yaml.Node) ([]string, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, p.errf(n, "want a list")
	}
	var out []string
	for _, it := range n.Content {
		out = append(out, it.Value)
	}
	slices.Sort(out)
	return out, nil
}

// zedAssertions reads SpiceDB's assertions: {assertTrue: [...],
// assertFalse: [...]}, each "object#permission@subject".
func (p *parser) zedAssertions(n *yaml.Node) ([]*assertion, error) {
	if n.Kind != yaml.MappingNode {
		return nil, p.errf(n, "assertions must be a mapping with assertTrue and assertFalse")
	}
	var out []*assertion
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		var want bool
		switch k.Value {
		case "assertTrue":
			want = true
		case "assertFalse":
		case "assertCaveated":
			return nil, p.errf(k, "nexus does not support SpiceDB caveats (assertCaveated)")
		default:
			return nil, p.errf(k, "unknown assertion %q (want assertTrue, assertFalse)", k.Value)
		}
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			continue
		}
		if v.Kind != yaml.SequenceNode {
			return nil, p.errf(v, "%s must be a list of object#permission@subject", k.Value)
		}
		for _, it := range v.Content {
			t, err := parseTupleText(it.Value)
			if err != nil {
				return nil, p.errf(it, "%v", err)
			}
			out = append(out, &assertion{kind: "check", file: p.name, line: it.Line, object: t.Object, permission: t.Relation, subject: t.Subject, want: want})
		}
	}
	return out, nil
}
