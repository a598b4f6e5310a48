package extauthz_test

import (
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/url"
	"strconv"
	"strings"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/open-policy-agent/opa/v1/util"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// This file is the input document opa-envoy-plugin (v3 API) builds from a
// CheckRequest, the way its envoyauth package builds it: Go values from
// the message by protobuf reflection (a Struct as its AsMap), then
// version, parsed_path, parsed_query, parsed_body, truncated_body and
// source_principal. The plugin then turns the map into OPA's value with
// ast.InterfaceToValue, which the benchmarks time along with this. gRPC
// bodies are not parsed (the plugin parses them only when given
// descriptors). pdp/internal/input's reference is the same document in
// JSON form, which the encoders are held to; this one keeps the plugin's
// Go types, so that the OPA-converted benchmark pays what the plugin pays.

// pluginInput is the plugin's input map for req, or the error the plugin
// refuses the request with.
func pluginInput(req *authv3.CheckRequest) (map[string]any, error) {
	in := pluginMessage(req.ProtoReflect())
	h := req.GetAttributes().GetRequest().GetHttp()
	in["version"] = map[string]any{"ext_authz": "v3", "encoding": "protojson"}
	rawPath, rawQuery, _ := strings.Cut(h.GetPath(), "?")
	decoded, err := url.PathUnescape(rawPath)
	if err != nil {
		return nil, err
	}
	segments := strings.Split(strings.TrimLeft(decoded, "/"), "/")
	query, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, err
	}
	pq := make(map[string]any, len(query))
	for k, v := range query {
		pq[k] = v
	}
	in["parsed_path"] = segments
	in["parsed_query"] = pq
	body, truncated, err := pluginBody(h.GetHeaders(), h.GetBody(), h.GetRawBody())
	if err != nil {
		return nil, err
	}
	in["parsed_body"] = body
	in["truncated_body"] = truncated
	if p := req.GetAttributes().GetSource().GetPrincipal(); p != "" {
		in["source_principal"] = p
	}
	return in, nil
}

// pluginMessage is m's populated fields under their JSON names, with
// protoreflect's Go values; a Struct is its AsMap.
func pluginMessage(m protoreflect.Message) map[string]any {
	if s, ok := m.Interface().(interface{ AsMap() map[string]any }); ok {
		return s.AsMap()
	}
	out := make(map[string]any, m.Descriptor().Fields().Len())
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			mm := make(map[string]any, v.Map().Len())
			v.Map().Range(func(k protoreflect.MapKey, e protoreflect.Value) bool {
				mm[k.String()] = pluginValue(fd.MapValue().Kind(), e)
				return true
			})
			out[fd.JSONName()] = mm
		case fd.IsList():
			l := make([]any, v.List().Len())
			for i := range l {
				l[i] = pluginValue(fd.Kind(), v.List().Get(i))
			}
			out[fd.JSONName()] = l
		default:
			out[fd.JSONName()] = pluginValue(fd.Kind(), v)
		}
		return true
	})
	return out
}

func pluginValue(k protoreflect.Kind, v protoreflect.Value) any {
	if k == protoreflect.MessageKind || k == protoreflect.GroupKind {
		return pluginMessage(v.Message())
	}
	return v.Interface()
}

// pluginBody is parsed_body and truncated_body as the plugin computes
// them: JSON, URL-encoded forms and multipart forms, nothing when Envoy
// marks the body partial or content-length says it was cut.
func pluginBody(headers map[string]string, body string, raw []byte) (any, bool, error) {
	if headers["x-envoy-auth-partial-body"] == "true" {
		return nil, true, nil
	}
	ct, ok := headers["content-type"]
	if !ok {
		return nil, false, nil
	}
	var kind string
	switch {
	case strings.Contains(ct, "application/json"):
		kind = "json"
	case strings.Contains(ct, "application/grpc"):
		return nil, false, nil
	case strings.Contains(ct, "application/x-www-form-urlencoded"):
		kind = "form"
	case strings.Contains(ct, "multipart/form-data"):
		kind = "multipart"
	default:
		return nil, false, nil
	}
	if body == "" {
		body = string(raw)
	}
	if body == "" {
		return nil, false, nil
	}
	if cl, ok := headers["content-length"]; ok {
		n, err := strconv.ParseInt(cl, 10, 64)
		if err != nil {
			return nil, false, err
		}
		if n != -1 && n > int64(len(body)) {
			return nil, true, nil
		}
	}
	switch kind {
	case "json":
		var v any
		if err := util.UnmarshalJSON([]byte(body), &v); err != nil {
			return nil, false, err
		}
		return v, false, nil
	case "form":
		v, err := url.ParseQuery(body)
		if err != nil {
			return nil, false, err
		}
		return map[string][]string(v), false, nil
	}
	_, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return nil, false, err
	}
	boundary, ok := params["boundary"]
	if !ok {
		return nil, false, nil
	}
	values := map[string][]any{}
	r := multipart.NewReader(strings.NewReader(body), boundary)
	for {
		p, err := r.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, false, err
		}
		name := p.FormName()
		if name == "" {
			continue
		}
		b, err := io.ReadAll(p)
		if err != nil {
			return nil, false, err
		}
		if strings.Contains(p.Header.Get("Content-Type"), "application/json") {
			var v any
			if err := util.UnmarshalJSON(b, &v); err != nil {
				return nil, false, err
			}
			values[name] = append(values[name], v)
			continue
		}
		values[name] = append(values[name], string(b))
	}
	return values, false, nil
}
