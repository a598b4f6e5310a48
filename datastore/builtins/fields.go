package builtins

import (
	"context"
	"encoding/binary"

	"github.com/nexuspdp/nexus/internal/jsonw"
)

// EnvoyFields is Envoy for a request given by the fields of its input
// document that the policy reads, rather than by the document: method
// (attributes.request.http.method), path (parsed_path), headers
// (attributes.request.http.headers) and jwt, the JSON of the jwt_authn
// filter's metadata (nil when the request has none). Its answer is the
// result Envoy writes for the document holding these fields
// (Answer.AppendJSON writes it).
func (d *DefaultPolicy) EnvoyFields(ctx context.Context, method string, path []string, headers map[string]string, jwt []byte) (Answer, bool) {
	req := envoyRequest{method: method}
	if d.tenantHeader != "" {
		req.tenant = headers[d.tenantHeader]
	}
	if jwt != nil {
		// A verified JWT decides; the header counts only without one.
		if req.identify(string(jwt), "null") != nil {
			return Answer{}, false
		}
	} else if v, ok := headers[d.subjectHeader]; ok && d.subjectHeader != "" {
		// identify on the header's JSON string: it names the subject v.
		req.claimed, req.subject, req.subjectOK = true, v, true
	}
	var a Answer
	err := d.read(ctx, func(r reader) (err error) {
		a, err = envoyAnswer(r, d.table, &req, path)
		return err
	})
	if err != nil {
		return Answer{}, false
	}
	return a, true
}

// AuthzFields is Authz for an application check given by its fields
// rather than its input document: f holds the subject's type and id, the
// action, the resource's type, id and tenant ("" for an absent id or
// tenant). The resource has no attributes, or with tenantAttr the one
// attribute "tenant" whose value is f's tenant. Its answer is the result
// Authz writes for the document holding these fields.
func (d *DefaultPolicy) AuthzFields(ctx context.Context, f *[6]string, tenantAttr bool) (Answer, bool) {
	if !d.authz {
		return Answer{}, false
	}
	attrs := ""
	if tenantAttr && d.conditioned(f[3], f[2]) { // only conditions read attributes
		var b [64]byte
		attrs = string(append(jsonw.String(append(b[:0], `{"tenant":`...), f[5]), '}'))
	}
	var a Answer
	ok := true
	err := d.read(ctx, func(r reader) error {
		var err error
		a, ok, err = d.authzAnswer(r, f, attrs)
		return err
	})
	if err != nil || !ok {
		return Answer{}, false
	}
	return a, true
}

// conditioned reports whether a condition of the table applies to action
// on a resource of type typ.
func (d *DefaultPolicy) conditioned(typ, action string) bool {
	for _, c := range d.table.Conditions {
		if c.appliesTo(typ, action) {
			return true
		}
	}
	return false
}

// EnvoyKey appends what EnvoyFields reads of a request, unambiguously
// (each string after its length): two requests with the same key get the
// same answer from the same store. The headers it reads are the subject
// and tenant headers alone.
func (d *DefaultPolicy) EnvoyKey(dst []byte, method string, path []string, headers map[string]string, jwt []byte) []byte {
	dst = appendKeyString(dst, method)
	dst = binary.AppendUvarint(dst, uint64(len(path)))
	for _, seg := range path {
		dst = appendKeyString(dst, seg)
	}
	for _, h := range [2]string{d.subjectHeader, d.tenantHeader} {
		v, ok := headers[h]
		switch {
		case h == "" || !ok:
			dst = append(dst, 0)
		default:
			dst = appendKeyString(append(dst, 1), v)
		}
	}
	if jwt == nil {
		return append(dst, 0)
	}
	return appendKeyString(append(dst, 1), string(jwt))
}

// AuthzKey appends what AuthzFields reads of a check, unambiguously, as
// EnvoyKey does.
func AuthzKey(dst []byte, f *[6]string, tenantAttr bool) []byte {
	for _, s := range f {
		dst = appendKeyString(dst, s)
	}
	if tenantAttr {
		return append(dst, 1)
	}
	return append(dst, 0)
}

func appendKeyString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}
