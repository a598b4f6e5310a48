package input

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
)

// This file is the reference the encoders are held to: the input document
// opa-envoy-plugin builds, computed the slow, obvious way, as the plugin's
// source reads, and then as OPA turns those Go values into its own (an
// int of any width to its decimal number, a float64 to its shortest %g
// text, a float32 to its shortest decimal, bytes to standard base64, an
// enum to its number). Numbers are json.Number, so that the number's text
// is compared too.

// reference is the document for req, as the plugin builds it with
// skip-request-body-parse set to skipBody.
func reference(t *testing.T, req *authv3.CheckRequest, skipBody bool) map[string]any {
	t.Helper()
	doc, err := refDoc(req, skipBody)
	if err != nil {
		t.Fatalf("the plugin would refuse the request: %v", err)
	}
	return normalize(t, doc)
}

// refError is the plugin's request_parse_error, raised in the reference
// by refFail.
type refError struct{ error }

func refFail(format string, args ...any) { panic(refError{fmt.Errorf(format, args...)}) }

// refDoc is the document for req, or the error the plugin answers it with.
func refDoc(req *authv3.CheckRequest, skipBody bool) (doc map[string]any, err error) {
	defer func() {
		if r := recover(); r != nil {
			re, ok := r.(refError)
			if !ok {
				panic(r)
			}
			doc, err = nil, re.error
		}
	}()
	doc = refMessage(req.ProtoReflect())
	h := req.GetAttributes().GetRequest().GetHttp()
	doc["version"] = map[string]any{"ext_authz": "v3", "encoding": "protojson"}
	rawPath, rawQuery, _ := strings.Cut(h.GetPath(), "?")
	decoded, err := url.PathUnescape(rawPath)
	if err != nil {
		refFail("path: %v", err)
	}
	var pp []any
	for _, s := range strings.Split(strings.TrimLeft(decoded, "/"), "/") {
		pp = append(pp, s)
	}
	doc["parsed_path"] = pp
	query, err := url.ParseQuery(rawQuery)
	if err != nil {
		refFail("query: %v", err)
	}
	doc["parsed_query"] = refValues(query)
	if !skipBody {
		body, truncated := refBody(h.GetHeaders(), h.GetBody(), h.GetRawBody())
		doc["parsed_body"] = body
		doc["truncated_body"] = truncated
	}
	if p := req.GetAttributes().GetSource().GetPrincipal(); p != "" {
		doc["source_principal"] = p
	}
	return doc, nil
}

// refMessage: each populated field under its JSON name; a Struct as its
// AsMap.
func refMessage(m protoreflect.Message) map[string]any {
	if s, ok := m.Interface().(*structpb.Struct); ok {
		return refPlain(s.AsMap()).(map[string]any)
	}
	out := map[string]any{}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			mm := map[string]any{}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				mm[k.String()] = refScalar(mv)
				return true
			})
			out[fd.JSONName()] = mm
		case fd.IsList():
			var l []any
			for i := range v.List().Len() {
				l = append(l, refScalar(v.List().Get(i)))
			}
			out[fd.JSONName()] = l
		default:
			out[fd.JSONName()] = refScalar(v)
		}
		return true
	})
	return out
}

// refScalar is OPA's value of protoreflect's Go value.
func refScalar(v protoreflect.Value) any {
	switch x := v.Interface().(type) {
	case protoreflect.Message:
		return refMessage(x)
	case protoreflect.EnumNumber:
		return json.Number(strconv.Itoa(int(x)))
	case int32:
		return json.Number(strconv.Itoa(int(x)))
	case int64:
		return json.Number(strconv.FormatInt(x, 10))
	case uint32:
		return json.Number(strconv.FormatUint(uint64(x), 10))
	case uint64:
		return json.Number(strconv.FormatUint(x, 10))
	case float32:
		return json.Number(strconv.FormatFloat(float64(x), 'f', -1, 32))
	case float64:
		return json.Number(strconv.FormatFloat(x, 'g', -1, 64))
	case []byte:
		return base64.StdEncoding.EncodeToString(x)
	case string, bool:
		return x
	}
	panic("reference: unexpected protobuf value " + v.String())
}

// refPlain is OPA's value of structpb's AsMap.
func refPlain(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[k] = refPlain(e)
		}
		return out
	case []any:
		out := []any{}
		for _, e := range x {
			out = append(out, refPlain(e))
		}
		return out
	case float64:
		return json.Number(strconv.FormatFloat(x, 'g', -1, 64))
	}
	return v
}

func refValues(v map[string][]string) map[string]any {
	out := map[string]any{}
	for k, vs := range v {
		l := []any{}
		for _, s := range vs {
			l = append(l, s)
		}
		out[k] = l
	}
	return out
}

// refBody is parsed_body and truncated_body as the plugin computes them.
func refBody(headers map[string]string, body string, rawBody []byte) (any, bool) {
	if headers["x-envoy-auth-partial-body"] == "true" {
		return nil, true
	}
	ct, ok := headers["content-type"]
	if !ok {
		return nil, false
	}
	var kind string
	switch {
	case strings.Contains(ct, "application/json"):
		kind = "json"
	case strings.Contains(ct, "application/grpc"):
		return nil, false // parsed only with descriptors, which nexus does not take
	case strings.Contains(ct, "application/x-www-form-urlencoded"):
		kind = "form"
	case strings.Contains(ct, "multipart/form-data"):
		kind = "multipart"
	default:
		return nil, false
	}
	if body == "" {
		body = string(rawBody)
	}
	if body == "" {
		return nil, false
	}
	if cl, ok := headers["content-length"]; ok {
		n, err := strconv.ParseInt(cl, 10, 64)
		if err != nil {
			refFail("content-length: %v", err)
		}
		if n != -1 && n > int64(len(body)) {
			return nil, true
		}
	}
	switch kind {
	case "json":
		return refJSON([]byte(body)), false
	case "form":
		vals, err := url.ParseQuery(body)
		if err != nil {
			refFail("form: %v", err)
		}
		return refValues(vals), false
	}
	_, params, err := mime.ParseMediaType(ct)
	if err != nil {
		refFail("multipart: %v", err)
	}
	boundary, ok := params["boundary"]
	if !ok {
		return nil, false
	}
	out := map[string]any{}
	r := multipart.NewReader(strings.NewReader(body), boundary)
	for {
		p, err := r.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			refFail("multipart: %v", err)
		}
		if p.FormName() == "" {
			continue
		}
		b, err := io.ReadAll(p)
		if err != nil {
			refFail("multipart: %v", err)
		}
		var v any = string(b)
		if strings.Contains(p.Header.Get("Content-Type"), "application/json") {
			v = refJSON(b)
		}
		l, _ := out[p.FormName()].([]any)
		out[p.FormName()] = append(l, v)
	}
	return out, false
}

func refJSON(b []byte) any {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		refFail("JSON: %v", err)
	}
	if tok, err := d.Token(); tok != nil || (err != nil && err != io.EOF) {
		refFail("JSON: data after the value")
	}
	return v
}

// normalize is doc as JSON would carry it (invalid UTF-8 replaced),
// decoded with numbers as json.Number.
func normalize(t *testing.T, doc any) map[string]any {
	t.Helper()
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatalf("reference: %v", err)
	}
	return decodeDoc(t, js)
}

// decodeDoc decodes an input document, numbers as json.Number.
func decodeDoc(t *testing.T, js []byte) map[string]any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(js))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, js)
	}
	return m
}

// assertReference fails t unless AppendEnvoy writes the reference's
// document for req.
func assertReference(t *testing.T, req *authv3.CheckRequest, opts Options) []byte {
	t.Helper()
	got, err := AppendEnvoy(nil, req, opts)
	if err != nil {
		t.Fatalf("AppendEnvoy: %v", err)
	}
	assertEngineReads(t, got)
	doc := decodeDoc(t, got)
	if want := reference(t, req, opts.SkipBody); !reflect.DeepEqual(doc, want) {
		g, _ := json.MarshalIndent(doc, "", " ")
		w, _ := json.MarshalIndent(want, "", " ")
		t.Fatalf("input differs from the plugin's\ngot:  %s\nwant: %s", g, w)
	}
	return got
}

// assertEngineReads fails t unless doc is what the engine takes as
// trusted: UTF-8 JSON without an escaped lone surrogate, which its JSON
// reader refuses.
func assertEngineReads(t *testing.T, doc []byte) {
	t.Helper()
	if !utf8.Valid(doc) || !json.Valid(doc) {
		t.Fatalf("not UTF-8 JSON: %q", doc)
	}
	for i := 0; i+1 < len(doc); i++ {
		if doc[i] != '\\' {
			continue
		}
		if doc[i+1] != 'u' {
			i++ // an escaped character, maybe a backslash
			continue
		}
		r, _ := strconv.ParseUint(string(doc[i+2:i+6]), 16, 32)
		if utf16.IsSurrogate(rune(r)) {
			if r >= 0xdc00 || i+12 > len(doc) || string(doc[i+6:i+8]) != `\\u` {
				t.Fatalf("escaped lone surrogate at %d: %q", i, doc)
			}
			r2, _ := strconv.ParseUint(string(doc[i+8:i+12]), 16, 32)
			if r2 < 0xdc00 || r2 > 0xdfff {
				t.Fatalf("escaped lone surrogate at %d: %q", i, doc)
			}
			i += 6
		}
		i += 5
	}
}
