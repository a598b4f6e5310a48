package builtins

import "context"

// EnvoyFields is Envoy for a request given by the fields of its input
// document that the policy reads, rather than by the document: method
// (attributes.request.http.method), path (parsed_path), headers
// (attributes.request.http.headers) and jwt, the JSON of the jwt_authn
// filter's metadata (nil when the request has none). It answers what
// Envoy answers for the document holding these fields.
func (d *DefaultPolicy) EnvoyFields(ctx context.Context, method string, path []string, headers map[string]string, jwt []byte, dst []byte) ([]byte, bool) {
	req := envoyRequest{method: method}
	if d.tenantHeader != "" {
		req.tenant = headers[d.tenantHeader]
	}
	if jwt != nil {
		// A verified JWT decides; the header counts only without one.
		if req.identify(string(jwt), "null") != nil {
			return dst, false
		}
	} else if v, ok := headers[d.subjectHeader]; ok && d.subjectHeader != "" {
		// identify on the header's JSON string: it names the subject v.
		req.claimed, req.subject, req.subjectOK = true, v, true
	}
	var out []byte
	err := d.read(ctx, func(r reader) (err error) {
		out, err = envoyResult(r, dst, d.table, &req, path)
		return err
	})
	if err != nil {
		return dst, false
	}
	return out, true
}
