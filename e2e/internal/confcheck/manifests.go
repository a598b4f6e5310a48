package confcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	extensionsv1alpha1 "istio.io/api/extensions/v1alpha1"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	securityv1beta1 "istio.io/api/security/v1beta1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Object is one decoded document of a manifest file.
type Object struct {
	GVK  schema.GroupVersionKind
	Name string
	// Typed is the k8s.io/api value for Kubernetes kinds, or the istio.io/api
	// spec message for Istio kinds.
	Typed any
	// Raw is the document as generic JSON.
	Raw map[string]any
}

// istioSpecs maps the Istio kinds nexus ships to their spec types.
var istioSpecs = map[string]func() proto.Message{
	"AuthorizationPolicy": func() proto.Message { return &securityv1beta1.AuthorizationPolicy{} },
	"WasmPlugin":          func() proto.Message { return &extensionsv1alpha1.WasmPlugin{} },
	"ServiceEntry":        func() proto.Message { return &networkingv1alpha3.ServiceEntry{} },
}

// k8sKinds maps the Kubernetes kinds nexus ships to their types.
var k8sKinds = map[schema.GroupVersionKind]func() any{
	{Version: "v1", Kind: "Namespace"}:                            func() any { return &corev1.Namespace{} },
	{Version: "v1", Kind: "ServiceAccount"}:                       func() any { return &corev1.ServiceAccount{} },
	{Version: "v1", Kind: "ConfigMap"}:                            func() any { return &corev1.ConfigMap{} },
	{Version: "v1", Kind: "Service"}:                              func() any { return &corev1.Service{} },
	{Group: "apps", Version: "v1", Kind: "Deployment"}:            func() any { return &appsv1.Deployment{} },
	{Group: "policy", Version: "v1", Kind: "PodDisruptionBudget"}: func() any { return &policyv1.PodDisruptionBudget{} },
}

// Manifests decodes and validates a multi-document YAML file of Kubernetes
// and Istio resources. Kubernetes kinds decode strictly (unknown, duplicate
// and wrongly cased fields are errors, as with kubectl's strict field
// validation) into k8s.io/api types; Istio kinds validate against crds and
// their spec decodes strictly into istio.io/api types. Then the references
// inside the file are checked: selectors match pod labels, probes and
// Services name ports the containers declare.
func Manifests(ctx context.Context, data []byte, crds *CRDs) ([]Object, error) {
	docs, err := splitYAML(data)
	if err != nil {
		return nil, err
	}
	var objs []Object
	var errs []error
	for i, doc := range docs {
		o, err := decodeObject(ctx, doc, crds)
		if err != nil {
			errs = append(errs, fmt.Errorf("document %d: %w", i+1, err))
			continue
		}
		objs = append(objs, o)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := manifestReferences(objs); err != nil {
		return nil, err
	}
	return objs, nil
}

func decodeObject(ctx context.Context, doc []byte, crds *CRDs) (Object, error) {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return Object{}, fmt.Errorf("%w: yaml: %w", ErrInvalid, err)
	}
	// As kube-apiserver decodes objects: whole numbers become int64.
	var raw map[string]any
	if err := utiljson.Unmarshal(j, &raw); err != nil {
		return Object{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(j, &tm); err != nil {
		return Object{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	gv, err := schema.ParseGroupVersion(tm.APIVersion)
	if err != nil || tm.Kind == "" {
		return Object{}, fmt.Errorf("%w: apiVersion %q kind %q", ErrInvalid, tm.APIVersion, tm.Kind)
	}
	gvk := gv.WithKind(tm.Kind)
	o := Object{GVK: gvk, Raw: raw}
	if md, ok := raw["metadata"].(map[string]any); ok {
		o.Name, _ = md["name"].(string)
	}
	if o.Name == "" {
		return o, fmt.Errorf("%w: %s without metadata.name", ErrInvalid, gvk.Kind)
	}

	// Name, labels and annotations as kube-apiserver validates them.
	var meta struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(j, &meta); err != nil {
		return o, fmt.Errorf("%w: %s %q: metadata: %w", ErrInvalid, gvk.Kind, o.Name, err)
	}
	nameFn := apivalidation.NameIsDNSSubdomain
	if gvk.Kind == "Service" || gvk.Kind == "Namespace" {
		nameFn = apivalidation.NameIsDNS1035Label
	}
	// Every namespaced object names its namespace, so that applying the
	// file puts it where the other files expect it.
	namespaced := gvk.Kind != "Namespace"
	if errs := apivalidation.ValidateObjectMeta(&meta.Metadata, namespaced, nameFn, field.NewPath("metadata")); len(errs) > 0 {
		return o, fmt.Errorf("%w: %s %q: %s", ErrInvalid, gvk.Kind, o.Name, errs.ToAggregate().Error())
	}

	if mk := k8sKinds[gvk]; mk != nil {
		v := mk()
		if err := strictJSON(j, v); err != nil {
			return o, fmt.Errorf("%s %q: %w", gvk.Kind, o.Name, err)
		}
		o.Typed = v
		return o, nil
	}
	if strings.HasSuffix(gvk.Group, ".istio.io") {
		if crds == nil || !crds.Has(gvk) {
			return o, fmt.Errorf("%w: no Istio CRD for %s", ErrReference, gvk)
		}
		// The envelope (apiVersion, kind, metadata, spec) strictly, metadata
		// into ObjectMeta.
		var env struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        metav1.ObjectMeta `json:"metadata"`
			Spec            json.RawMessage   `json:"spec"`
		}
		if err := strictJSON(j, &env); err != nil {
			return o, fmt.Errorf("%s %q: %w", gvk.Kind, o.Name, err)
		}
		if err := crds.Validate(ctx, gvk, raw); err != nil {
			return o, fmt.Errorf("%s %q: %w", gvk.Kind, o.Name, err)
		}
		mk := istioSpecs[gvk.Kind]
		if mk == nil {
			return o, fmt.Errorf("%w: %s: no istio.io/api type registered in confcheck", ErrReference, gvk)
		}
		spec := mk()
		if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(env.Spec, spec); err != nil {
			return o, fmt.Errorf("%w: %s %q: spec: %w", ErrUnknownField, gvk.Kind, o.Name, err)
		}
		o.Typed = spec
		return o, nil
	}
	return o, fmt.Errorf("%w: kind %s is not one confcheck knows", ErrReference, gvk)
}

// strictJSON decodes j into v as kube-apiserver's strict field validation
// does: case-sensitive, no unknown and no duplicate fields.
func strictJSON(j []byte, v any) error {
	strict, err := kjson.UnmarshalStrict(j, v, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if len(strict) > 0 {
		return fmt.Errorf("%w: %w", ErrUnknownField, errors.Join(strict...))
	}
	return nil
}

// manifestReferences checks what kube-apiserver and kubelet would reject or
// silently mis-serve: Deployment selectors that do not match their pod
// labels, probes on ports no container declares, containers without
// resources or probes (nexus requires them), Services that select no pod of
// the file or target undeclared ports, PodDisruptionBudgets that select
// nothing, volumes naming ConfigMaps neither defined nor optional.
func manifestReferences(objs []Object) error {
	configMaps := map[string]bool{}
	for _, o := range objs {
		if cm, ok := o.Typed.(*corev1.ConfigMap); ok {
			configMaps[cm.Name] = true
		}
	}
	var (
		errs []error
		pods []podPorts
	)
	for _, o := range objs {
		if d, ok := o.Typed.(*appsv1.Deployment); ok {
			p, ok, derrs := checkDeployment(d, configMaps)
			errs = append(errs, derrs...)
			if ok {
				pods = append(pods, p)
			}
		}
	}
	for _, o := range objs {
		switch v := o.Typed.(type) {
		case *corev1.Service:
			errs = append(errs, checkService(v, pods)...)
		case *policyv1.PodDisruptionBudget:
			sel, err := metav1.LabelSelectorAsSelector(v.Spec.Selector)
			if err != nil || len(selectPods(sel, pods)) == 0 {
				errs = append(errs, fmt.Errorf("%w: PodDisruptionBudget %q selects no pod of this file", ErrReference, v.Name))
			}
		}
	}
	return errors.Join(errs...)
}

// podPorts is what Services and PodDisruptionBudgets are checked against:
// a Deployment's pod labels and the ports its containers declare.
type podPorts struct {
	name   string
	labels labels.Set
	ports  map[string]int32
	nums   map[int32]bool
}

// checkDeployment checks one Deployment on its own and returns its pods'
// labels and ports; ok is false when its selector is unusable.
func checkDeployment(d *appsv1.Deployment, configMaps map[string]bool) (p podPorts, ok bool, errs []error) {
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || d.Spec.Selector == nil {
		return p, false, []error{fmt.Errorf("%w: Deployment %q: selector: %v", ErrInvalid, d.Name, err)}
	}
	if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		errs = append(errs, fmt.Errorf("%w: Deployment %q: selector does not match the pod template's labels", ErrInvalid, d.Name))
	}
	p = podPorts{name: d.Name, labels: d.Spec.Template.Labels, ports: map[string]int32{}, nums: map[int32]bool{}}
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name != "" {
				p.ports[cp.Name] = cp.ContainerPort
			}
			p.nums[cp.ContainerPort] = true
		}
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if strings.HasPrefix(c.Name, "nexus") {
			errs = append(errs, checkNexusContainer(d.Name, c, p)...)
		}
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, rl := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
			for name := range rl {
				if !standardResource(name) {
					errs = append(errs, fmt.Errorf("%w: Deployment %q container %q: resource %q is neither standard nor domain-qualified", ErrInvalid, d.Name, c.Name, name))
				}
			}
		}
	}
	for _, tsc := range d.Spec.Template.Spec.TopologySpreadConstraints {
		sel, err := metav1.LabelSelectorAsSelector(tsc.LabelSelector)
		if err != nil || tsc.LabelSelector == nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			errs = append(errs, fmt.Errorf("%w: Deployment %q: a topology spread constraint does not select its own pods", ErrInvalid, d.Name))
		}
	}
	errs = append(errs, checkVolumes(d, configMaps)...)
	return p, true, errs
}

// checkNexusContainer requires probes, on declared ports, and cpu and
// memory requests and a memory limit of a nexus container.
func checkNexusContainer(deployment string, c corev1.Container, p podPorts) []error {
	var errs []error
	if c.ReadinessProbe == nil || c.LivenessProbe == nil {
		errs = append(errs, fmt.Errorf("%w: Deployment %q container %q: readiness and liveness probes are required", ErrInvalid, deployment, c.Name))
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		errs = append(errs, fmt.Errorf("%w: Deployment %q container %q: cpu and memory requests and a memory limit are required", ErrInvalid, deployment, c.Name))
	}
	for _, pr := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe} {
		if pr == nil {
			continue
		}
		var port intstr.IntOrString
		switch {
		case pr.HTTPGet != nil:
			port = pr.HTTPGet.Port
		case pr.TCPSocket != nil:
			port = pr.TCPSocket.Port
		case pr.GRPC != nil:
			port = intstr.FromInt32(pr.GRPC.Port)
		}
		if !portDeclared(port, p.ports, p.nums) {
			errs = append(errs, fmt.Errorf("%w: Deployment %q container %q: probe port %s is not declared", ErrReference, deployment, c.Name, port.String()))
		}
	}
	return errs
}

// checkVolumes checks that ConfigMap volumes name a ConfigMap of the file
// (or are optional) and that containers mount only defined volumes.
func checkVolumes(d *appsv1.Deployment, configMaps map[string]bool) []error {
	var errs []error
	vols := map[string]bool{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		vols[v.Name] = true
		if cm := v.ConfigMap; cm != nil && !configMaps[cm.Name] && (cm.Optional == nil || !*cm.Optional) {
			errs = append(errs, fmt.Errorf("%w: Deployment %q volume %q: ConfigMap %q is not in the file and not optional", ErrReference, d.Name, v.Name, cm.Name))
		}
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, m := range c.VolumeMounts {
			if !vols[m.Name] {
				errs = append(errs, fmt.Errorf("%w: Deployment %q container %q mounts undefined volume %q", ErrReference, d.Name, c.Name, m.Name))
			}
		}
	}
	return errs
}

// checkService checks that a Service selects pods of the file and that
// they declare its target ports.
func checkService(v *corev1.Service, pods []podPorts) []error {
	var errs []error
	matched := selectPods(labels.SelectorFromSet(v.Spec.Selector), pods)
	if len(v.Spec.Selector) == 0 || len(matched) == 0 {
		errs = append(errs, fmt.Errorf("%w: Service %q selects no pod of this file", ErrReference, v.Name))
	}
	for _, sp := range v.Spec.Ports {
		tp := sp.TargetPort
		if tp.Type == intstr.Int && tp.IntVal == 0 {
			tp = intstr.FromInt32(sp.Port)
		}
		for _, p := range matched {
			if !portDeclared(tp, p.ports, p.nums) {
				errs = append(errs, fmt.Errorf("%w: Service %q port %q: target %s not declared by Deployment %q", ErrReference, v.Name, sp.Name, tp.String(), p.name))
			}
		}
	}
	return errs
}

// selectPods returns the pods sel matches.
func selectPods(sel labels.Selector, pods []podPorts) []podPorts {
	var out []podPorts
	for _, p := range pods {
		if sel.Matches(p.labels) {
			out = append(out, p)
		}
	}
	return out
}

func portDeclared(p intstr.IntOrString, named map[string]int32, nums map[int32]bool) bool {
	if p.Type == intstr.String {
		_, ok := named[p.StrVal]
		return ok
	}
	return nums[p.IntVal]
}

// standardResource reports whether kube-apiserver accepts name in a
// container's requests or limits: a standard resource, hugepages, or an
// extended resource named with a domain.
func standardResource(name corev1.ResourceName) bool {
	switch name {
	case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
		return true
	}
	return strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) || strings.Contains(string(name), "/")
}
