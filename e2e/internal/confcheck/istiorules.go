package confcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	extensionsv1alpha1 "istio.io/api/extensions/v1alpha1"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	securityv1beta1 "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
)

// IstioRootNamespace is the namespace whose policies without a selector
// apply to the whole mesh (Istio's default root namespace).
const IstioRootNamespace = "istio-system"

// istioHeaderMatch reports whether header h matches an Istio header pattern
// of includeRequestHeadersInCheck: exact, "prefix*" or "*suffix".
func istioHeaderMatch(pattern, h string) bool {
	pattern = strings.ToLower(pattern)
	switch {
	case pattern == "*":
		return true
	case strings.HasSuffix(pattern, "*"):
		return strings.HasPrefix(h, strings.TrimSuffix(pattern, "*"))
	case strings.HasPrefix(pattern, "*"):
		return strings.HasSuffix(h, strings.TrimPrefix(pattern, "*"))
	}
	return pattern == h
}

// MeshAuthzHeaders checks that every envoyExtAuthzHttp provider of mc sends
// each of headers (lower-case request headers the policy reads) in
// includeRequestHeadersInCheck: Istio's HTTP ext_authz sends no other client
// header but Host, Method, Path, Content-Length and Authorization. gRPC
// providers send every header.
func MeshAuthzHeaders(mc *meshv1alpha1.MeshConfig, headers []string) error {
	var errs []error
	for _, p := range mc.GetExtensionProviders() {
		h := p.GetEnvoyExtAuthzHttp()
		if h == nil {
			continue
		}
		for _, want := range headers {
			sent := false
			for _, pat := range h.GetIncludeRequestHeadersInCheck() {
				sent = sent || istioHeaderMatch(pat, want)
			}
			for _, always := range alwaysSentToHTTPAuthz {
				sent = sent || always == want
			}
			if !sent {
				errs = append(errs, fmt.Errorf("%w: provider %q does not send the %s header (includeRequestHeadersInCheck), which the policy reads", ErrUnsafe, p.GetName(), want))
			}
		}
	}
	return errors.Join(errs...)
}

// workloadRef is a namespace and a label selector (nil: every workload of
// the namespace).
type workloadRef struct {
	ns     string
	labels map[string]string
}

// covers reports whether r applies to every workload that w selects.
func (r workloadRef) covers(w workloadRef) bool {
	if r.ns == IstioRootNamespace && len(r.labels) == 0 {
		return true
	}
	if r.ns != w.ns {
		return false
	}
	for k, v := range r.labels {
		if w.labels[k] != v {
			return false
		}
	}
	return true
}

func namespaceOf(o Object) string {
	md, _ := o.Raw["metadata"].(map[string]any)
	ns, _ := md["namespace"].(string)
	return ns
}

func selectorLabels(s *typev1beta1.WorkloadSelector) map[string]string {
	return s.GetMatchLabels()
}

// WasmPluginSubject returns the subject header that a WasmPlugin running
// nexus' edge filter reads (pluginConfig.subject), or "".
func WasmPluginSubject(wp *extensionsv1alpha1.WasmPlugin) string {
	j, err := protojson.Marshal(wp.GetPluginConfig())
	if err != nil {
		return ""
	}
	return EdgeSubject(j)
}

// IstioIdentity checks that in the Istio resources objs (all the files of
// one deployment together), whatever reads the subject from a header reads
// one that only a verified token sets: every workload that a CUSTOM
// AuthorizationPolicy sends to nexus (which trusts subjectHeader), and every
// workload whose WasmPlugin reads a subject header, has a
// RequestAuthentication whose jwtRules copy the sub claim into that header
// (outputClaimToHeaders). Envoy's jwt_authn filter, which Istio builds from
// it for every request, removes a client's copy of such a header before it
// verifies a token, so the header holds a verified subject or nothing.
func IstioIdentity(objs []Object, subjectHeader string) error {
	subjectHeader = strings.ToLower(subjectHeader)
	type need struct {
		what   string
		ref    workloadRef
		header string
	}
	var needs []need
	type writer struct {
		ref     workloadRef
		headers map[string]bool
	}
	var writers []writer
	for _, o := range objs {
		ns := namespaceOf(o)
		switch v := o.Typed.(type) {
		case *securityv1beta1.AuthorizationPolicy:
			if v.GetAction() == securityv1beta1.AuthorizationPolicy_CUSTOM {
				needs = append(needs, need{what: "AuthorizationPolicy " + o.Name, ref: workloadRef{ns, selectorLabels(v.GetSelector())}, header: subjectHeader})
			}
		case *extensionsv1alpha1.WasmPlugin:
			if h := WasmPluginSubject(v); h != "" {
				needs = append(needs, need{what: "WasmPlugin " + o.Name, ref: workloadRef{ns, selectorLabels(v.GetSelector())}, header: h})
			}
		case *securityv1beta1.RequestAuthentication:
			w := writer{ref: workloadRef{ns, selectorLabels(v.GetSelector())}, headers: map[string]bool{}}
			for _, r := range v.GetJwtRules() {
				for _, c := range r.GetOutputClaimToHeaders() {
					if c.GetClaim() == "sub" {
						w.headers[strings.ToLower(c.GetHeader())] = true
					}
				}
			}
			writers = append(writers, w)
		}
	}
	var errs []error
	for _, n := range needs {
		ok := false
		for _, w := range writers {
			ok = ok || (w.ref.covers(n.ref) && w.headers[n.header])
		}
		if !ok {
			errs = append(errs, fmt.Errorf("%w: %s (namespace %s, %v) reads the subject from %s, but no RequestAuthentication for those workloads sets it from a verified token's sub (outputClaimToHeaders): a client can send its own", ErrUnsafe, n.what, n.ref.ns, n.ref.labels, n.header))
		}
	}
	return errors.Join(errs...)
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// WasmPluginsSafe checks every WasmPlugin of objs: one that reads a subject
// header runs in phase AUTHZ, after Istio's authentication filters (in
// AUTHN it would read a header no token has been checked for yet) and
// before its authorization filters (where the CUSTOM policy calls nexus);
// and every plugin is pinned by digest (sha256, or a url @sha256:), so the
// module that runs is the one that was reviewed, not whatever a tag points
// to today.
func WasmPluginsSafe(objs []Object) error {
	var errs []error
	for _, o := range objs {
		wp, ok := o.Typed.(*extensionsv1alpha1.WasmPlugin)
		if !ok {
			continue
		}
		if WasmPluginSubject(wp) != "" && wp.GetPhase() != extensionsv1alpha1.PluginPhase_AUTHZ {
			errs = append(errs, fmt.Errorf("%w: WasmPlugin %q reads the subject but runs in phase %v: it must run in AUTHZ, after authentication", ErrUnsafe, o.Name, wp.GetPhase()))
		}
		_, digest, inURL := strings.Cut(wp.GetUrl(), "@sha256:")
		switch {
		case wp.GetSha256() != "" && !sha256Hex.MatchString(wp.GetSha256()):
			errs = append(errs, fmt.Errorf("%w: WasmPlugin %q: sha256 %q is not a SHA-256 digest", ErrUnsafe, o.Name, wp.GetSha256()))
		case inURL && wp.GetSha256() != "" && digest != wp.GetSha256():
			errs = append(errs, fmt.Errorf("%w: WasmPlugin %q: the url's digest and sha256 differ", ErrUnsafe, o.Name))
		case wp.GetSha256() == "" && !(inURL && sha256Hex.MatchString(digest)):
			errs = append(errs, fmt.Errorf("%w: WasmPlugin %q is not pinned by digest (sha256): the module behind %s can change under the mesh", ErrUnsafe, o.Name, wp.GetUrl()))
		}
	}
	return errors.Join(errs...)
}

// Version is an Envoy release, major and minor.
type Version struct{ Major, Minor int }

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// Less reports whether v is older than w.
func (v Version) Less(w Version) bool {
	return v.Major < w.Major || (v.Major == w.Major && v.Minor < w.Minor)
}

var envoyTag = regexp.MustCompile(`^envoyproxy/envoy(?:-[a-z]+)?:(?:[a-z-]+-)?v(\d+)\.(\d+)`)

// EnvoyImageVersion returns the Envoy release of an envoyproxy/envoy image
// reference (v1.39-latest, v1.39.2, distroless-v1.39.2), and whether image
// is an Envoy image with a release in its tag at all.
func EnvoyImageVersion(image string) (Version, bool, error) {
	image = strings.TrimPrefix(strings.TrimPrefix(image, "docker.io/"), "library/")
	if !strings.HasPrefix(image, "envoyproxy/envoy") {
		return Version{}, false, nil
	}
	m := envoyTag.FindStringSubmatch(image)
	if m == nil {
		return Version{}, true, fmt.Errorf("%w: Envoy image %q names no release (pin a vMAJOR.MINOR tag)", ErrUnsafe, image)
	}
	var v Version
	_, _ = fmt.Sscan(m[1], &v.Major)
	_, _ = fmt.Sscan(m[2], &v.Minor)
	return v, true, nil
}

// EnvoyImagesAtLeast checks that every Envoy image of images is release
// min or later.
func EnvoyImagesAtLeast(images []string, min Version, why string) error {
	var errs []error
	for _, img := range images {
		v, ok, err := EnvoyImageVersion(img)
		switch {
		case err != nil:
			errs = append(errs, err)
		case ok && v.Less(min):
			errs = append(errs, fmt.Errorf("%w: %s is Envoy %s, older than %s (%s)", ErrUnsafe, img, v, min, why))
		}
	}
	return errors.Join(errs...)
}

// PluginEnvoyVersions reads the plugin README's "Minimum: Envoy X.Y" and
// "Recommended: Envoy X.Y" lines.
func PluginEnvoyVersions(readme []byte) (minimum, recommended Version, err error) {
	find := func(label string) (Version, error) {
		m := regexp.MustCompile(label + `:\s*Envoy\s+(\d+)\.(\d+)`).FindSubmatch(readme)
		if m == nil {
			return Version{}, fmt.Errorf("%w: no %q line with an Envoy version", ErrReference, label)
		}
		var v Version
		_ = json.Unmarshal(m[1], &v.Major)
		_ = json.Unmarshal(m[2], &v.Minor)
		return v, nil
	}
	if minimum, err = find("Minimum"); err != nil {
		return
	}
	recommended, err = find("Recommended")
	return
}
