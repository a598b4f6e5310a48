package result

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// ParseEnvoy reads a result document as opa-envoy-plugin does. A boolean
// is the decision alone. An object must have a boolean "allowed"; its
// "headers" and "dynamic_metadata" are read whatever the decision; on
// allow "request_headers_to_remove", "response_headers_to_add",
// "query_parameters_to_remove" and "query_parameters_to_set"; on deny
// "body" and "http_status" (403 when absent). A member the decision reads
// that has the wrong type (a null included) is an error, one it does not
// read is ignored, as the plugin ignores it. Headers and query parameters
// are strings or arrays of strings; headers may also be an array of
// objects. "reason" and "subject", nexus' own members, are read when they
// are strings.
func ParseEnvoy(doc []byte) (Decision, error) {
	doc = bytes.TrimSpace(doc)
	switch {
	case bytes.Equal(doc, litTrue):
		return Decision{Allowed: true}, nil
	case bytes.Equal(doc, litFalse):
		return Decision{}, nil
	}
	v, err := decode(doc)
	if err != nil {
		return Decision{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	switch v := v.(type) {
	case bool:
		return Decision{Allowed: v}, nil
	case map[string]any:
		d, err := envoyObject(v)
		if err != nil {
			return Decision{}, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		return d, nil
	}
	return Decision{}, fmt.Errorf("%w: the result is %s, not a boolean or an object", ErrInvalid, kind(v))
}

func envoyObject(m map[string]any) (Decision, error) {
	d := Decision{Object: true}
	a, ok := m["allowed"]
	if !ok {
		return d, errors.New(`the result object has no "allowed"`)
	}
	if d.Allowed, ok = a.(bool); !ok {
		return d, fmt.Errorf(`"allowed" is %s, not a boolean`, kind(a))
	}
	d.Reason, _ = m["reason"].(string)
	d.Subject, _ = m["subject"].(string)
	var err error
	if d.Headers, err = headerList(m, "headers"); err != nil {
		return d, err
	}
	if v, ok := m["dynamic_metadata"]; ok {
		o, ok := v.(map[string]any)
		if !ok {
			return d, fmt.Errorf(`"dynamic_metadata" is %s, not an object`, kind(v))
		}
		if d.DynamicMetadata, err = structpb.NewStruct(o); err != nil {
			return d, fmt.Errorf(`"dynamic_metadata": %w`, err)
		}
	}
	if !d.Allowed {
		if v, ok := m["body"]; ok {
			if d.Body, ok = v.(string); !ok {
				return d, fmt.Errorf(`"body" is %s, not a string`, kind(v))
			}
		}
		d.HTTPStatus = http.StatusForbidden
		if v, ok := m["http_status"]; ok {
			if d.HTTPStatus, err = httpStatus(v); err != nil {
				return d, err
			}
		}
		return d, nil
	}
	if d.RequestHeadersToRemove, err = stringList(m, "request_headers_to_remove"); err != nil {
		return d, err
	}
	if d.ResponseHeadersToAdd, err = headerList(m, "response_headers_to_add"); err != nil {
		return d, err
	}
	if d.QueryParametersToRemove, err = stringList(m, "query_parameters_to_remove"); err != nil {
		return d, err
	}
	if v, ok := m["query_parameters_to_set"]; ok {
		o, ok := v.(map[string]any)
		if !ok {
			return d, fmt.Errorf(`"query_parameters_to_set" is %s, not an object`, kind(v))
		}
		for _, k := range slices.Sorted(maps.Keys(o)) {
			vs, err := stringValues(o[k], "query_parameters_to_set", k)
			if err != nil {
				return d, err
			}
			for _, s := range vs {
				d.QueryParametersToSet = append(d.QueryParametersToSet, QueryParameter{Key: k, Value: s})
			}
		}
	}
	return d, nil
}

// httpStatus reads http_status: an integer that is both an HTTP status
// Go knows and one of Envoy's StatusCode values.
func httpStatus(v any) (int, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf(`"http_status" is %s, not a number`, kind(v))
	}
	i, err := n.Int64()
	if err != nil {
		return 0, fmt.Errorf(`"http_status" %s is not an integer`, n)
	}
	if _, known := typev3.StatusCode_name[int32(i)]; http.StatusText(int(i)) == "" || !known {
		return 0, fmt.Errorf(`"http_status" %d is not an HTTP status Envoy answers with`, i)
	}
	return int(i), nil
}

// headerList reads headers: an object of strings or arrays of strings,
// or an array of such objects. Each object's keys are taken sorted
// (the plugin takes them in no particular order); values keep their
// order.
func headerList(m map[string]any, name string) ([]Header, error) {
	v, ok := m[name]
	if !ok {
		return nil, nil
	}
	var objs []map[string]any
	switch v := v.(type) {
	case map[string]any:
		objs = []map[string]any{v}
	case []any:
		for _, e := range v {
			o, ok := e.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%q holds %s, not an object", name, kind(e))
			}
			objs = append(objs, o)
		}
	default:
		return nil, fmt.Errorf("%q is %s, not an object", name, kind(v))
	}
	var out []Header
	for _, o := range objs {
		for _, k := range slices.Sorted(maps.Keys(o)) {
			vs, err := stringValues(o[k], name, k)
			if err != nil {
				return nil, err
			}
			for _, s := range vs {
				out = append(out, Header{Key: k, Value: s})
			}
		}
	}
	return out, nil
}

// stringValues reads the value of key k of member name: a string or an array
// of strings.
func stringValues(v any, name, k string) ([]string, error) {
	switch v := v.(type) {
	case string:
		return []string{v}, nil
	case []any:
		out := make([]string, len(v))
		for i, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("%q: %q holds %s, not a string", name, k, kind(e))
			}
			out[i] = s
		}
		return out, nil
	}
	return nil, fmt.Errorf("%q: %q is %s, not a string or an array of strings", name, k, kind(v))
}

// stringList reads member name: an array of strings.
func stringList(m map[string]any, name string) ([]string, error) {
	v, ok := m[name]
	if !ok {
		return nil, nil
	}
	l, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%q is %s, not an array of strings", name, kind(v))
	}
	out := make([]string, len(l))
	for i, e := range l {
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("%q holds %s, not a string", name, kind(e))
		}
		out[i] = s
	}
	return out, nil
}

func decode(doc []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("data after the result")
	}
	return v, nil
}

// kind names a JSON value's type for an error message.
func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	}
	return "an object"
}
