package confcheck

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	jwtauthnv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"

	// Every Envoy type, so that any typed_config resolves.
	_ "github.com/nexuspdp/nexus/e2e/internal/envoyall"
)

// validator is implemented by the messages protoc-gen-validate generates.
type validator interface{ ValidateAll() error }

// EnvoyBootstrap decodes an Envoy bootstrap file (YAML or JSON) strictly into
// bootstrap v3, resolves every google.protobuf.Any in it (recursively),
// runs the generated validation rules of the bootstrap and of every message
// held in an Any, rejects deprecated fields, and checks that the clusters and
// filters the file names exist in it.
func EnvoyBootstrap(data []byte) (*bootstrapv3.Bootstrap, error) {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("%w: yaml: %w", ErrInvalid, err)
	}
	var b bootstrapv3.Bootstrap
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(j, &b); err != nil {
		if strings.Contains(err.Error(), "unknown field") {
			return nil, fmt.Errorf("%w: %w", ErrUnknownField, err)
		}
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := b.ValidateAll(); err != nil {
		return nil, fmt.Errorf("%w: bootstrap: %w", ErrInvalid, err)
	}
	w := &walker{}
	w.message(b.ProtoReflect(), "bootstrap")
	if err := errors.Join(w.errs...); err != nil {
		return nil, err
	}
	if err := envoyReferences(&b); err != nil {
		return nil, err
	}
	return &b, nil
}

// walker visits every set field of a message tree, unpacking Any values.
type walker struct {
	errs []error
	anys []proto.Message // every message unpacked from an Any, in order
}

func (w *walker) message(m protoreflect.Message, path string) {
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			w.errs = append(w.errs, fmt.Errorf("%w: %s: Any %q: %w", ErrInvalid, path, a.GetTypeUrl(), err))
			return
		}
		if v, ok := inner.(validator); ok {
			if err := v.ValidateAll(); err != nil {
				w.errs = append(w.errs, fmt.Errorf("%w: %s (%s): %w", ErrInvalid, path, a.GetTypeUrl(), err))
			}
		}
		w.anys = append(w.anys, inner)
		w.message(inner.ProtoReflect(), path+"("+string(inner.ProtoReflect().Descriptor().FullName())+")")
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := path + "." + string(fd.Name())
		if opts, ok := fd.Options().(*descriptorpb.FieldOptions); ok && opts.GetDeprecated() {
			w.errs = append(w.errs, fmt.Errorf("%w: %s is deprecated", ErrInvalid, p))
		}
		switch {
		case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				w.message(l.Get(i).Message(), fmt.Sprintf("%s[%d]", p, i))
			}
		case fd.IsMap() && fd.MapValue().Kind() == protoreflect.MessageKind:
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				w.message(mv.Message(), fmt.Sprintf("%s[%s]", p, k.String()))
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Kind() == protoreflect.MessageKind:
			w.message(v.Message(), p)
		}
		return true
	})
}

// envoyReferences checks the names that Envoy resolves at load time: every
// cluster a route, a gRPC service or an HTTP URI names is a static cluster;
// every key of typed_per_filter_config names a filter of its connection
// manager; every key of typed_extension_protocol_options is the full name of
// the type it holds.
func envoyReferences(b *bootstrapv3.Bootstrap) error {
	clusters := map[string]bool{}
	var errs []error
	for _, c := range b.GetStaticResources().GetClusters() {
		if clusters[c.GetName()] {
			errs = append(errs, fmt.Errorf("%w: cluster %q defined twice", ErrInvalid, c.GetName()))
		}
		clusters[c.GetName()] = true
		if la := c.GetLoadAssignment(); la != nil && la.GetClusterName() != c.GetName() {
			errs = append(errs, fmt.Errorf("%w: cluster %q: load_assignment.cluster_name is %q", ErrReference, c.GetName(), la.GetClusterName()))
		}
		for k, a := range c.GetTypedExtensionProtocolOptions() {
			if want := strings.TrimPrefix(a.GetTypeUrl(), "type.googleapis.com/"); k != want {
				errs = append(errs, fmt.Errorf("%w: cluster %q: typed_extension_protocol_options key %q, want %q", ErrReference, c.GetName(), k, want))
			}
		}
	}
	// Every string field named cluster or cluster_name outside the clusters
	// themselves refers to a cluster.
	for _, l := range b.GetStaticResources().GetListeners() {
		w := &walker{}
		w.message(l.ProtoReflect(), "listener "+l.GetName())
		errs = append(errs, w.errs...)
		for _, m := range append([]proto.Message{l}, w.anys...) {
			for _, name := range clusterNames(m.ProtoReflect()) {
				if !clusters[name] {
					errs = append(errs, fmt.Errorf("%w: listener %q names cluster %q, which is not defined", ErrReference, l.GetName(), name))
				}
			}
			if hcm, ok := m.(*hcmv3.HttpConnectionManager); ok {
				errs = append(errs, filterNames(hcm)...)
			}
			if j, ok := m.(*jwtauthnv3.JwtAuthentication); ok {
				errs = append(errs, jwtProviderNames(j)...)
			}
		}
	}
	return errors.Join(errs...)
}

// clusterNames returns the values of the string fields named cluster or
// cluster_name in m and in its sub-messages (not through Any: the walker
// visits those separately).
func clusterNames(m protoreflect.Message) []string {
	var out []string
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Kind() == protoreflect.StringKind && !fd.IsList() && !fd.IsMap() &&
			(fd.Name() == "cluster" || fd.Name() == "cluster_name"):
			out = append(out, v.String())
		case fd.Kind() == protoreflect.MessageKind && fd.IsList():
			for i := 0; i < v.List().Len(); i++ {
				out = append(out, clusterNames(v.List().Get(i).Message())...)
			}
		case fd.Kind() == protoreflect.MessageKind && fd.IsMap():
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					out = append(out, clusterNames(mv.Message())...)
					return true
				})
			}
		case fd.Kind() == protoreflect.MessageKind:
			if _, isAny := v.Message().Interface().(*anypb.Any); !isAny {
				out = append(out, clusterNames(v.Message())...)
			}
		}
		return true
	})
	sort.Strings(out)
	return out
}

// filterNames checks that typed_per_filter_config keys name filters of hcm
// and that the router comes last.
func filterNames(hcm *hcmv3.HttpConnectionManager) []error {
	var errs []error
	names := map[string]bool{}
	fs := hcm.GetHttpFilters()
	for i, f := range fs {
		names[f.GetName()] = true
		router := f.GetTypedConfig().GetTypeUrl() == "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
		if router != (i == len(fs)-1) {
			errs = append(errs, fmt.Errorf("%w: http filter %d (%q): the router must be the last filter, and only there", ErrInvalid, i, f.GetName()))
		}
	}
	for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
		for k := range vh.GetTypedPerFilterConfig() {
			if !names[k] {
				errs = append(errs, fmt.Errorf("%w: virtual host %q: typed_per_filter_config %q names no http filter", ErrReference, vh.GetName(), k))
			}
		}
		for _, r := range vh.GetRoutes() {
			for k := range r.GetTypedPerFilterConfig() {
				if !names[k] {
					errs = append(errs, fmt.Errorf("%w: route %q: typed_per_filter_config %q names no http filter", ErrReference, r.GetMatch().String(), k))
				}
			}
		}
	}
	return errs
}

// jwtProviderNames checks that every provider a jwt_authn requirement names
// is defined (Envoy refuses the filter otherwise).
func jwtProviderNames(j *jwtauthnv3.JwtAuthentication) []error {
	var errs []error
	var walk func(r *jwtauthnv3.JwtRequirement)
	walk = func(r *jwtauthnv3.JwtRequirement) {
		name := r.GetProviderName()
		if pa := r.GetProviderAndAudiences(); pa != nil {
			name = pa.GetProviderName()
		}
		if name != "" {
			if _, ok := j.GetProviders()[name]; !ok {
				errs = append(errs, fmt.Errorf("%w: jwt_authn requirement names provider %q, which is not defined", ErrReference, name))
			}
		}
		for _, c := range r.GetRequiresAny().GetRequirements() {
			walk(c)
		}
		for _, c := range r.GetRequiresAll().GetRequirements() {
			walk(c)
		}
	}
	for _, rule := range j.GetRules() {
		walk(rule.GetRequires())
		if n := rule.GetRequirementName(); n != "" {
			if _, ok := j.GetRequirementMap()[n]; !ok {
				errs = append(errs, fmt.Errorf("%w: jwt_authn rule names requirement %q, which is not defined", ErrReference, n))
			}
		}
	}
	for _, r := range j.GetRequirementMap() {
		walk(r)
	}
	return errs
}

// EnvoyAnys returns every message held in an Any in b, in document order.
func EnvoyAnys(b *bootstrapv3.Bootstrap) []proto.Message {
	w := &walker{}
	w.message(b.ProtoReflect(), "bootstrap")
	return w.anys
}
