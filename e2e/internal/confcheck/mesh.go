package confcheck

import (
	"encoding/json"
	"fmt"
	"sort"

	"google.golang.org/protobuf/encoding/protojson"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	"sigs.k8s.io/yaml"
)

// IstiodMeshValues decodes a values file for Istio's istiod Helm chart that
// sets only meshConfig, and decodes meshConfig strictly into Istio's own
// MeshConfig type. It also checks what istiod checks of an extension
// provider: a unique name and a service and port for the ext_authz kinds.
func IstiodMeshValues(data []byte) (*meshv1alpha1.MeshConfig, error) {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("%w: yaml: %w", ErrInvalid, err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(j, &top); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var keys []string
	for k := range top {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) != 1 || keys[0] != "meshConfig" {
		return nil, fmt.Errorf("%w: top-level keys %v, want only meshConfig", ErrUnknownField, keys)
	}
	var mc meshv1alpha1.MeshConfig
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(top["meshConfig"], &mc); err != nil {
		return nil, fmt.Errorf("%w: meshConfig: %w", ErrUnknownField, err)
	}
	seen := map[string]bool{}
	for i, p := range mc.GetExtensionProviders() {
		if p.GetName() == "" || seen[p.GetName()] {
			return nil, fmt.Errorf("%w: extensionProviders[%d]: empty or repeated name %q", ErrInvalid, i, p.GetName())
		}
		seen[p.GetName()] = true
		type svc interface {
			GetService() string
			GetPort() uint32
		}
		var s svc
		switch {
		case p.GetEnvoyExtAuthzGrpc() != nil:
			s = p.GetEnvoyExtAuthzGrpc()
		case p.GetEnvoyExtAuthzHttp() != nil:
			s = p.GetEnvoyExtAuthzHttp()
		}
		if s != nil && (s.GetService() == "" || s.GetPort() == 0 || s.GetPort() > 65535) {
			return nil, fmt.Errorf("%w: extension provider %q: service and port are required", ErrInvalid, p.GetName())
		}
	}
	return &mc, nil
}
