package schemaconv

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/nexuspdp/nexus/api"
	"go.yaml.in/yaml/v3"
)

// TupleFormat is a file format of OpenFGA tuples, as the fga CLI writes
// and reads them (fga tuple read --output-format, fga tuple write --file).
type TupleFormat string

// OpenFGA tuple file formats.
const (
	// TuplesDocument is one JSON or YAML document: a list of
	// {"user","relation","object"} (fga tuple read --output-format
	// simple-json or yaml; a .fga.yaml store file's tuples list has the
	// same items), or the response of fga tuple read (--output-format json),
	// {"tuples":[{"key":{...},"timestamp":...}],"continuation_token":...}.
	TuplesDocument TupleFormat = "json"
	// TuplesJSONL is one {"user","relation","object"} per line.
	TuplesJSONL TupleFormat = "jsonl"
	// TuplesCSV has a header naming its columns: user_type, user_id,
	// user_relation (optional), relation, object_type, object_id and the
	// optional condition_name, condition_context.
	TuplesCSV TupleFormat = "csv"
)

// TupleFormatForPath picks the format from a file extension: .jsonl and
// .ndjson are JSONL, .csv CSV, .json, .yaml and .yml a document; anything
// else "" (detected from the content).
func TupleFormatForPath(name string) TupleFormat {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".jsonl", ".ndjson":
		return TuplesJSONL
	case ".csv":
		return TuplesCSV
	case ".json", ".yaml", ".yml":
		return TuplesDocument
	}
	return ""
}

// detectTupleFormat looks at the first bytes: '{' starting a line that is
// a complete JSON object is JSONL, any other JSON or YAML is a document,
// and a first line naming user_type is CSV.
func detectTupleFormat(src []byte) TupleFormat {
	t := bytes.TrimLeft(src, " \t\r\n")
	first := t
	if i := bytes.IndexByte(first, '\n'); i >= 0 {
		first = first[:i]
	}
	switch {
	case len(t) == 0:
		return TuplesDocument
	case t[0] == '{' && json.Valid(bytes.TrimSpace(first)):
		return TuplesJSONL
	case bytes.Contains(first, []byte("user_type")) && bytes.Contains(first, []byte(",")):
		return TuplesCSV
	}
	return TuplesDocument
}

// ReadOpenFGATuples reads OpenFGA tuples in format ("" detects it) and
// calls fn with each as a nexus tuple and the line it is on. It stops at
// the first tuple nexus cannot hold (a wildcard user, a condition, an ID
// with characters nexus does not accept) with an *Error naming its line,
// or at the first error fn returns. JSONL and CSV are streamed; a document
// is read whole.
func ReadOpenFGATuples(r io.Reader, format TupleFormat, fn func(t api.Tuple, line int) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	if format == "" {
		head, _ := br.Peek(4096)
		format = detectTupleFormat(head)
	}
	switch format {
	case TuplesJSONL:
		return readFGAJSONL(br, fn)
	case TuplesCSV:
		return readFGACSV(br, fn)
	case TuplesDocument:
		src, err := io.ReadAll(br)
		if err != nil {
			return err
		}
		return readFGADocument(src, fn)
	}
	return fmt.Errorf("%w %q (want json, jsonl or csv)", ErrUnknownFormat, format)
}

// fgaKey is an OpenFGA tuple key.
type fgaKey struct {
	User      string          `json:"user"`
	Relation  string          `json:"relation"`
	Object    string          `json:"object"`
	Condition json.RawMessage `json:"condition,omitempty"`
}

// send converts an OpenFGA tuple key and hands it to fn; at is where it
// was read.
func (k fgaKey) send(at pos, hasCondition bool, fn func(api.Tuple, int) error) error {
	if hasCondition {
		return unsupportedErr(at, "OpenFGA conditions", "tuple %s %s %s has a condition", k.User, k.Relation, k.Object)
	}
	if k.User == "" || k.Relation == "" || k.Object == "" {
		return syntaxErr(at, "a tuple needs user, relation and object")
	}
	if strings.HasSuffix(k.User, ":*") {
		return unsupportedErr(at, "wildcard subjects", "user %s", k.User)
	}
	o, err := api.ParseObject(k.Object)
	if err != nil {
		return invalidErr(at, "object %q: %v", k.Object, err)
	}
	s, err := api.ParseSubject(k.User)
	if err != nil {
		return invalidErr(at, "user %q: %v", k.User, err)
	}
	t := api.Tuple{Object: o, Relation: k.Relation, Subject: s}
	if err := t.Validate(); err != nil {
		return invalidErr(at, "tuple %s %s %s: %v", k.User, k.Relation, k.Object, err)
	}
	return fn(t, at.line)
}

func readFGAJSONL(r *bufio.Reader, fn func(api.Tuple, int) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var k fgaKey
		if err := json.Unmarshal(b, &k); err != nil {
			return syntaxErr(pos{line, 1}, "json: %v", err)
		}
		if err := k.send(pos{line, 1}, len(k.Condition) > 0 && string(k.Condition) != "null", fn); err != nil {
			return err
		}
	}
	return sc.Err()
}

func readFGACSV(r io.Reader, fn func(api.Tuple, int) error) error {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	head, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return syntaxErr(pos{1, 1}, "csv: %v", err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[strings.TrimSpace(h)] = i
	}
	for _, need := range []string{"user_type", "user_id", "relation", "object_type", "object_id"} {
		if _, ok := col[need]; !ok {
			return syntaxErr(pos{1, 1}, "csv header lacks %s (want user_type,user_id,user_relation,relation,object_type,object_id)", need)
		}
	}
	get := func(rec []string, name string) string {
		if i, ok := col[name]; ok && i < len(rec) {
			return strings.TrimSpace(rec[i])
		}
		return ""
	}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return syntaxErr(pos{pe.Line, pe.Column}, "csv: %v", pe.Err)
			}
			return err
		}
		line, _ := cr.FieldPos(0)
		k := fgaKey{
			User:     get(rec, "user_type") + ":" + get(rec, "user_id"),
			Relation: get(rec, "relation"),
			Object:   get(rec, "object_type") + ":" + get(rec, "object_id"),
		}
		if ur := get(rec, "user_relation"); ur != "" {
			k.User += "#" + ur
		}
		if err := k.send(pos{line, 1}, get(rec, "condition_name") != "", fn); err != nil {
			return err
		}
	}
}

func readFGADocument(src []byte, fn func(api.Tuple, int) error) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(bytes.ReplaceAll(src, []byte{'\t'}, []byte{' '}), &doc); err != nil {
		return syntaxErr(pos{1, 1}, "%v", err)
	}
	if len(doc.Content) == 0 {
		return nil
	}
	root := doc.Content[0]
	if root.Kind == yaml.MappingNode {
		ts := mapValue(root, "tuples")
		if ts == nil {
			return syntaxErr(nodePos(root), "want a list of tuples or an object with tuples")
		}
		root = ts
	}
	return FGATupleNodes(root, fn)
}

// FGATupleNodes converts a YAML list of OpenFGA tuples, each
// {user, relation, object} or {key: {user, relation, object}}, as a
// .fga.yaml store file or fga tuple read prints them.
func FGATupleNodes(list *yaml.Node, fn func(api.Tuple, int) error) error {
	if isNull(list) {
		return nil
	}
	if list.Kind != yaml.SequenceNode {
		return syntaxErr(nodePos(list), "tuples must be a list")
	}
	for _, it := range list.Content {
		if k := mapValue(it, "key"); k != nil {
			it = k
		}
		if it.Kind != yaml.MappingNode {
			return syntaxErr(nodePos(it), "a tuple must be a mapping with user, relation and object")
		}
		var k fgaKey
		for i := 0; i+1 < len(it.Content); i += 2 {
			key, v := it.Content[i], it.Content[i+1]
			switch key.Value {
			case "user":
				k.User = v.Value
			case "relation":
				k.Relation = v.Value
			case "object":
				k.Object = v.Value
			case "condition":
				if !isNull(v) {
					k.Condition = json.RawMessage("{}")
				}
			}
		}
		if err := k.send(nodePos(it), len(k.Condition) > 0, fn); err != nil {
			return err
		}
	}
	return nil
}
