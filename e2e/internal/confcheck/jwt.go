package confcheck

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	jwtauthnv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
)

// JWTProvider is a jwt_authn provider with an inline key set
// (local_jwks.inline_string), able to verify tokens as Envoy would: the
// signature (ES256 or RS256) against a key of the set, the issuer, the
// audience and the expiry.
type JWTProvider struct {
	Name      string
	Issuer    string
	Audiences []string
	keys      map[string]crypto.PublicKey // by kid ("" for a key without one)
}

// JWTProviders returns the providers of every jwt_authn filter of b. A
// provider whose keys are not inline is an error: it cannot be checked
// offline.
func JWTProviders(b *bootstrapv3.Bootstrap) ([]JWTProvider, error) {
	var out []JWTProvider
	for _, m := range EnvoyAnys(b) {
		j, ok := m.(*jwtauthnv3.JwtAuthentication)
		if !ok {
			continue
		}
		for name, p := range j.GetProviders() {
			inline := p.GetLocalJwks().GetInlineString()
			if inline == "" {
				return nil, fmt.Errorf("%w: jwt_authn provider %q has no inline key set", ErrReference, name)
			}
			keys, err := parseJWKS([]byte(inline))
			if err != nil {
				return nil, fmt.Errorf("%w: jwt_authn provider %q: %w", ErrInvalid, name, err)
			}
			out = append(out, JWTProvider{Name: name, Issuer: p.GetIssuer(), Audiences: p.GetAudiences(), keys: keys})
		}
	}
	return out, nil
}

func b64(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }

func parseJWKS(data []byte) (map[string]crypto.PublicKey, error) {
	var set struct {
		Keys []struct {
			Kty, Kid, Crv, X, Y, N, E string
		} `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("JWKS: %w", err)
	}
	keys := map[string]crypto.PublicKey{}
	for _, k := range set.Keys {
		switch k.Kty {
		case "EC":
			if k.Crv != "P-256" {
				return nil, fmt.Errorf("JWKS: curve %q", k.Crv)
			}
			x, err1 := b64(k.X)
			y, err2 := b64(k.Y)
			if err := errors.Join(err1, err2); err != nil {
				return nil, fmt.Errorf("JWKS: %w", err)
			}
			if len(x) != 32 || len(y) != 32 {
				return nil, errors.New("JWKS: P-256 coordinates are 32 bytes")
			}
			pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
			if err != nil {
				return nil, fmt.Errorf("JWKS: %w", err)
			}
			keys[k.Kid] = pub
		case "RSA":
			n, err1 := b64(k.N)
			e, err2 := b64(k.E)
			if err := errors.Join(err1, err2); err != nil {
				return nil, fmt.Errorf("JWKS: %w", err)
			}
			keys[k.Kid] = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		default:
			return nil, fmt.Errorf("JWKS: key type %q", k.Kty)
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("JWKS: no keys")
	}
	return keys, nil
}

// Verify checks a compact JWT as the provider would at time now and
// returns its claims.
func (p JWTProvider) Verify(token string, now time.Time) (map[string]any, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, errors.New("jwt: not three parts")
	}
	hb, err := b64(parts[0])
	if err != nil {
		return nil, fmt.Errorf("jwt header: %w", err)
	}
	var hdr struct{ Alg, Kid string }
	if err := json.Unmarshal(hb, &hdr); err != nil {
		return nil, fmt.Errorf("jwt header: %w", err)
	}
	key, ok := p.keys[hdr.Kid]
	if !ok {
		return nil, fmt.Errorf("jwt: no key %q", hdr.Kid)
	}
	sig, err := b64(parts[2])
	if err != nil {
		return nil, fmt.Errorf("jwt signature: %w", err)
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	switch k := key.(type) {
	case *ecdsa.PublicKey:
		if hdr.Alg != "ES256" || len(sig) != 64 || !ecdsa.Verify(k, sum[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
			return nil, errors.New("jwt: bad ES256 signature")
		}
	case *rsa.PublicKey:
		if hdr.Alg != "RS256" || rsa.VerifyPKCS1v15(k, crypto.SHA256, sum[:], sig) != nil {
			return nil, errors.New("jwt: bad RS256 signature")
		}
	}
	pb, err := b64(parts[1])
	if err != nil {
		return nil, fmt.Errorf("jwt payload: %w", err)
	}
	var claims map[string]any
	if err := json.Unmarshal(pb, &claims); err != nil {
		return nil, fmt.Errorf("jwt payload: %w", err)
	}
	if p.Issuer != "" && claims["iss"] != p.Issuer {
		return nil, fmt.Errorf("jwt: issuer %v, want %s", claims["iss"], p.Issuer)
	}
	if len(p.Audiences) > 0 {
		var auds []string
		switch a := claims["aud"].(type) {
		case string:
			auds = []string{a}
		case []any:
			for _, v := range a {
				if s, ok := v.(string); ok {
					auds = append(auds, s)
				}
			}
		}
		if !slices.ContainsFunc(auds, func(a string) bool { return slices.Contains(p.Audiences, a) }) {
			return nil, fmt.Errorf("jwt: audience %v, want one of %v", claims["aud"], p.Audiences)
		}
	}
	if exp, ok := claims["exp"].(float64); ok && now.Unix() >= int64(exp) {
		return nil, errors.New("jwt: expired")
	}
	return claims, nil
}
