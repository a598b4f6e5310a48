package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Config is an OPA configuration file as nexus reads it.
type Config struct {
	// Services are the services that bundles, decision_logs and status
	// name (see ParseServices).
	Services map[string]*Service
	// Labels identify this instance to the services (OPA's labels).
	Labels map[string]string
	// Envoy is the envoy_ext_authz_grpc plugin's settings; nil when the
	// file does not configure the plugin (OPA then runs no ext_authz
	// server).
	Envoy *EnvoyPlugin

	// Bundles, Bundle (OPA's deprecated single bundle), Keys, DecisionLogs
	// and Status are those sections as written (JSON), for the packages
	// that read them; nil when absent.
	Bundles, Bundle, Keys, DecisionLogs, Status json.RawMessage

	// PersistenceDirectory is OPA's persistence_directory; "" when absent.
	PersistenceDirectory string
	// Nexus is the top-level "nexus" section (JSON): nexus' own serve
	// settings, which OPA does not know; nil when absent.
	Nexus json.RawMessage

	// MissingEnv names the ${VAR} references whose variable is not set.
	// As OPA does, they are left in the file as written; a caller should
	// warn about them.
	MissingEnv []string
}

// EnvoyPlugin is plugins.envoy_ext_authz_grpc, with opa-envoy-plugin's
// defaults filled in.
type EnvoyPlugin struct {
	// Addr is the gRPC listener: host:port, or unix:///path for a Unix
	// socket. Default ":9191".
	Addr string
	// Entrypoint is the decision, in nexus' entrypoint form
	// ("envoy/authz/allow"), from path or the deprecated query. Default
	// "envoy/authz/allow".
	Entrypoint string
	// LogPath and LogQuery name the decision in decision log events as
	// opa-envoy-plugin logs it: LogPath is path exactly as configured
	// ("/envoy/authz/allow" keeps its slash, "envoy.authz.allow" its
	// dots), or "envoy/authz/allow" when neither path nor query is set;
	// LogQuery is the deprecated query as configured, and LogPath is then
	// "".
	LogPath, LogQuery string
	// DryRun answers allow whatever the policy decides.
	DryRun bool
	// EnableReflection registers gRPC reflection.
	EnableReflection bool
	// SkipRequestBodyParse leaves parsed_body out of the input.
	SkipRequestBodyParse bool
	// GRPCMaxRecvMsgSize and GRPCMaxSendMsgSize bound gRPC messages in
	// bytes. Defaults: 4 MiB and math.MaxInt32, as grpc-go's.
	GRPCMaxRecvMsgSize, GRPCMaxSendMsgSize int
	// EnablePerformanceMetrics exposes grpc_request_duration_seconds and
	// error_counter.
	EnablePerformanceMetrics bool
	// GRPCRequestDurationSecondsBuckets are the histogram's buckets.
	GRPCRequestDurationSecondsBuckets []float64
}

// Defaults of EnvoyPlugin, opa-envoy-plugin's.
const (
	DefaultEnvoyAddr       = ":9191"
	DefaultEnvoyEntrypoint = "envoy/authz/allow"
	DefaultGRPCMaxRecv     = 4 << 20
	DefaultGRPCMaxSend     = 1<<31 - 1
)

// DefaultDurationBuckets are opa-envoy-plugin's buckets of
// grpc_request_duration_seconds.
var DefaultDurationBuckets = []float64{1e-6, 5e-6, 1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 3e-3, 5e-3, 0.1, 1}

// PluginName is opa-envoy-plugin's plugin name.
const PluginName = "envoy_ext_authz_grpc"

// OPA's defaults for default_decision and default_authorization_decision.
const (
	opaDefaultDecision      = "/system/main"
	opaDefaultAuthzDecision = "/system/authz/allow"
)

// topLevel lists every top-level key of an OPA configuration, each with
// what nexus does with it.
var topLevel = map[string]string{
	"services":                       "read",
	"labels":                         "read",
	"plugins":                        "read",
	"bundles":                        "kept",
	"bundle":                         "kept",
	"keys":                           "kept",
	"decision_logs":                  "kept",
	"status":                         "kept",
	"default_decision":               "read",
	"default_authorization_decision": "read",
	"persistence_directory":          "read",
	"nd_builtin_cache":               "read",
	"server":                         "read",
	"storage":                        "read",
	"caching":                        "read",
	"distributed_tracing":            "read",
	// discovery downloads the configuration itself from a bundle server,
	// replacing this file: nexus reads its configuration from the file
	// alone, so a discovery section would be a configuration nexus never
	// applies.
	"discovery": "unsupported",
	// metrics_export pushes OPA's metrics over OpenTelemetry; nexus
	// serves its metrics for Prometheus to scrape on /metrics.
	"metrics_export": "unsupported",
	"nexus":          "read",
}

// IsOPAConfig reports whether raw (YAML or JSON) is an OPA configuration:
// a mapping with at least one of OPA's top-level keys, or a "nexus"
// section. A file of nexus' own serve settings (grpc_addr, data_dir, ...)
// has neither.
func IsOPAConfig(raw []byte) bool {
	var m map[string]any
	if err := yaml.Unmarshal(raw, &m); err != nil {
		return false
	}
	for k := range m {
		if _, ok := topLevel[k]; ok {
			return true
		}
	}
	return false
}

// Parse reads an OPA configuration file, YAML or JSON, as OPA does:
// ${VAR} is replaced by the environment variable VAR first (an unset
// variable is left as written and listed in MissingEnv). Every top-level
// key is read, kept for another package, or refused: an unknown key, or a
// setting nexus does not implement, is an error that names it.
func Parse(raw []byte) (*Config, error) { return Load(raw, Overrides{}) }

// Overrides are the settings opa run's --set and --set-file give.
type Overrides struct {
	// Set are "a.b.c=value" assignments, several separated by commas;
	// value is typed as OPA types it (true, false, null, integers).
	// ${VAR} is replaced in them as in the file.
	Set []string
	// SetFile are "a.b.c=path" assignments: the value is the file's
	// contents with surrounding white space removed.
	SetFile []string
}

// Load is Parse with overrides applied over the file, as opa run does
// with --set and --set-file. raw may be empty (no file).
func Load(raw []byte, o Overrides) (*Config, error) {
	var missing []string
	text := substEnv(string(raw), &missing)
	doc := map[string]any{}
	if strings.TrimSpace(text) != "" {
		var v any
		if err := yaml.Unmarshal([]byte(text), &v); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		switch m := jsonable(v).(type) {
		case map[string]any:
			doc = m
		case nil:
		default:
			return nil, fmt.Errorf("config: want a mapping of settings, got %T", m)
		}
	}
	for _, s := range o.Set {
		if err := applySet(doc, "--set", substEnv(s, &missing), nil); err != nil {
			return nil, err
		}
	}
	for _, s := range o.SetFile {
		if err := applySet(doc, "--set-file", s, readSetFile); err != nil {
			return nil, err
		}
	}
	js, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := parseJSON(js)
	if err != nil {
		return nil, err
	}
	c.MissingEnv = missing
	return c, nil
}

// envRef is OPA's ${...} reference: the shortest text between "${" and
// "}" on one line.
var envRef = regexp.MustCompile(`\$\{.*?\}`)

// substEnv replaces ${VAR} by VAR's value as OPA does: an unset variable
// is left as written (and its name appended to missing), a variable set
// to "" gives "", and "${}" is removed.
func substEnv(s string, missing *[]string) string {
	return envRef.ReplaceAllStringFunc(s, func(ref string) string {
		name := ref[2 : len(ref)-1]
		if name == "" {
			return ""
		}
		if v, ok := os.LookupEnv(name); ok {
			return v
		}
		if !slices.Contains(*missing, name) {
			*missing = append(*missing, name)
		}
		return ref
	})
}

// jsonable converts what YAML decodes into what JSON encodes: mapping
// keys become strings.
func jsonable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = jsonable(e)
		}
		return x
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[fmt.Sprint(k)] = jsonable(e)
		}
		return m
	case []any:
		for i, e := range x {
			x[i] = jsonable(e)
		}
		return x
	default:
		return x
	}
}

func readSetFile(path string) (any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return strings.TrimSpace(string(b)), nil
}

// applySet applies one --set (or --set-file, when file reads the value)
// argument to doc: comma-separated key=value pairs, keys dotted; "\," and
// "\." escape a comma and a dot. Lists ("a[0]", "{x,y}") are not
// supported.
func applySet(doc map[string]any, flag, arg string, file func(string) (any, error)) error {
	for _, pair := range splitEscaped(arg, ',') {
		key, val, ok := strings.Cut(pair, "=")
		if !ok || key == "" {
			return fmt.Errorf("%s %q: want key=value", flag, arg)
		}
		if strings.ContainsAny(key, "[]") || strings.HasPrefix(val, "{") {
			return fmt.Errorf("%s %q: lists: %w", flag, arg, ErrUnsupported)
		}
		var v any
		if file != nil {
			var err error
			if v, err = file(unescape(val)); err != nil {
				return fmt.Errorf("%s %s: %w", flag, key, err)
			}
		} else {
			v = typed(unescape(val))
		}
		path := splitEscaped(key, '.')
		m := doc
		for i, k := range path {
			k = unescape(k)
			if k == "" {
				return fmt.Errorf("%s %q: empty key", flag, key)
			}
			if i == len(path)-1 {
				m[k] = v
				break
			}
			next, ok := m[k].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[k] = next
			}
			m = next
		}
	}
	return nil
}

// splitEscaped splits s at sep where sep is not escaped with a backslash.
func splitEscaped(s string, sep byte) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case sep:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

func unescape(s string) string {
	return strings.NewReplacer(`\,`, ",", `\.`, ".", `\\`, `\`).Replace(s)
}

// typed is an override's value as OPA types it: true, false and null
// (any case), integers that do not start with 0 (and 0 itself), and
// otherwise the string.
func typed(s string) any {
	switch {
	case strings.EqualFold(s, "true"):
		return true
	case strings.EqualFold(s, "false"):
		return false
	case strings.EqualFold(s, "null"):
		return nil
	case s == "0":
		return 0
	}
	if s != "" && s[0] != '0' {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n
		}
	}
	return s
}

func parseJSON(js []byte) (*Config, error) {
	known := make([]string, 0, len(topLevel))
	var unsupported []string
	for k, what := range topLevel {
		if what == "unsupported" {
			unsupported = append(unsupported, k)
		} else {
			known = append(known, k)
		}
	}
	sort.Strings(known)
	m, err := Object("", js, known, unsupported...)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c := &Config{
		Bundles: raw(m["bundles"]), Bundle: raw(m["bundle"]), Keys: raw(m["keys"]),
		DecisionLogs: raw(m["decision_logs"]), Status: raw(m["status"]), Nexus: raw(m["nexus"]),
	}
	if c.Services, err = ParseServices(m["services"]); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	steps := []func(*Config, map[string]json.RawMessage) error{
		parseLabels, parsePlugins, parseDefaultDecisions, parseOPAOnly,
	}
	for _, step := range steps {
		if err := step(c, m); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
	}
	return c, nil
}

// raw is a section as written, nil when absent or null.
func raw(r json.RawMessage) json.RawMessage {
	if Absent(r) {
		return nil
	}
	return r
}

func parseLabels(c *Config, m map[string]json.RawMessage) error {
	var labels map[string]any
	if err := Decode("", m, "labels", &labels); err != nil {
		return err
	}
	if len(labels) == 0 {
		return nil
	}
	c.Labels = make(map[string]string, len(labels))
	for k, v := range labels {
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("labels.%s: want a string, got %s", k, jsonType(v))
		}
		c.Labels[k] = s
	}
	return nil
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// parseDefaultDecisions reads default_decision (the decision OPA's
// "POST /" answers) and default_authorization_decision (the policy that
// authorizes OPA's REST API under --authorization=basic). opa-envoy-plugin
// reads neither. nexus serves neither API: the ext_authz decision is the
// plugin's path, and nexus' APIs are authorized by tokens. OPA's own
// defaults are accepted (configuration tools write them out), and so is a
// default_decision naming the plugin's own decision; any other value asks
// for something nexus does not do, and is refused.
func parseDefaultDecisions(c *Config, m map[string]json.RawMessage) error {
	var dd, dad *string
	if err := Decode("", m, "default_decision", &dd); err != nil {
		return err
	}
	if err := Decode("", m, "default_authorization_decision", &dad); err != nil {
		return err
	}
	if dd != nil {
		ep := "/" + strings.Trim(*dd, "/")
		ok := ep == opaDefaultDecision || (c.Envoy != nil && ep == "/"+c.Envoy.Entrypoint)
		if !ok {
			return fmt.Errorf("default_decision %q: %w (nexus has no \"POST /\" query API; the ext_authz decision is plugins.%s.path)", *dd, ErrUnsupported, PluginName)
		}
	}
	if dad != nil && "/"+strings.Trim(*dad, "/") != opaDefaultAuthzDecision {
		return fmt.Errorf("default_authorization_decision %q: %w (nexus' APIs are authorized by their tokens, not by a policy)", *dad, ErrUnsupported)
	}
	return nil
}

// parseOPAOnly reads the settings of OPA's own runtime.
func parseOPAOnly(c *Config, m map[string]json.RawMessage) error {
	// persistence_directory is where OPA keeps what must survive a
	// restart: nexus' data directory plays that part.
	if err := Decode("", m, "persistence_directory", &c.PersistenceDirectory); err != nil {
		return err
	}
	// nd_builtin_cache records non-deterministic builtins' results in
	// decision logs, which nexus' decision logs do not carry: false is
	// accepted, true refused.
	var nd bool
	if err := Decode("", m, "nd_builtin_cache", &nd); err != nil {
		return err
	}
	if nd {
		return fmt.Errorf("nd_builtin_cache: %w", ErrUnsupported)
	}
	// server configures OPA's REST API: response compression
	// (encoding), request decompression limits (decoding), its
	// http_request_duration_seconds buckets (metrics) and a logger
	// plugin. nexus' HTTP API has none of these knobs, so any setting
	// under server is refused by name rather than silently ignored.
	if _, err := Object("server", m["server"], nil, "encoding", "decoding", "metrics", "logger_plugin"); err != nil {
		return err
	}
	// storage.disk keeps OPA's data document on disk; nexus keeps policy
	// data in memory and relationships in its own store.
	if _, err := Object("storage", m["storage"], nil, "disk"); err != nil {
		return err
	}
	// caching sizes the cache of http.send and similar builtins' results
	// across queries, which nexus does not have.
	if _, err := Object("caching", m["caching"], nil, "inter_query_builtin_cache", "inter_query_builtin_value_cache"); err != nil {
		return err
	}
	// distributed_tracing exports OpenTelemetry spans, which nexus does
	// not emit; type "none" (tracing off) is accepted.
	dt, err := Object("distributed_tracing", m["distributed_tracing"], []string{"type"},
		"address", "service_name", "sample_percentage", "encryption", "allow_insecure_tls",
		"tls_ca_cert_file", "tls_cert_file", "tls_private_key_file", "resource")
	if err != nil {
		return err
	}
	var typ string
	if err := Decode("distributed_tracing", dt, "type", &typ); err != nil {
		return err
	}
	if typ != "" && typ != "none" {
		return fmt.Errorf("distributed_tracing.type %q: %w (nexus emits no traces)", typ, ErrUnsupported)
	}
	return nil
}

var pluginKeys = []string{
	"addr", "path", "query", "dry-run", "enable-reflection", "skip-request-body-parse",
	"grpc-max-recv-msg-size", "grpc-max-send-msg-size", "enable-performance-metrics",
	"grpc-request-duration-seconds-buckets",
}

// parsePlugins reads plugins: envoy_ext_authz_grpc alone. opa-envoy-plugin's
// proto-descriptor (parsing gRPC request bodies with a descriptor set) is
// not implemented.
func parsePlugins(c *Config, m map[string]json.RawMessage) error {
	plugins, err := Object("plugins", m["plugins"], []string{PluginName})
	if err != nil {
		return err
	}
	r, ok := plugins[PluginName]
	if !ok {
		return nil
	}
	where := "plugins." + PluginName
	pm, err := Object(where, r, pluginKeys, "proto-descriptor")
	if err != nil {
		return err
	}
	p := &EnvoyPlugin{
		Addr: DefaultEnvoyAddr, GRPCMaxRecvMsgSize: DefaultGRPCMaxRecv, GRPCMaxSendMsgSize: DefaultGRPCMaxSend,
		GRPCRequestDurationSecondsBuckets: slices.Clone(DefaultDurationBuckets), // decoding writes into the slice
	}
	var path, query string
	var recv, send *int
	if err := DecodeFields(where, pm, map[string]any{
		"addr": &p.Addr, "path": &path, "query": &query,
		"dry-run": &p.DryRun, "enable-reflection": &p.EnableReflection, "skip-request-body-parse": &p.SkipRequestBodyParse,
		"grpc-max-recv-msg-size": &recv, "grpc-max-send-msg-size": &send,
		"enable-performance-metrics": &p.EnablePerformanceMetrics, "grpc-request-duration-seconds-buckets": &p.GRPCRequestDurationSecondsBuckets,
	}); err != nil {
		return err
	}
	if p.Addr, err = grpcAddr(p.Addr); err != nil {
		return fmt.Errorf("%s.addr: %w", where, err)
	}
	if p.Entrypoint, err = decisionPath(path, query); err != nil {
		return fmt.Errorf("%s.%w", where, err)
	}
	p.LogPath, p.LogQuery = path, query
	if path == "" && query == "" {
		p.LogPath = DefaultEnvoyEntrypoint
	}
	for name, v := range map[string]*int{"grpc-max-recv-msg-size": recv, "grpc-max-send-msg-size": send} {
		if v != nil && *v <= 0 {
			return fmt.Errorf("%s.%s: want a positive number of bytes, got %d", where, name, *v)
		}
	}
	if recv != nil {
		p.GRPCMaxRecvMsgSize = *recv
	}
	if send != nil {
		p.GRPCMaxSendMsgSize = *send
	}
	b := p.GRPCRequestDurationSecondsBuckets
	if len(b) == 0 {
		return fmt.Errorf("%s.grpc-request-duration-seconds-buckets: want at least one bucket", where)
	}
	for i := 1; i < len(b); i++ {
		if b[i] <= b[i-1] {
			return fmt.Errorf("%s.grpc-request-duration-seconds-buckets: want increasing bounds, got %v", where, b)
		}
	}
	c.Envoy = p
	return nil
}

// grpcAddr reads the plugin's addr as it does: host:port, or a URL with
// the scheme grpc (host:port) or unix (a socket path; "unix://@name" is
// an abstract socket).
func grpcAddr(addr string) (string, error) {
	scheme, rest, ok := strings.Cut(addr, "://")
	switch {
	case !ok:
		rest = addr
	case scheme == "grpc":
	case scheme == "unix":
		if rest == "" || rest == "@" {
			return "", fmt.Errorf("%q names no socket", addr)
		}
		return addr, nil
	default:
		return "", fmt.Errorf("%q: the scheme must be grpc or unix", addr)
	}
	if !strings.Contains(rest, ":") || strings.ContainsAny(rest, "/?#") {
		return "", fmt.Errorf("%q: want host:port, grpc://host:port or unix:///path", addr)
	}
	return rest, nil
}

// decisionPath is the decision's entrypoint, in nexus' form
// ("envoy/authz/allow"), from the plugin's path or its deprecated query.
//
// path is a slash-separated path under data, as the plugin reads it
// ("envoy/authz/allow", "/envoy/authz/allow/"); a segment may hold dots
// (test/com.example/allow names the key "com.example"). A path without a
// slash that holds dots ("envoy.authz.allow", "data.envoy.authz.allow") is
// read as the Rego reference it was meant to be. query must be a
// reference to a rule under data ("data.envoy.authz.allow"): nexus
// evaluates rules, not arbitrary queries. As the plugin does, setting both
// is an error, whatever their values.
func decisionPath(path, query string) (string, error) {
	if path != "" && query != "" {
		return "", errors.New("path and query: set only path (query is deprecated), not both")
	}
	if query != "" {
		ep, ok := dottedRef(strings.TrimSpace(query), true)
		if !ok {
			return "", fmt.Errorf("query %q: %w: nexus evaluates a rule; give its path, e.g. path: envoy/authz/allow", query, ErrUnsupported)
		}
		return ep, nil
	}
	if path == "" {
		return DefaultEnvoyEntrypoint, nil
	}
	if !strings.Contains(path, "/") && strings.Contains(path, ".") {
		ep, ok := dottedRef(path, false)
		if !ok {
			return "", fmt.Errorf("path %q: want a slash-separated path such as envoy/authz/allow", path)
		}
		return ep, nil
	}
	var segs []string
	for _, s := range strings.Split(path, "/") {
		if s == "" {
			continue
		}
		if strings.ContainsAny(s, " \t\r\n\"[]") {
			return "", fmt.Errorf("path %q: segment %q is not a rule or package name", path, s)
		}
		segs = append(segs, s)
	}
	if len(segs) == 0 {
		return "", fmt.Errorf("path %q names no rule", path)
	}
	return strings.Join(segs, "/"), nil
}

var ident = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// dottedRef reads a Rego reference of identifiers ("data.a.b", or "a.b"
// when data is optional) as a slash path under data.
func dottedRef(s string, needData bool) (string, bool) {
	parts := strings.Split(s, ".")
	if parts[0] == "data" {
		parts = parts[1:]
	} else if needData {
		return "", false
	}
	if len(parts) == 0 {
		return "", false
	}
	for _, p := range parts {
		if !ident.MatchString(p) {
			return "", false
		}
	}
	return strings.Join(parts, "/"), true
}
