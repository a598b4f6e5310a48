package input

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nexuspdp/nexus/engine"
	"github.com/nexuspdp/nexus/pdp/internal/prune"
)

// The engine's ValueWriter is a Writer: WriteEnvoy writes into the
// policy's memory.
var _ Writer = (*engine.ValueWriter)(nil)

// goWriter is the oracle the builder's values are held to: a Writer that
// builds the Go values encoding/json decodes JSON into (map[string]any,
// []any, string, json.Number, bool, nil), and fails on any misuse the
// engine's ValueWriter refuses, on a key that is not a string, on a
// string that is not UTF-8 (which JSON cannot carry) and on JSON text
// that is not compact.
type goWriter struct {
	open []*goFrame
	root any
	has  bool
	err  error
}

type goFrame struct {
	object bool
	elems  []any
}

func (w *goWriter) fail(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf(format, args...)
	}
}

func (w *goWriter) push(v any) {
	if len(w.open) > 0 {
		f := w.open[len(w.open)-1]
		if f.object && len(f.elems)%2 == 0 {
			if _, ok := v.(string); !ok {
				w.fail("object key %#v is not a string", v)
			}
		}
		f.elems = append(f.elems, v)
		return
	}
	if w.has {
		w.fail("more than one top-level value")
	}
	w.root, w.has = v, true
}

func (w *goWriter) Null()       { w.push(nil) }
func (w *goWriter) Bool(v bool) { w.push(v) }
func (w *goWriter) Int(v int64) { w.push(json.Number(strconv.FormatInt(v, 10))) }

func (w *goWriter) Number(text string) {
	if v, err := decodeNumbers([]byte(text)); err != nil || v != json.Number(text) {
		w.fail("%q is not one JSON number", text)
	}
	w.push(json.Number(strings.Clone(text)))
}

func (w *goWriter) String(s string) {
	if !utf8.ValidString(s) {
		w.fail("string %q is not UTF-8", s)
	}
	w.push(strings.Clone(s))
}

func (w *goWriter) JSON(b []byte) {
	var c bytes.Buffer
	if err := json.Compact(&c, b); err != nil || !bytes.Equal(c.Bytes(), b) || !utf8.Valid(b) {
		w.fail("JSON %q is not compact UTF-8 JSON (%v)", b, err)
		w.push(nil)
		return
	}
	v, err := decodeNumbers(b)
	if err != nil {
		w.fail("JSON %q: %v", b, err)
	}
	w.push(v)
}

func (w *goWriter) BeginArray()  { w.open = append(w.open, &goFrame{}) }
func (w *goWriter) BeginObject() { w.open = append(w.open, &goFrame{object: true}) }

func (w *goWriter) End() {
	if len(w.open) == 0 {
		w.fail("End without Begin")
		return
	}
	f := w.open[len(w.open)-1]
	w.open = w.open[:len(w.open)-1]
	if !f.object {
		w.push(append([]any{}, f.elems...))
		return
	}
	if len(f.elems)%2 != 0 {
		w.fail("an object has a key without a value")
	}
	m := map[string]any{}
	for i := 0; i+1 < len(f.elems); i += 2 {
		k, _ := f.elems[i].(string)
		m[k] = f.elems[i+1] // a key given twice keeps its last value
	}
	w.push(m)
}

// value is the one value written, or the first misuse.
func (w *goWriter) value() (any, error) {
	switch {
	case w.err != nil:
		return nil, w.err
	case len(w.open) > 0:
		return nil, errors.New("a collection is not closed")
	case !w.has:
		return nil, errors.New("no value written")
	}
	return w.root, nil
}

// decodeNumbers decodes one JSON value as encoding/json does, numbers as
// json.Number.
func decodeNumbers(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the value: %v", err)
	}
	return v, nil
}

// assertSameError fails t unless the two errors are the same: both nil,
// or the same message, the same kinds and the same cause. A map with two
// strings that are not UTF-8 is refused naming either (the map's order),
// so for ErrInvalidUTF8 only the kind is compared.
func assertSameError(t *testing.T, what string, js, vals error) {
	t.Helper()
	sameText := js != nil && vals != nil && (js.Error() == vals.Error() || errors.Is(js, ErrInvalidUTF8) && errors.Is(vals, ErrInvalidUTF8))
	if (js == nil) != (vals == nil) || (js != nil && !sameText) {
		t.Fatalf("%s: JSON err = %v, Writer err = %v", what, js, vals)
	}
	for _, kind := range []error{ErrInvalidUTF8, ErrInvalidPath, ErrInvalidQuery, ErrInvalidBody} {
		if errors.Is(js, kind) != errors.Is(vals, kind) {
			t.Fatalf("%s: errors.Is(%v): JSON %v, Writer %v", what, kind, errors.Is(js, kind), errors.Is(vals, kind))
		}
	}
	var jre, vre *RequestError
	if errors.As(js, &jre) != errors.As(vals, &vre) || (jre != nil && (jre.Kind != vre.Kind || jre.What != vre.What || jre.Cause.Error() != vre.Cause.Error())) {
		t.Fatalf("%s: RequestError: JSON %#v, Writer %#v", what, jre, vre)
	}
}

// assertSameDocument fails t unless write gives, on a goWriter, the
// values that encoding/json decodes from the JSON that appendDoc gives,
// or the same error; it returns the JSON.
func assertSameDocument(t *testing.T, what string, anyOrder bool, appendDoc func([]byte) ([]byte, error), write func(Writer) error) []byte {
	t.Helper()
	js, jerr := appendDoc(nil)
	var w goWriter
	werr := write(&w)
	assertSameError(t, what, jerr, werr)
	if jerr != nil {
		return nil
	}
	got, err := w.value()
	if err != nil {
		t.Fatalf("%s: Writer misused: %v", what, err)
	}
	want, err := decodeNumbers(js)
	if err != nil {
		t.Fatalf("%s: AppendEnvoy's JSON: %v\n%s", what, err, js)
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.Marshal(got)
		t.Fatalf("%s: values differ from the JSON's\nWriter: %s\nJSON:   %s", what, g, js)
	}
	if anyOrder {
		return js // the members of maps in any order: the same values, other bytes
	}
	// The JSON Writer through WriteEnvoy is AppendEnvoy.
	jw := jsonWriter{buf: []byte("x")}
	if err := write(&jw); err != nil || string(jw.buf) != "x"+string(js) {
		t.Fatalf("%s: through the JSON Writer: %s (%v)\nwant x%s", what, jw.buf, err, js)
	}
	return js
}

// writerRequests are every CheckRequest the package's tests and
// benchmarks use, and more: numbers of every kind in metadata, nested
// lists, many headers and query parameters, a decoded path, query and
// bodies that are not UTF-8, and requests that are refused.
func writerRequests() map[string]*authv3.CheckRequest {
	reqs := keepRequests()
	add := func(name string, req *authv3.CheckRequest) {
		if _, dup := reqs[name]; dup {
			panic(name)
		}
		reqs[name] = req
	}
	add("empty-attr", &authv3.CheckRequest{Attributes: &authv3.AttributeContext{}})
	add("zero-port", &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		PortSpecifier: &corev3.SocketAddress_PortValue{},
	}}}}}})
	add("empty-address", &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{}}}})
	add("time", &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Time: &timestamppb.Timestamp{Seconds: -5, Nanos: 1500}}}})
	add("internal-addr", &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Destination: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_EnvoyInternalAddress{
		EnvoyInternalAddress: &corev3.EnvoyInternalAddress{AddressNameSpecifier: &corev3.EnvoyInternalAddress_ServerListenerName{ServerListenerName: "l"}, EndpointId: "e"},
	}}}}})
	num := structpb.NewNumberValue
	nums := []float64{0, math.Copysign(0, -1), 1, -1, 1.5, 1e20, 1e21, 1e-6, 1e-7, 123456789012, 1 << 53, math.MaxFloat64, math.SmallestNonzeroFloat64, math.NaN(), math.Inf(1), math.Inf(-1)}
	list := &structpb.ListValue{}
	fields := map[string]*structpb.Value{}
	for i, f := range nums {
		list.Values = append(list.Values, num(f))
		fields["n"+strconv.Itoa(i)] = num(f)
	}
	inner := structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"l": structpb.NewListValue(list), "s": structpb.NewStringValue("<&>\u2028\"\\\n"), "b": structpb.NewBoolValue(false)}})
	fields["nested"] = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{
		structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{num(1), structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{num(2.5), structpb.NewStringValue("x")}})}}),
		inner, structpb.NewNullValue(), {},
	}})
	fields["inner"] = inner
	md := istioRequest()
	md.Attributes.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		"envoy.filters.http.jwt_authn": {Fields: fields}, "f": {Fields: map[string]*structpb.Value{"l": structpb.NewListValue(list)}}, "": {},
	}}
	md.Attributes.RouteMetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"r": {Fields: fields}}}
	md.Attributes.ContextExtensions = map[string]string{"tenant": "acme", "zone": "eu", "a": "", "\u00e9": "<>"}
	add("metadata-numbers", md)
	many := map[string]string{"content-type": "application/x-www-form-urlencoded"}
	var form []string
	for i := range 20 {
		many[fmt.Sprintf("x-h%02d", 19-i)] = strings.Repeat("v", i)
		form = append(form, fmt.Sprintf("k%02d=%d", 19-i, i), fmt.Sprintf("k%02d=again", i))
	}
	add("many-headers-and-keys", withHTTP(&authv3.AttributeContext_HttpRequest{Method: "GET", Path: "/a/b?" + strings.Join(form, "&") + "&e=&+sp+=a+b", Headers: many, Body: strings.Join(form, "&")}))
	add("not-utf8-decoded", withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/%ff/a%fe%e2%82?%fd=%fc&k=v%80%e2%82%ac", Headers: map[string]string{"content-type": "application/x-www-form-urlencoded"}, Body: "%ff%fe=%80x"}))
	add("multipart-not-utf8", withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/up", Headers: map[string]string{"content-type": "multipart/form-data; boundary=b"},
		RawBody: []byte("--b\r\nContent-Disposition: form-data; name=\"n\xff\"\r\n\r\nv\xfe\xe2\x82\r\n" +
			"--b\r\nContent-Disposition: form-data; name=\"j\"\r\nContent-Type: application/json\r\n\r\n{\"\xff\": [\"\\ud800\", 1.50, {\"b\":1,\"a\":null}]}\r\n--b--\r\n")}))
	add("json-deep", withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"content-type": "application/json"},
		Body: " [ {\"a\" : [ [ ], { } , -0.0 , 1E+2 , \"s p\\\" \\\\\" ] , \"a\" : true } , null , false ]\n"}))
	add("json-not-utf8-deep", withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"content-type": "application/json"},
		RawBody: []byte("{\"z\": [1.0e+2, {\"\xff\": \"\xfe\"}, []], \"a\": {\"b\": {}}, \"a\": -0}")}))
	add("json-escapes", withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"content-type": "application/json"},
		Body: `{"e":"\u00e9\u2028\/\b\f\n\r\t\"\\","k\u0041":1}`}))
	for name, req := range errorRequests() {
		add("error-"+name, req)
	}
	return reqs
}

// errorRequests are requests refused, each for another reason.
func errorRequests() map[string]*authv3.CheckRequest {
	js := map[string]string{"content-type": "application/json"}
	peer := func(p *authv3.AttributeContext_Peer) *authv3.CheckRequest {
		return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Source: p}}
	}
	return map[string]*authv3.CheckRequest{
		"bad-utf8-header":     withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"x": "\xff"}}),
		"bad-utf8-path":       withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/\xfe"}),
		"bad-utf8-body":       withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Body: "\xfe"}),
		"bad-path":            withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/a%zz"}),
		"semicolon":           withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/a?x=1;y=2"}),
		"query-escape":        withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/a?x=%g"}),
		"json-eof":            withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: js, Body: "{"}),
		"json-syntax":         withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: js, Body: "{nope}"}),
		"json-after":          withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: js, Body: "{} 1"}),
		"content-length":      withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"content-type": "application/json", "content-length": "ten"}, Body: "{}"}),
		"form":                withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"content-type": "application/x-www-form-urlencoded"}, Body: "a=1;b"}),
		"multipart-type":      withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"content-type": "multipart/form-data; boundary"}, Body: "x"}),
		"multipart-json-part": withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"content-type": "multipart/form-data; boundary=b"}, Body: "--b\r\nContent-Disposition: form-data; name=a\r\nContent-Type: application/json\r\n\r\n{\r\n--b--"}),
		"multipart-cut":       withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"content-type": "multipart/form-data; boundary=b"}, Body: "--b\r\nContent-Disposition: form-data; name=a\r\n\r\nx"}),
		"bad-utf8-principal":  peer(&authv3.AttributeContext_Peer{Principal: "\xfe"}),
		"bad-utf8-label":      peer(&authv3.AttributeContext_Peer{Labels: map[string]string{"app": "\xfe"}}),
		"bad-utf8-label-key":  peer(&authv3.AttributeContext_Peer{Labels: map[string]string{"\xfe": "x"}}),
		"bad-utf8-address":    peer(&authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: "\xfe"}}}}),
		"bad-utf8-pipe":       peer(&authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: "\xfe"}}}}),
		"bad-utf8-extension":  {Attributes: &authv3.AttributeContext{ContextExtensions: map[string]string{"k": "\xfe"}}},
		"bad-utf8-metadata": {Attributes: &authv3.AttributeContext{MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			"envoy.filters.http.jwt_authn": {Fields: map[string]*structpb.Value{"payload": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"sub": structpb.NewStringValue("\xfe")}})}},
		}}}},
		"bad-utf8-metadata-key": {Attributes: &authv3.AttributeContext{MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			"x": {Fields: map[string]*structpb.Value{"\xfe": structpb.NewNullValue()}},
		}}}},
		"bad-utf8-metadata-list": {Attributes: &authv3.AttributeContext{RouteMetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			"x": {Fields: map[string]*structpb.Value{"l": structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewStringValue("ok"), structpb.NewStringValue("\xfe")}})}},
		}}}},
		"bad-utf8-header-map": withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", HeaderMap: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: "\xfe"}}}}),
		"bad-utf8-tls":        {Attributes: &authv3.AttributeContext{TlsSession: &authv3.AttributeContext_TLSSession{Sni: "\xfe"}}},
	}
}

// writerOptions are the options each request is written with: the whole
// document, without the body, strings taken as checked, maps in any order,
// and each of keepTrees with and without the body and in any order.
func writerOptions() map[string]Options {
	opts := map[string]Options{"whole": {}, "skip-body": {SkipBody: true}, "utf8-checked": {UTF8Checked: true}, "any-order": {AnyOrder: true}}
	for name, paths := range keepTrees {
		opts["keep-"+name] = Options{Keep: prune.New(paths)}
		opts["keep-"+name+"-skip-body"] = Options{Keep: prune.New(paths), SkipBody: true}
		opts["keep-"+name+"-any-order"] = Options{Keep: prune.New(paths), AnyOrder: true}
	}
	return opts
}

// TestWriteEnvoyMatchesAppendEnvoy: for every request and options,
// WriteEnvoy writes the values of AppendEnvoy's JSON, or the same error.
func TestWriteEnvoyMatchesAppendEnvoy(t *testing.T) {
	reqs := writerRequests()
	opts := writerOptions()
	refused := 0
	for rn, req := range reqs {
		_, wholeErr := AppendEnvoy(nil, req, Options{})
		for on, o := range opts {
			if o.UTF8Checked && errors.Is(wholeErr, ErrInvalidUTF8) {
				continue // UTF8Checked takes the caller's word, wrongly here
			}
			js := assertSameDocument(t, rn+"/"+on, o.AnyOrder,
				func(dst []byte) ([]byte, error) { return AppendEnvoy(dst, req, o) },
				func(w Writer) error { return WriteEnvoy(w, req, o) })
			if js == nil {
				refused++
			}
		}
	}
	if refused == 0 || len(reqs) < 60 {
		t.Fatalf("%d requests, %d documents refused: the corpus lost its cases", len(reqs), refused)
	}
}

// httpRequests are the forward-auth requests: the HTTP part of every
// request of writerRequests, and a few that are refused.
func httpRequests() map[string]*HTTP {
	out := map[string]*HTTP{
		"bad-utf8-method": {Method: "\xff", Path: "/"},
		"bad-utf8-header": {Path: "/", Headers: map[string]string{"x": "\xff"}},
		"bad-path":        {Path: "/a%zz"},
		"fuzz-seed-1":     {Method: "GET", Path: "/folders/d1?x=1", Headers: map[string]string{"x-user": "alice", "content-type": "application/json"}, Body: `{"a":1}`},
		"fuzz-seed-2":     {Method: "POST", Path: "//a;b?c=%zz", Headers: map[string]string{"x": "\xff", "content-type": "application/x-www-form-urlencoded"}, Body: "a=b"},
	}
	for name, req := range writerRequests() {
		h := req.GetAttributes().GetRequest().GetHttp()
		if h == nil {
			continue
		}
		out[name] = &HTTP{ID: h.Id, Method: h.Method, Headers: h.Headers, Path: h.Path, Host: h.Host, Scheme: h.Scheme, Size: h.Size, Protocol: h.Protocol, Body: h.Body, RawBody: h.RawBody}
	}
	return out
}

// TestWriteHTTPMatchesAppendHTTP: for every forward-auth request, source
// and options, WriteHTTP writes the values of AppendHTTP's JSON, or the
// same error.
func TestWriteHTTPMatchesAppendHTTP(t *testing.T) {
	sources := []string{"", "10.0.0.1:5", "[::1]:8080", "host", "h:99999", "h:0", ":80", "\xff:1"}
	opts := writerOptions()
	for rn, h := range httpRequests() {
		for _, source := range sources {
			for on, o := range opts {
				what := rn + "/" + source + "/" + on
				if o.UTF8Checked {
					continue // AppendHTTP checks its strings whatever the options
				}
				assertSameDocument(t, what, o.AnyOrder,
					func(dst []byte) ([]byte, error) { return AppendHTTP(dst, h, source, o) },
					func(w Writer) error { return WriteHTTP(w, h, source, o) })
			}
		}
	}
}

// TestBuilderNumbers: the numbers the builder writes that no request of
// the corpus holds (uint64 above int64's range, floats) are written as
// the code before the Writer wrote them.
func TestBuilderNumbers(t *testing.T) {
	write := func(f func(b *builder)) string {
		var w jsonWriter
		if err := build(&w, true, func(b *builder) error { f(b); return nil }); err != nil {
			t.Fatal(err)
		}
		var g goWriter
		if err := build(&g, true, func(b *builder) error { f(b); return nil }); err != nil {
			t.Fatal(err)
		}
		got, err := g.value()
		if err != nil {
			t.Fatal(err)
		}
		want, err := decodeNumbers(w.buf)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: values %#v, JSON's %#v (%v)", w.buf, got, want, err)
		}
		return string(w.buf)
	}
	for _, v := range []uint64{0, 1, math.MaxInt64, math.MaxInt64 + 1, math.MaxUint64} {
		if got, want := write(func(b *builder) { b.uint(v) }), strconv.FormatUint(v, 10); got != want {
			t.Errorf("uint %d: %s, want %s", v, got, want)
		}
	}
	for _, f := range []float64{0, 1.5, 0.1, 1e-7, 3.4e38, -2.5e-3, 16777217, math.NaN(), math.Inf(1), math.Inf(-1)} {
		want := strconv.FormatFloat(f, 'f', -1, 32)
		if nonFinite(f) {
			want = map[bool]string{true: `"Infinity"`, false: `"-Infinity"`}[f > 0]
			if math.IsNaN(f) {
				want = `"NaN"`
			}
		}
		if got := write(func(b *builder) { b.float32(f) }); got != want {
			t.Errorf("float32 %v: %s, want %s", f, got, want)
		}
	}
	if got := write(func(b *builder) { b.base64([]byte{0, 1, 2, 0xfb, 0xff}) }); got != `"AAEC+/8="` {
		t.Errorf("base64: %s", got)
	}
	if got := write(func(b *builder) { b.text("a\xffb\xe2\x82") }); got != `"a\ufffdb\ufffd\ufffd"` {
		t.Errorf("text: %s", got)
	}
}

// TestJSONWriter: the JSON Writer writes commas and colons where JSON
// has them, whatever the nesting.
func TestJSONWriter(t *testing.T) {
	var w jsonWriter
	w.BeginObject()
	w.String("a")
	w.BeginArray()
	w.End()
	w.String("b")
	w.BeginArray()
	w.Int(1)
	w.BeginObject()
	w.End()
	w.BeginArray()
	w.Null()
	w.End()
	w.Number("2.5")
	w.JSON([]byte(`{"x":[1,2]}`))
	w.End()
	w.String("c")
	w.BeginObject()
	w.String("d")
	w.Bool(true)
	w.String("e")
	w.String("<\xff>")
	w.End()
	w.End()
	const want = `{"a":[],"b":[1,{},[null],2.5,{"x":[1,2]}],"c":{"d":true,"e":"\u003c\ufffd\u003e"}}`
	if string(w.buf) != want {
		t.Fatalf("got  %s\nwant %s", w.buf, want)
	}
}

// FuzzWriteEnvoy: for any request, with any of the options, WriteEnvoy
// writes the values of AppendEnvoy's JSON, or the same error.
func FuzzWriteEnvoy(f *testing.F) {
	f.Add("/folders/d1?x=1", "GET", "application/json", "content-length", "7", `{"a":1}`, "alice", int64(3), int32(0), []byte(nil), 1.5, "k", uint8(0))
	f.Add("/", "POST", "application/x-www-form-urlencoded", "x", "", "a=b&c", "", int64(-1), int32(999), []byte(nil), math.Inf(1), "", uint8(1))
	f.Add("/", "POST", "application/json", "x-envoy-auth-partial-body", "true", "", "", int64(0), int32(0), []byte("{\"a\":\"\xff\"}"), 1e21, "sub", uint8(2))
	f.Add("/up", "POST", "multipart/form-data; boundary=b", "content-length", "-1", multipartBody, "", int64(0), int32(0), []byte(nil), math.Copysign(0, -1), "\xff", uint8(3))
	f.Add("/%2e?a=%ff", "PUT", "application/json; charset=utf-8", "x", "", ` [1, "\ud800", {"a":{"a":2e5}}]`, "p", int64(0), int32(0), []byte(nil), 1e-7, "n", uint8(4))
	f.Add("/%ff/%e2?%fe=1", "POST", "application/x-www-form-urlencoded", "content-length", "3", "%ff=%fe", "", int64(0), int32(0), []byte(nil), 0.0, "", uint8(5))
	f.Add("/q?b=1&a=2&a=3", "POST", "application/json", "x-b", "1", `{"z":1,"a":{"y":2,"b":3}}`, "", int64(0), int32(0), []byte(nil), 2.5, "m", uint8(0x80))
	trees := []*prune.Tree{nil}
	for _, paths := range keepTrees {
		trees = append(trees, prune.New(paths))
	}
	f.Fuzz(func(t *testing.T, path, method, ct, hk, hv, body, principal string, secs int64, nanos int32, rawBody []byte, num float64, mdKey string, opt uint8) {
		req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			Source: &authv3.AttributeContext_Peer{Principal: principal},
			Request: &authv3.AttributeContext_Request{
				Time: &timestamppb.Timestamp{Seconds: secs, Nanos: nanos},
				Http: &authv3.AttributeContext_HttpRequest{Path: path, Method: method, Headers: map[string]string{"content-type": ct, hk: hv}, Body: body, RawBody: rawBody},
			},
			MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.filters.http.jwt_authn": {Fields: map[string]*structpb.Value{
				mdKey: structpb.NewNumberValue(num),
				"l":   structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewStringValue(hv), structpb.NewNumberValue(-num)}}),
			}}}},
		}}
		o := Options{SkipBody: opt&1 != 0, Keep: trees[int(opt>>1&0x3f)%len(trees)], AnyOrder: opt&0x80 != 0}
		assertSameDocument(t, "envoy", o.AnyOrder,
			func(dst []byte) ([]byte, error) { return AppendEnvoy(dst, req, o) },
			func(w Writer) error { return WriteEnvoy(w, req, o) })
		h := &HTTP{Method: method, Path: path, Headers: map[string]string{"content-type": ct, hk: hv}, Body: body, RawBody: rawBody}
		assertSameDocument(t, "http", o.AnyOrder,
			func(dst []byte) ([]byte, error) { return AppendHTTP(dst, h, principal, o) },
			func(w Writer) error { return WriteHTTP(w, h, principal, o) })
	})
}

// countWriter is a Writer that only counts what it is given, so that
// BenchmarkWriteEnvoy measures the builder alone.
type countWriter struct{ values, bytes int }

func (w *countWriter) Null()           { w.values++ }
func (w *countWriter) Bool(bool)       { w.values++ }
func (w *countWriter) Int(int64)       { w.values++ }
func (w *countWriter) Number(s string) { w.values++; w.bytes += len(s) }
func (w *countWriter) String(s string) { w.values++; w.bytes += len(s) }
func (w *countWriter) BeginArray()     {}
func (w *countWriter) BeginObject()    {}
func (w *countWriter) End()            { w.values++ }
func (w *countWriter) JSON(b []byte)   { w.values++; w.bytes += len(b) }

// BenchmarkWriteEnvoy: the builder on a Writer that does nothing but
// count, for the requests of BenchmarkAppendEnvoy and
// BenchmarkAppendEnvoyJWT.
func BenchmarkWriteEnvoy(b *testing.B) {
	istio := istioRequest()
	istio.Attributes.MetadataContext = nil
	istio.Attributes.TlsSession = nil
	for _, bc := range []struct {
		name string
		req  *authv3.CheckRequest
		keep *prune.Tree
	}{
		{"istio", istio, nil},
		{"jwt-whole", jwtRequest(), nil},
		{"jwt-keep", jwtRequest(), prune.New(keepTrees["default-policy"])},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var w countWriter
			for b.Loop() {
				if err := WriteEnvoy(&w, bc.req, Options{Keep: bc.keep}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
