package bundles

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/bundle"
	opaconfig "github.com/nexuspdp/nexus/opacompat/config"
)

func TestParseConfig(t *testing.T) {
	svcs, err := opaconfig.ParseServices(json.RawMessage(`{"acme":{"url":"https://bundles.example.com/v1"},"other":{"url":"https://other.example.com"}}`))
	if err != nil {
		t.Fatal(err)
	}
	_, pub := rsaKey(t)
	keys := keysJSON(t, "k1", pub)

	t.Run("defaults as OPA", func(t *testing.T) {
		srcs, err := ParseConfig(json.RawMessage(`{"authz":{"service":"acme"}}`), nil, svcs)
		if err != nil {
			t.Fatal(err)
		}
		s := srcs[0]
		if s.Name != "authz" || s.Service.Name != "acme" || s.Resource != "bundles/authz" || s.MinDelay != DefaultMinDelay || s.MaxDelay != DefaultMaxDelay ||
			s.LongPollTimeout != 0 || s.Persist || s.SizeLimit != bundle.MaxBytes || s.Trigger != TriggerPeriodic || s.Signed() {
			t.Fatalf("%+v", s)
		}
	})
	t.Run("every setting", func(t *testing.T) {
		srcs, err := ParseConfig(json.RawMessage(`{"authz":{"service":"acme","resource":"envoy/authz.tar.gz","persist":true,"size_limit_bytes":1000,"trigger":"manual",
			"polling":{"min_delay_seconds":5,"max_delay_seconds":10,"long_polling_timeout_seconds":30,"superseded_etag_ttl_seconds":60},
			"signing":{"keyid":"k1","scope":"write","exclude_files":["README.md"]}}}`), json.RawMessage(keys), svcs)
		if err != nil {
			t.Fatal(err)
		}
		s := srcs[0]
		if s.Resource != "envoy/authz.tar.gz" || !s.Persist || s.SizeLimit != 1000 || s.Trigger != TriggerManual || s.MinDelay != 5*time.Second ||
			s.MaxDelay != 10*time.Second || s.LongPollTimeout != 30*time.Second || s.SupersededETagTTL != time.Minute || !s.Signed() || s.verify.KeyID != "k1" || s.verify.Scope != "write" ||
			len(s.verify.Exclude) != 1 {
			t.Fatalf("%+v %+v", s, s.verify)
		}
	})
	for _, tc := range []struct {
		name, bundles, keys, want string
		unsupported               bool
	}{
		{name: "two bundles", bundles: `{"a":{"service":"acme"},"b":{"service":"acme"}}`, want: "2 bundles are configured (a, b)", unsupported: true},
		{name: "unknown setting", bundles: `{"a":{"service":"acme","prefix":"x"}}`, want: "bundles.a.prefix: unknown setting"},
		{name: "superseded etags negative", bundles: `{"a":{"service":"acme","polling":{"superseded_etag_ttl_seconds":-5}}}`, want: "bundles.a.polling.superseded_etag_ttl_seconds"},
		{name: "unsigned deltas", bundles: `{"a":{"service":"acme","signing":{"keyid":"k1","allow_unsigned_delta_bundles":true}}}`, keys: keys, want: "allow_unsigned_delta_bundles", unsupported: true},
		{name: "no such service", bundles: `{"a":{"service":"nope"}}`, want: `no service named "nope"`},
		{name: "service not named", bundles: `{"a":{}}`, want: "name a service"},
		{name: "trigger", bundles: `{"a":{"service":"acme","trigger":"sometimes"}}`, want: "bundles.a.trigger"},
		{name: "min without max", bundles: `{"a":{"service":"acme","polling":{"min_delay_seconds":5}}}`, want: "needs max_delay_seconds"},
		{name: "max below min", bundles: `{"a":{"service":"acme","polling":{"min_delay_seconds":5,"max_delay_seconds":1}}}`, want: "min_delay_seconds (5) <= max_delay_seconds (1)"},
		{name: "long poll zero", bundles: `{"a":{"service":"acme","polling":{"long_polling_timeout_seconds":0}}}`, want: "want at least 1"},
		{name: "size limit", bundles: `{"a":{"service":"acme","size_limit_bytes":-1}}`, want: "size_limit_bytes"},
		{name: "size limit above nexus'", bundles: `{"a":{"service":"acme","size_limit_bytes":1073741824}}`, want: "size_limit_bytes", unsupported: true},
		{name: "signing without keys", bundles: `{"a":{"service":"acme","signing":{}}}`, want: "no verification keys configured"},
		{name: "signing with an unknown key", bundles: `{"a":{"service":"acme","signing":{"keyid":"k9"}}}`, keys: keys, want: "key id k9 not found"},
		{name: "key algorithm", bundles: `{}`, keys: `{"k":{"algorithm":"none","key":"x"}}`, want: "keys.k.algorithm"},
		{name: "key not PEM", bundles: `{}`, keys: `{"k":{"algorithm":"ES256","key":"x"}}`, want: "keys.k.key"},
		{name: "private key", bundles: `{}`, keys: `{"k":{"algorithm":"HS256","key":"x","private_key":"y"}}`, want: "keys.k.private_key", unsupported: true},
		{name: "bad name", bundles: `{"../x":{"service":"acme"}}`, want: "path separator"},
		{name: "not an object", bundles: `[]`, want: "want an object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig(json.RawMessage(tc.bundles), json.RawMessage(tc.keys), svcs)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want one containing %q", err, tc.want)
			}
			if errors.Is(err, opaconfig.ErrUnsupported) != tc.unsupported {
				t.Fatalf("error %v: unsupported %v, want %v", err, !tc.unsupported, tc.unsupported)
			}
		})
	}
}
