package bundles

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	opabundle "github.com/open-policy-agent/opa/v1/bundle"
	opakeys "github.com/open-policy-agent/opa/v1/keys"

	"github.com/nexuspdp/nexus/bundle"
	opaconfig "github.com/nexuspdp/nexus/opacompat/config"
)

// OPA's defaults for a bundle's polling.
const (
	DefaultMinDelay = 60 * time.Second
	DefaultMaxDelay = 120 * time.Second
)

// Trigger modes of a bundle (OPA's "trigger").
const (
	TriggerPeriodic = "periodic"
	TriggerManual   = "manual"
)

// Source is one entry of the bundles section: where a bundle comes from
// and how it is polled and checked.
type Source struct {
	// Name is the bundle's name (its key in the bundles section).
	Name string
	// Service is the bundle server.
	Service *opaconfig.Service
	// Resource is the bundle's path on the service (default
	// bundles/<name>).
	Resource string
	// MinDelay and MaxDelay bound the wait between polls; after an error
	// the back-off grows up to MaxDelay. The polling settings are whole
	// seconds.
	MinDelay, MaxDelay time.Duration
	// LongPollTimeout, when not zero, asks the server to hold each request
	// up to this long until a new revision exists.
	LongPollTimeout time.Duration
	// SupersededETagTTL, when not zero, keeps sending the ETags of
	// replaced bundles this long, so that a server replica still holding
	// an older bundle answers 304 rather than sending it back.
	SupersededETagTTL time.Duration
	// Persist keeps the last good bundle on disk and loads it at start.
	Persist bool
	// SizeLimit bounds the downloaded archive and the sum of its unpacked
	// files, in bytes.
	SizeLimit int64
	// Trigger is TriggerPeriodic (poll on a timer) or TriggerManual (only
	// when Syncer.Trigger is called).
	Trigger string
	// verify is OPA's verification configuration; nil when the bundle is
	// not signed.
	verify *opabundle.VerificationConfig
}

// Signed reports whether the bundle's signature is verified.
func (s *Source) Signed() bool { return s.verify != nil }

var (
	sourceKeys  = []string{"service", "resource", "polling", "persist", "signing", "size_limit_bytes", "trigger"}
	pollingKeys = []string{"min_delay_seconds", "max_delay_seconds", "long_polling_timeout_seconds", "superseded_etag_ttl_seconds"}
	signingKeys = []string{"keyid", "scope", "exclude_files"}
	signingNot  = []string{"allow_unsigned_delta_bundles"}
	keyKeys     = []string{"algorithm", "key", "scope"}
	keyNot      = []string{"private_key"}

	algorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA", "HS256", "HS384", "HS512"}
)

// ParseConfig reads OPA's bundles and keys sections (raw JSON; either may
// be empty) against the parsed services. Settings nexus does not
// implement are errors naming them (wrapping opaconfig.ErrUnsupported).
// nexus serves one policy, so at most one bundle may be configured.
func ParseConfig(bundles, keys json.RawMessage, services map[string]*opaconfig.Service) ([]*Source, error) {
	pubKeys, err := parseKeys(keys)
	if err != nil {
		return nil, err
	}
	top, err := opaconfig.Entries("bundles", bundles)
	if err != nil {
		return nil, err
	}
	names := slices.Sorted(maps.Keys(top))
	if len(names) > 1 {
		return nil, fmt.Errorf("bundles: %d bundles are configured (%s); nexus serves one policy, so configure one bundle holding all of it: %w",
			len(names), strings.Join(names, ", "), opaconfig.ErrUnsupported)
	}
	var out []*Source
	for _, name := range names {
		s, err := parseSource(name, top[name], pubKeys, services)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func parseSource(name string, raw json.RawMessage, pubKeys map[string]*opakeys.Config, services map[string]*opaconfig.Service) (*Source, error) {
	where := "bundles." + name
	if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return nil, fmt.Errorf("%s: a bundle name must not be empty or hold a path separator", where)
	}
	m, err := opaconfig.Object(where, raw, sourceKeys)
	if err != nil {
		return nil, err
	}
	s := &Source{Name: name, MinDelay: DefaultMinDelay, MaxDelay: DefaultMaxDelay, SizeLimit: bundle.MaxBytes, Trigger: TriggerPeriodic}
	var svc string
	if err := opaconfig.Decode(where, m, "service", &svc); err != nil {
		return nil, err
	}
	if s.Service, err = opaconfig.Lookup(services, where+".service", svc); err != nil {
		return nil, err
	}
	if err := opaconfig.Decode(where, m, "resource", &s.Resource); err != nil {
		return nil, err
	}
	if s.Resource == "" {
		s.Resource = path.Join("bundles", name)
	}
	if err := opaconfig.Decode(where, m, "persist", &s.Persist); err != nil {
		return nil, err
	}
	if err := opaconfig.Decode(where, m, "trigger", &s.Trigger); err != nil {
		return nil, err
	}
	if s.Trigger != TriggerPeriodic && s.Trigger != TriggerManual {
		return nil, fmt.Errorf("%s.trigger: %q: want %q or %q", where, s.Trigger, TriggerPeriodic, TriggerManual)
	}
	var limit *int64
	if err := opaconfig.Decode(where, m, "size_limit_bytes", &limit); err != nil {
		return nil, err
	}
	if limit != nil {
		if *limit <= 0 {
			return nil, fmt.Errorf("%s.size_limit_bytes: %d: want a positive number", where, *limit)
		}
		if *limit > bundle.MaxBytes {
			return nil, fmt.Errorf("%s.size_limit_bytes: %d: nexus reads bundles of at most %d bytes: %w", where, *limit, bundle.MaxBytes, opaconfig.ErrUnsupported)
		}
		s.SizeLimit = *limit
	}
	if err := parsePolling(where+".polling", m["polling"], s); err != nil {
		return nil, err
	}
	if raw, ok := m["signing"]; ok && string(raw) != "null" {
		if s.verify, err = parseSigning(where+".signing", raw, pubKeys); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func parsePolling(where string, raw json.RawMessage, s *Source) error {
	m, err := opaconfig.Object(where, raw, pollingKeys)
	if err != nil {
		return err
	}
	var minS, maxS, longS, ttlS *int64
	if err := opaconfig.DecodeFields(where, m, map[string]any{"min_delay_seconds": &minS, "max_delay_seconds": &maxS, "long_polling_timeout_seconds": &longS, "superseded_etag_ttl_seconds": &ttlS}); err != nil {
		return err
	}
	switch {
	case minS != nil && maxS == nil:
		return fmt.Errorf("%s: min_delay_seconds needs max_delay_seconds", where)
	case minS == nil && maxS != nil:
		return fmt.Errorf("%s: max_delay_seconds needs min_delay_seconds", where)
	case minS != nil:
		if *minS < 0 || *maxS < *minS {
			return fmt.Errorf("%s: want 0 <= min_delay_seconds (%d) <= max_delay_seconds (%d)", where, *minS, *maxS)
		}
		s.MinDelay, s.MaxDelay = time.Duration(*minS)*time.Second, time.Duration(*maxS)*time.Second
	}
	if longS != nil {
		if *longS < 1 {
			return fmt.Errorf("%s.long_polling_timeout_seconds: %d: want at least 1", where, *longS)
		}
		s.LongPollTimeout = time.Duration(*longS) * time.Second
	}
	if ttlS != nil {
		if *ttlS < 0 {
			return fmt.Errorf("%s.superseded_etag_ttl_seconds: %d: must not be negative", where, *ttlS)
		}
		s.SupersededETagTTL = time.Duration(*ttlS) * time.Second
	}
	return nil
}

func parseSigning(where string, raw json.RawMessage, pubKeys map[string]*opakeys.Config) (*opabundle.VerificationConfig, error) {
	m, err := opaconfig.Object(where, raw, signingKeys, signingNot...)
	if err != nil {
		return nil, err
	}
	vc := &opabundle.VerificationConfig{}
	if err := opaconfig.DecodeFields(where, m, map[string]any{"keyid": &vc.KeyID, "scope": &vc.Scope, "exclude_files": &vc.Exclude}); err != nil {
		return nil, err
	}
	if err := vc.ValidateAndInjectDefaults(pubKeys); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return vc, nil
}

func parseKeys(raw json.RawMessage) (map[string]*opakeys.Config, error) {
	top, err := opaconfig.Entries("keys", raw)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*opakeys.Config, len(top))
	for id, r := range top {
		where := "keys." + id
		m, err := opaconfig.Object(where, r, keyKeys, keyNot...)
		if err != nil {
			return nil, err
		}
		kc := &opakeys.Config{}
		if err := opaconfig.DecodeFields(where, m, map[string]any{"algorithm": &kc.Algorithm, "key": &kc.Key, "scope": &kc.Scope}); err != nil {
			return nil, err
		}
		if kc.Algorithm == "" {
			kc.Algorithm = "RS256"
		}
		if !slices.Contains(algorithms, kc.Algorithm) {
			return nil, fmt.Errorf("%s.algorithm: %q: want one of %s", where, kc.Algorithm, strings.Join(algorithms, ", "))
		}
		if kc.Key == "" {
			return nil, fmt.Errorf("%s.key: missing", where)
		}
		if !strings.HasPrefix(kc.Algorithm, "HS") {
			if b, _ := pem.Decode([]byte(kc.Key)); b == nil {
				return nil, fmt.Errorf("%s.key: want a PEM public key or certificate for %s", where, kc.Algorithm)
			}
		}
		out[id] = kc
	}
	return out, nil
}
