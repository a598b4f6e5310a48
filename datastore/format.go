package datastore

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore/internal/index"
	bolt "go.etcd.io/bbolt"
)

// Format is a tuple file format for Import and Export.
type Format string

// Tuple file formats.
const (
	// FormatNDJSON is one JSON object per line:
	// {"object":"folder:d1","relation":"viewer","subject":"user:alice"}.
	FormatNDJSON Format = "ndjson"
	// FormatCSV is object,relation,subject per line; a first line
	// "object,relation,subject" is a header and skipped.
	FormatCSV Format = "csv"
	// FormatText is one tuple per line in the api text syntax; blank lines
	// and lines starting with '#' or "//" are skipped.
	FormatText Format = "text"
)

// FormatForPath picks a format from a file name's extension: .csv is CSV,
// .txt and .tuples are text, anything else NDJSON.
func FormatForPath(path string) Format {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".csv":
		return FormatCSV
	case ".txt", ".tuples":
		return FormatText
	}
	return FormatNDJSON
}

// ParseFormat accepts "ndjson", "json", "csv" and "text".
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(s) {
	case "ndjson", "json", "jsonl":
		return FormatNDJSON, nil
	case "csv":
		return FormatCSV, nil
	case "text", "txt", "tuples":
		return FormatText, nil
	}
	return "", fmt.Errorf("datastore: unknown format %q (want ndjson, csv or text)", s)
}

type jsonTuple struct {
	Object   string `json:"object"`
	Relation string `json:"relation"`
	Subject  string `json:"subject"`
}

// parseLine parses one non-empty line. The tuple aliases line.
func parseLine(f Format, line []byte) (api.Tuple, error) {
	switch f {
	case FormatText:
		return api.ParseTuple(index.Bstr(line))
	case FormatCSV:
		// Not encoding/csv: no valid field can hold a comma, a quote or a
		// line break (see package api's syntax), so quotes can only wrap
		// a whole field, and they are stripped below. encoding/csv (one
		// reader reused for every line) rejects what this accepts, such
		// as a space after a closing quote, numbers lines of its own in
		// its errors, and cost 360 ns of CPU per line against 260 ns here
		// (BenchmarkParseLineCSV).
		parts := bytes.Split(line, []byte{','})
		if len(parts) != 3 {
			return api.Tuple{}, fmt.Errorf("want 3 comma-separated fields object,relation,subject, got %d", len(parts))
		}
		for i, p := range parts {
			p = bytes.TrimSpace(p)
			if len(p) >= 2 && p[0] == '"' && p[len(p)-1] == '"' {
				p = p[1 : len(p)-1]
			}
			parts[i] = p
		}
		return tupleFromParts(index.Bstr(parts[0]), index.Bstr(parts[1]), index.Bstr(parts[2]))
	default:
		if o, r, s, ok := fastJSON(line); ok {
			return tupleFromParts(o, r, s)
		}
		var jt jsonTuple
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&jt); err != nil {
			return api.Tuple{}, fmt.Errorf("json: %w", err)
		}
		return tupleFromParts(jt.Object, jt.Relation, jt.Subject)
	}
}

func tupleFromParts(o, r, s string) (api.Tuple, error) {
	obj, err := api.ParseObject(o)
	if err != nil {
		return api.Tuple{}, err
	}
	if !api.ValidName(r) {
		return api.Tuple{}, &api.SyntaxError{Input: r, Msg: "invalid relation name"}
	}
	sub, err := api.ParseSubject(s)
	if err != nil {
		return api.Tuple{}, err
	}
	return api.Tuple{Object: obj, Relation: r, Subject: sub}, nil
}

// fastJSON parses {"object":"..","relation":"..","subject":".."} in any key
// order without escapes; ok is false for anything else.
func fastJSON(b []byte) (o, r, s string, ok bool) {
	i := 0
	ws := func() {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
			i++
		}
	}
	str := func() (string, bool) {
		if i >= len(b) || b[i] != '"' {
			return "", false
		}
		j := i + 1
		for j < len(b) && b[j] != '"' {
			if b[j] == '\\' {
				return "", false
			}
			j++
		}
		if j >= len(b) {
			return "", false
		}
		v := index.Bstr(b[i+1 : j])
		i = j + 1
		return v, true
	}
	ws()
	if i >= len(b) || b[i] != '{' {
		return
	}
	i++
	seen := 0
	for {
		ws()
		k, ok1 := str()
		if !ok1 {
			return
		}
		ws()
		if i >= len(b) || b[i] != ':' {
			return
		}
		i++
		ws()
		v, ok2 := str()
		if !ok2 {
			return
		}
		switch k {
		case "object":
			o, seen = v, seen|1
		case "relation":
			r, seen = v, seen|2
		case "subject":
			s, seen = v, seen|4
		default:
			return
		}
		ws()
		if i < len(b) && b[i] == ',' {
			i++
			continue
		}
		if i < len(b) && b[i] == '}' {
			i++
			ws()
			return o, r, s, i == len(b) && seen == 7
		}
		return
	}
}

// Export writes every tuple in object-first key order.
func (s *BoltStore) Export(ctx context.Context, w io.Writer, format Format) (n int64, err error) {
	defer s.guard("export", debug.SetPanicOnFault(true), &err)
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	if format == "" {
		format = FormatNDJSON
	}
	if _, err := ParseFormat(string(format)); err != nil {
		return 0, err
	}
	bw := bufio.NewWriterSize(callerWriter{w}, 1<<16)
	err = s.viewState(func(tx *bolt.Tx, st *state) error {
		d := st.Dict
		if format == FormatCSV {
			if _, err := bw.WriteString("object,relation,subject\n"); err != nil {
				return err
			}
		}
		c := tx.Bucket(bObj).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if n%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			t, err := index.DecodeTuple(d, k)
			if err != nil {
				return err
			}
			switch format {
			case FormatText:
				bw.WriteString(t.String())
			case FormatCSV:
				bw.WriteString(t.Object.String())
				bw.WriteByte(',')
				bw.WriteString(t.Relation)
				bw.WriteByte(',')
				bw.WriteString(t.Subject.String())
			default:
				bw.WriteString(`{"object":"`)
				bw.WriteString(t.Object.String())
				bw.WriteString(`","relation":"`)
				bw.WriteString(t.Relation)
				bw.WriteString(`","subject":"`)
				bw.WriteString(t.Subject.String())
				bw.WriteString(`"}`)
			}
			if err := bw.WriteByte('\n'); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("datastore: export: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return n, fmt.Errorf("datastore: export: %w", err)
	}
	return n, nil
}
