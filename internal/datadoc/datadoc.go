// Package datadoc reads and replaces one top-level member of a policy's
// data document (a JSON object, data.json) in place: the nexus member the
// server reads and writes is small, the rest of the document may be tens
// of megabytes, and decoding it all to change one member would hold it
// several times over.
//
//	raw, ok, err := datadoc.Member(data, "nexus")
//	...
//	out, err := datadoc.Replace(data, "nexus", newRaw)
package datadoc

import (
	"encoding/json"
	"errors"
)

// ErrNotObject reports a document that is not a valid JSON object.
var ErrNotObject = errors.New("data is not a JSON object")

// member is one top-level member: data[start:end] runs from its key's
// opening quote to the end of its value, data[val:end] is its value.
type member struct {
	key             string
	start, val, end int
}

// members lists the top-level members of data, a JSON object; blank data
// is the empty object.
func members(data []byte) (open, close int, ms []member, err error) {
	if skipSpace(data, 0) == len(data) {
		return -1, -1, nil, nil
	}
	if !json.Valid(data) {
		return 0, 0, nil, ErrNotObject
	}
	i := skipSpace(data, 0)
	if data[i] != '{' {
		return 0, 0, nil, ErrNotObject
	}
	open = i
	i = skipSpace(data, i+1)
	for data[i] != '}' {
		if data[i] == ',' {
			i = skipSpace(data, i+1)
		}
		start := i
		kend := skipString(data, i)
		var key string
		if err := json.Unmarshal(data[start:kend], &key); err != nil {
			return 0, 0, nil, ErrNotObject
		}
		i = skipSpace(data, kend)
		i = skipSpace(data, i+1) // the colon
		end := skipValue(data, i)
		ms = append(ms, member{key: key, start: start, val: i, end: end})
		i = skipSpace(data, end)
	}
	return open, i, ms, nil
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\r' || data[i] == '\n') {
		i++
	}
	return i
}

// skipString returns the index after the string that starts at i.
func skipString(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// skipValue returns the index after the value that starts at i; data is
// valid JSON.
func skipValue(data []byte, i int) int {
	depth := 0
	for i < len(data) {
		switch c := data[i]; c {
		case '"':
			i = skipString(data, i)
			if depth == 0 {
				return i
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1
			}
			if depth < 0 { // the end of the enclosing object: a scalar ended
				return i
			}
		case ',':
			if depth == 0 {
				return i
			}
		case ' ', '\t', '\r', '\n':
			if depth == 0 {
				return i
			}
		}
		i++
	}
	return i
}

// Member returns the value of the top-level member key of data (the last
// one, as encoding/json reads a repeated key), a view of data, and whether
// there is one. Blank data is the empty object; anything but a JSON object
// is ErrNotObject.
func Member(data []byte, key string) (raw []byte, ok bool, err error) {
	_, _, ms, err := members(data)
	if err != nil {
		return nil, false, err
	}
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].key == key {
			return data[ms[i].val:ms[i].end], true, nil
		}
	}
	return nil, false, nil
}

// Replace returns data with the top-level member key set to value (JSON),
// every other member as it was: in place of the member when there is one
// (a repeated key once), else last. data is not modified; the result is
// one new buffer.
func Replace(data []byte, key string, value []byte) ([]byte, error) {
	open, close, ms, err := members(data)
	if err != nil {
		return nil, err
	}
	k, _ := json.Marshal(key)
	if open < 0 {
		out := make([]byte, 0, len(k)+len(value)+3)
		out = append(append(append(append(out, '{'), k...), ':'), value...)
		return append(out, '}'), nil
	}
	out := make([]byte, 0, len(data)+len(k)+len(value)+2)
	out = append(out, data[:open+1]...)
	written, first := false, true
	for _, m := range ms {
		if m.key == key {
			if written {
				continue
			}
			written = true
			if !first {
				out = append(out, ',')
			}
			out = append(append(append(out, k...), ':'), value...)
			first = false
			continue
		}
		if !first {
			out = append(out, ',')
		}
		out = append(out, data[m.start:m.end]...)
		first = false
	}
	if !written {
		if !first {
			out = append(out, ',')
		}
		out = append(append(append(out, k...), ':'), value...)
	}
	return append(out, data[close:]...), nil
}
