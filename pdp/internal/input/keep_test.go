package input

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/nexuspdp/nexus/pdp/internal/prune"
)

// keepTrees are selections a policy could make: the default policy's,
// deep and whole paths, keys that are absent, and nothing at all.
var keepTrees = map[string][][]string{
	"default-policy":   {{"attributes", "request", "http", "method"}, {"attributes", "request", "http", "headers", "x-user"}, {"attributes", "request", "http", "headers", "x-tenant"}, {"parsed_path"}, {"attributes", "metadataContext", "filterMetadata", "envoy.filters.http.jwt_authn"}},
	"jwt-claims":       {{"attributes", "metadataContext", "filterMetadata", "envoy.filters.http.jwt_authn", "payload", "sub"}, {"attributes", "metadataContext", "filterMetadata", "envoy.filters.http.jwt_authn", "payload", "tenant", "id"}, {"attributes", "metadataContext", "filterMetadata", "f", "l"}, {"source_principal"}},
	"rare":             {{"attributes", "metadataContext", "typedFilterMetadata"}, {"attributes", "request", "http", "headerMap"}, {"attributes", "destination", "address", "socketAddress", "namedPort"}, {"attributes", "tlsSession", "sni"}},
	"rare-deep":        {{"attributes", "routeMetadataContext", "typedFilterMetadata", "raw", "value"}, {"attributes", "metadataContext", "typedFilterMetadata", "t", "typeUrl"}, {"attributes", "metadataContext", "typedFilterMetadata", "gone"}, {"attributes", "destination", "address", "socketAddress", "protocol"}, {"attributes", "destination", "address", "socketAddress", "resolverName"}, {"attributes", "request", "time", "seconds"}},
	"whole-attributes": {{"attributes"}, {"parsed_query"}},
	"peers":            {{"attributes", "source", "principal"}, {"attributes", "destination", "address", "socketAddress", "portValue"}, {"attributes", "source", "labels", "app"}, {"attributes", "contextExtensions"}},
	"http-whole":       {{"attributes", "request", "http"}, {"attributes", "request", "time"}},
	"body":             {{"parsed_body"}, {"truncated_body"}, {"version"}, {"attributes", "request", "http", "body"}, {"attributes", "request", "http", "rawBody"}},
	"absent":           {{"attributes", "nope", "x"}, {"attributes", "request", "http", "headers", "not-sent"}, {"missing"}},
	"nothing":          {},
}

func keepRequests() map[string]*authv3.CheckRequest {
	plain := istioRequest()
	plain.Attributes.MetadataContext = nil
	plain.Attributes.TlsSession = nil
	bare := proto.Clone(plain).(*authv3.CheckRequest)
	bare.Attributes.Request.Http.Headers = nil
	bare.Attributes.Source = nil
	noHTTP := proto.Clone(plain).(*authv3.CheckRequest)
	noHTTP.Attributes.Request.Http = nil
	pipe := proto.Clone(plain).(*authv3.CheckRequest)
	pipe.Attributes.Source.Address = &corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: "/run/sock"}}}
	reqs := map[string]*authv3.CheckRequest{
		"empty": {}, "istio": istioRequest(), "plain": plain, "bare": bare, "no-http": noHTTP, "pipe": pipe,
		"jwt": jwtRequest(), "rare": rareRequest(),
	}
	for name, req := range bodyRequests() {
		reqs["body-"+name] = req
	}
	return reqs
}

// TestKeepEqualsPrunedWhole: a document written with Keep is byte for byte
// the whole document pruned by the same tree.
func TestKeepEqualsPrunedWhole(t *testing.T) {
	for rn, req := range keepRequests() {
		whole, err := AppendEnvoy(nil, req, Options{})
		if err != nil {
			t.Fatalf("%s: %v", rn, err)
		}
		for tn, paths := range keepTrees {
			tree := prune.New(paths)
			want, err := tree.Append(nil, whole)
			if err != nil {
				t.Fatalf("%s/%s: prune: %v", rn, tn, err)
			}
			got, err := AppendEnvoy([]byte("prefix"), req, Options{Keep: tree})
			if err != nil {
				t.Fatalf("%s/%s: %v", rn, tn, err)
			}
			if !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Fatalf("%s/%s:\n got %s\nwant prefix%s", rn, tn, got, want)
			}
			// Every string here is UTF-8: a request the wire decoder
			// checked gives the same bytes.
			if checked, err := AppendEnvoy([]byte("prefix"), req, Options{Keep: tree, UTF8Checked: true}); err != nil || !bytes.Equal(checked, got) {
				t.Fatalf("%s/%s, UTF-8 checked:\n got %s (%v)\nwant %s", rn, tn, checked, err, got)
			}
			wholeSkip, err := AppendEnvoy(nil, req, Options{SkipBody: true})
			if err != nil {
				t.Fatalf("%s: skip body: %v", rn, err)
			}
			if want, err = tree.Append(nil, wholeSkip); err != nil {
				t.Fatal(err)
			}
			if got, err = AppendEnvoy(nil, req, Options{Keep: tree, SkipBody: true}); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s/%s, body skipped:\n got %s (%v)\nwant %s", rn, tn, got, err, want)
			}
		}
	}
}

// TestKeepValidatesWhatItDrops: input the policy never reads is still
// rejected, as without Keep.
func TestKeepValidatesWhatItDrops(t *testing.T) {
	nothing := prune.New(nil)
	for _, tt := range []struct {
		name string
		req  *authv3.CheckRequest
		want error
	}{
		{"bad-utf8-header", withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"x": "\xff"}}), ErrInvalidUTF8},
		{"bad-path", withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/a%zz"}), ErrInvalidPath},
		{"bad-utf8-principal", &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Source: &authv3.AttributeContext_Peer{Principal: "\xfe"}}}, ErrInvalidUTF8},
		{"bad-utf8-label", &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Destination: &authv3.AttributeContext_Peer{Labels: map[string]string{"app": "\xfe"}}}}, ErrInvalidUTF8},
		{"bad-utf8-address", &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: "\xfe"}}}}}}, ErrInvalidUTF8},
		{"bad-utf8-extension", &authv3.CheckRequest{Attributes: &authv3.AttributeContext{ContextExtensions: map[string]string{"k": "\xfe"}}}, ErrInvalidUTF8},
		{"bad-utf8-metadata", &authv3.CheckRequest{Attributes: &authv3.AttributeContext{MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			"envoy.filters.http.jwt_authn": {Fields: map[string]*structpb.Value{"payload": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"sub": structpb.NewStringValue("\xfe")}})}},
		}}}}, ErrInvalidUTF8},
		{"bad-utf8-metadata-key", &authv3.CheckRequest{Attributes: &authv3.AttributeContext{MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			"x": {Fields: map[string]*structpb.Value{"\xfe": structpb.NewNullValue()}},
		}}}}, ErrInvalidUTF8},
		{"bad-utf8-header-map", withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", HeaderMap: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: "\xfe"}}}}), ErrInvalidUTF8},
		{"bad-utf8-pipe", &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: "\xfe"}}}}}}, ErrInvalidUTF8},
	} {
		_, whole := AppendEnvoy(nil, tt.req, Options{})
		_, kept := AppendEnvoy(nil, tt.req, Options{Keep: nothing})
		if whole == nil || kept == nil {
			t.Errorf("%s: whole document err = %v, kept nothing err = %v; want both to fail", tt.name, whole, kept)
			continue
		}
		if tt.want != nil && (!errors.Is(whole, tt.want) || !errors.Is(kept, tt.want)) {
			t.Errorf("%s: err = %v and %v, want %v", tt.name, whole, kept, tt.want)
		}
		// UTF8Checked takes the caller's word for UTF-8 (the wire decoder
		// refuses such requests before), and the other checks still hold.
		// Either way the document written is JSON.
		for _, keep := range []*prune.Tree{nil, nothing} {
			doc, err := AppendEnvoy(nil, tt.req, Options{Keep: keep, UTF8Checked: true})
			switch {
			case errors.Is(tt.want, ErrInvalidUTF8) && err == nil && !json.Valid(doc):
				t.Errorf("%s, UTF-8 checked: not JSON: %q", tt.name, doc)
			case errors.Is(tt.want, ErrInvalidUTF8) && err != nil && !errors.Is(err, ErrInvalidUTF8):
				t.Errorf("%s, UTF-8 checked: %v", tt.name, err)
			case !errors.Is(tt.want, ErrInvalidUTF8) && !errors.Is(err, tt.want):
				t.Errorf("%s, UTF-8 checked: err = %v, want %v", tt.name, err, tt.want)
			}
		}
	}
}

// TestKeepSkipsUnreadBody: a body the policy does not read (no
// parsed_body) is never parsed, so a malformed one is no error; one it
// reads is refused as in the whole document. A content-length that is not
// a number is still refused when the policy reads truncated_body.
func TestKeepSkipsUnreadBody(t *testing.T) {
	nothing := prune.New(nil)
	body := prune.New([][]string{{"parsed_body"}})
	truncated := prune.New([][]string{{"truncated_body"}})
	for _, tt := range []struct {
		name string
		req  *authv3.CheckRequest
	}{
		{"bad-json-body", withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"content-type": "application/json"}, Body: "{"})},
		{"bad-multipart", withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"content-type": "multipart/form-data; boundary=b"}, Body: "--b\r\nContent-Disposition: form-data; name=a\r\nContent-Type: application/json\r\n\r\n{\r\n--b--"})},
		{"bad-form", withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"content-type": "application/x-www-form-urlencoded"}, Body: "a=%zz"})},
	} {
		if _, err := AppendEnvoy(nil, tt.req, Options{}); !errors.Is(err, ErrInvalidBody) {
			t.Errorf("%s: whole document err = %v, want %v", tt.name, err, ErrInvalidBody)
		}
		if _, err := AppendEnvoy(nil, tt.req, Options{Keep: body}); !errors.Is(err, ErrInvalidBody) {
			t.Errorf("%s: parsed_body kept: err = %v, want %v", tt.name, err, ErrInvalidBody)
		}
		for name, keep := range map[string]*prune.Tree{"nothing": nothing, "truncated_body": truncated} {
			doc, err := AppendEnvoy(nil, tt.req, Options{Keep: keep})
			if err != nil {
				t.Errorf("%s: %s kept: err = %v, want none (the body is not read)", tt.name, name, err)
			}
			if name == "truncated_body" && string(doc) != `{"truncated_body":false}` {
				t.Errorf("%s: %s kept: %s", tt.name, name, doc)
			}
		}
	}
	badLength := withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"content-type": "application/json", "content-length": "x"}, Body: "{}"})
	if _, err := AppendEnvoy(nil, badLength, Options{Keep: truncated}); !errors.Is(err, ErrInvalidBody) {
		t.Errorf("bad content-length, truncated_body kept: err = %v, want %v", err, ErrInvalidBody)
	}
	if doc, err := AppendEnvoy(nil, badLength, Options{Keep: nothing}); err != nil || string(doc) != "{}" {
		t.Errorf("bad content-length, nothing kept: %s, %v; want {} and no error", doc, err)
	}
}

// FuzzKeep: for random requests the kept document equals the pruned whole
// one, and both succeed or fail together, but for a malformed body that
// the kept document does not read (not parsed, so no error).
func FuzzKeep(f *testing.F) {
	f.Add("/folders/d1?x=1", "GET", "x-user", "alice", `{"a":1}`, "application/json", "spiffe://a")
	f.Add("/", "POST", "x-tenant", "\xff", "a=b&c", "application/x-www-form-urlencoded", "")
	f.Fuzz(func(t *testing.T, path, method, hk, hv, body, ct, principal string) {
		req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			Source: &authv3.AttributeContext_Peer{Principal: principal},
			Request: &authv3.AttributeContext_Request{
				Http: &authv3.AttributeContext_HttpRequest{Path: path, Method: method, Headers: map[string]string{hk: hv, "content-type": ct}, Body: body},
			},
		}}
		whole, werr := AppendEnvoy(nil, req, Options{})
		for tn, paths := range keepTrees {
			tree := prune.New(paths)
			got, err := AppendEnvoy(nil, req, Options{Keep: tree})
			if err == nil && errors.Is(werr, ErrInvalidBody) {
				// A body the policy does not read is not parsed.
				if _, read := tree.Child("parsed_body"); read {
					t.Fatalf("%s: parsed_body kept, whole err = %v, with Keep none", tn, werr)
				}
				continue
			}
			if (err == nil) != (werr == nil) {
				t.Fatalf("%s: with Keep err = %v, whole err = %v", tn, err, werr)
			}
			if err != nil {
				continue
			}
			want, err := tree.Append(nil, whole)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s:\n got %s\nwant %s", tn, got, want)
			}
		}
	})
}

func BenchmarkAppendEnvoyKeep(b *testing.B) {
	req := istioRequest()
	req.Attributes.MetadataContext = nil
	req.Attributes.TlsSession = nil
	tree := prune.New(keepTrees["default-policy"])
	buf := make([]byte, 0, 4096)
	b.Run("keep", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var err error
			if buf, err = AppendEnvoy(buf[:0], req, Options{Keep: tree}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("whole-then-prune", func(b *testing.B) {
		b.ReportAllocs()
		out := make([]byte, 0, 4096)
		for b.Loop() {
			var err error
			if buf, err = AppendEnvoy(buf[:0], req, Options{}); err != nil {
				b.Fatal(err)
			}
			if out, err = tree.Append(out[:0], buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}
