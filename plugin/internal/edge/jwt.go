package edge

import (
	"encoding/base64"
	"encoding/json"
	"strings"
)

// claimFromPayload returns the top-level string claim of a JWT payload
// carried in a header: either the base64url payload alone (what jwt_authn's
// forward_payload_header carries) or a whole compact JWT. It does not verify
// anything: jwt_authn has, before this filter runs.
func claimFromPayload(header, claim string) (string, bool) {
	seg := header
	if i := strings.IndexByte(seg, '.'); i >= 0 {
		rest := seg[i+1:]
		j := strings.IndexByte(rest, '.')
		if j < 0 {
			return "", false
		}
		seg = rest[:j]
	}
	seg = strings.TrimRight(seg, "=")
	raw, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return "", false
	}
	var claims map[string]json.RawMessage
	if err := json.Unmarshal(raw, &claims); err != nil {
		return "", false
	}
	v, ok := claims[claim]
	if !ok {
		return "", false
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil || s == "" {
		return "", false
	}
	return s, true
}
