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
	networkingv1 "k8s.io/api/networking/v1"
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
	"AuthorizationPolicy":   func() proto.Message { return &securityv1beta1.AuthorizationPolicy{} },
	"RequestAuthentication": func() proto.Message { return &securityv1beta1.RequestAuthentication{} },
	"WasmPlugin":            func() proto.Message { return &extensionsv1alpha1.WasmPlugin{} },
	"ServiceEntry":          func() proto.Message { return &networkingv1alpha3.ServiceEntry{} },
}

// k8sKinds maps the Kubernetes kinds nexus ships to their types.
var k8sKinds = map[schema.GroupVersionKind]func() any{
	{Version: "v1", Kind: "Namespace"}:                                 func() any { return &corev1.Namespace{} },
	{Version: "v1", Kind: "ServiceAccount"}:                            func() any { return &corev1.ServiceAccount{} },
	{Version: "v1", Kind: "ConfigMap"}:                                 func() any { return &corev1.ConfigMap{} },
	{Version: "v1", Kind: "Service"}:                                   func() any { return &corev1.Service{} },
	{Version: "v1", Kind: "PersistentVolumeClaim"}:                     func() any { return &corev1.PersistentVolumeClaim{} },
	{Group: "apps", Version: "v1", Kind: "Deployment"}:                 func() any { return &appsv1.Deployment{} },
	{Group: "apps", Version: "v1", Kind: "StatefulSet"}:                func() any { return &appsv1.StatefulSet{} },
	{Group: "policy", Version: "v1", Kind: "PodDisruptionBudget"}:      func() any { return &policyv1.PodDisruptionBudget{} },
	{Group: "networking.k8s.io", Version: "v1", Kind: "NetworkPolicy"}: func() any { return &networkingv1.NetworkPolicy{} },
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

// Workload is a Deployment or a StatefulSet of a manifest file: what the
// checks need of either.
type Workload struct {
	Kind, Name, Namespace string
	Selector              *metav1.LabelSelector
	Template              *corev1.PodTemplateSpec
	// Replicas is spec.replicas (nil: 1).
	Replicas *int32
	// Claims are the StatefulSet's volumeClaimTemplates.
	Claims []corev1.PersistentVolumeClaim
	// Recreate is a Deployment's strategy Recreate.
	Recreate bool
}

// Workloads returns the Deployments and StatefulSets of objs.
func Workloads(objs []Object) []Workload {
	var out []Workload
	for _, o := range objs {
		switch d := o.Typed.(type) {
		case *appsv1.Deployment:
			out = append(out, Workload{Kind: "Deployment", Name: d.Name, Namespace: d.Namespace, Selector: d.Spec.Selector, Template: &d.Spec.Template,
				Replicas: d.Spec.Replicas, Recreate: d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType})
		case *appsv1.StatefulSet:
			out = append(out, Workload{Kind: "StatefulSet", Name: d.Name, Namespace: d.Namespace, Selector: d.Spec.Selector, Template: &d.Spec.Template,
				Replicas: d.Spec.Replicas, Claims: d.Spec.VolumeClaimTemplates})
		}
	}
	return out
}

// manifestReferences checks what kube-apiserver and kubelet would reject or
// silently mis-serve: workload selectors that do not match their pod
// labels, probes on ports no container declares, containers without
// resources or probes (nexus requires them), Services that select no pod of
// the file or target undeclared ports, PodDisruptionBudgets that select
// nothing, volumes naming ConfigMaps or Secrets neither defined in the file
// nor marked optional: false (created apart, as the file's comments say),
// mounts of volumes that do not exist.
// refPod is what the reference checks know of a workload's pods.
type refPod struct {
	name   string
	labels labels.Set
	ports  map[string]int32
	nums   map[int32]bool
}

func manifestReferences(objs []Object) error {
	var errs []error
	var pods []refPod
	configMaps := map[string]bool{}
	for _, o := range objs {
		if cm, ok := o.Typed.(*corev1.ConfigMap); ok {
			configMaps[cm.Name] = true
		}
	}
	for _, w := range Workloads(objs) {
		p, werrs := workloadReferences(w, configMaps)
		errs = append(errs, werrs...)
		if p != nil {
			pods = append(pods, *p)
		}
	}
	for _, o := range objs {
		errs = append(errs, objectReferences(o, pods)...)
	}
	return errors.Join(errs...)
}

// workloadReferences checks a workload's selector, claims, containers and
// volumes, and returns what other objects may refer to of its pods (nil
// when its selector is unusable).
func workloadReferences(w Workload, configMaps map[string]bool) (*refPod, []error) {
	var errs []error
	wname := w.Kind + " " + w.Name
	spec := &w.Template.Spec
	sel, err := metav1.LabelSelectorAsSelector(w.Selector)
	if err != nil || w.Selector == nil {
		return nil, []error{fmt.Errorf("%w: %s %q: selector: %v", ErrInvalid, w.Kind, w.Name, err)}
	}
	if !sel.Matches(labels.Set(w.Template.Labels)) {
		errs = append(errs, fmt.Errorf("%w: %s %q: selector does not match the pod template's labels", ErrInvalid, w.Kind, w.Name))
	}
	claims := map[string]bool{}
	for _, c := range w.Claims {
		claims[c.Name] = true
		errs = append(errs, claimErrors(wname+" claim template "+c.Name, &c)...)
	}
	p := &refPod{name: wname, labels: w.Template.Labels, ports: map[string]int32{}, nums: map[int32]bool{}}
	for _, c := range spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name != "" {
				p.ports[cp.Name] = cp.ContainerPort
			}
			p.nums[cp.ContainerPort] = true
		}
	}
	vols := map[string]bool{}
	for _, v := range spec.Volumes {
		vols[v.Name] = true
	}
	for name := range claims {
		vols[name] = true
	}
	for _, c := range spec.Containers {
		errs = append(errs, containerReferences(wname, c, p, vols)...)
	}
	for _, tsc := range spec.TopologySpreadConstraints {
		sel, err := metav1.LabelSelectorAsSelector(tsc.LabelSelector)
		if err != nil || tsc.LabelSelector == nil || !sel.Matches(labels.Set(w.Template.Labels)) {
			errs = append(errs, fmt.Errorf("%w: %s: a topology spread constraint does not select its own pods", ErrInvalid, wname))
		}
	}
	for _, v := range spec.Volumes {
		if cm := v.ConfigMap; cm != nil && !configMaps[cm.Name] && cm.Optional == nil {
			errs = append(errs, fmt.Errorf("%w: %s volume %q: ConfigMap %q is not in the file: mark it optional, or optional: false when it is created apart", ErrReference, wname, v.Name, cm.Name))
		}
		if sc := v.Secret; sc != nil && sc.Optional == nil {
			errs = append(errs, fmt.Errorf("%w: %s volume %q: Secret %q is not in the file: mark it optional, or optional: false when it is created apart", ErrReference, wname, v.Name, sc.SecretName))
		}
	}
	return p, errs
}

// containerReferences checks one container: nexus' probes and resources,
// resource names, and that its mounts name volumes of the pod.
func containerReferences(wname string, c corev1.Container, p *refPod, vols map[string]bool) []error {
	var errs []error
	if strings.HasPrefix(c.Name, "nexus") {
		if c.ReadinessProbe == nil || c.LivenessProbe == nil {
			errs = append(errs, fmt.Errorf("%w: %s container %q: readiness and liveness probes are required", ErrInvalid, wname, c.Name))
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			errs = append(errs, fmt.Errorf("%w: %s container %q: cpu and memory requests and a memory limit are required", ErrInvalid, wname, c.Name))
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
				errs = append(errs, fmt.Errorf("%w: %s container %q: probe port %s is not declared", ErrReference, wname, c.Name, port.String()))
			}
		}
	}
	for _, rl := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
		for name := range rl {
			if !standardResource(name) {
				errs = append(errs, fmt.Errorf("%w: %s container %q: resource %q is neither standard nor domain-qualified", ErrInvalid, wname, c.Name, name))
			}
		}
	}
	for _, m := range c.VolumeMounts {
		if !vols[m.Name] {
			errs = append(errs, fmt.Errorf("%w: %s container %q mounts undefined volume %q", ErrReference, wname, c.Name, m.Name))
		}
	}
	return errs
}

// objectReferences checks that a Service, disruption budget, network
// policy or claim refers to pods and ports that exist.
func objectReferences(o Object, pods []refPod) []error {
	var errs []error
	selects := func(sel labels.Selector) []refPod {
		var out []refPod
		for _, p := range pods {
			if sel.Matches(p.labels) {
				out = append(out, p)
			}
		}
		return out
	}
	switch v := o.Typed.(type) {
	case *corev1.Service:
		matched := selects(labels.SelectorFromSet(v.Spec.Selector))
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
					errs = append(errs, fmt.Errorf("%w: Service %q port %q: target %s not declared by %s", ErrReference, v.Name, sp.Name, tp.String(), p.name))
				}
			}
		}
	case *policyv1.PodDisruptionBudget:
		sel, err := metav1.LabelSelectorAsSelector(v.Spec.Selector)
		if err != nil || len(selects(sel)) == 0 {
			errs = append(errs, fmt.Errorf("%w: PodDisruptionBudget %q selects no pod of this file", ErrReference, v.Name))
		}
	case *networkingv1.NetworkPolicy:
		sel, err := metav1.LabelSelectorAsSelector(&v.Spec.PodSelector)
		if err != nil || len(selects(sel)) == 0 {
			errs = append(errs, fmt.Errorf("%w: NetworkPolicy %q selects no pod of this file", ErrReference, v.Name))
		}
	case *corev1.PersistentVolumeClaim:
		errs = append(errs, claimErrors("PersistentVolumeClaim "+v.Name, v)...)
	}
	return errs
}

// claimErrors checks a PersistentVolumeClaim as kube-apiserver does: access
// modes and a storage request, and only standard resource names.
func claimErrors(what string, c *corev1.PersistentVolumeClaim) []error {
	var errs []error
	if len(c.Spec.AccessModes) == 0 {
		errs = append(errs, fmt.Errorf("%w: %s: accessModes is required", ErrInvalid, what))
	}
	if c.Spec.Resources.Requests.Storage().IsZero() {
		errs = append(errs, fmt.Errorf("%w: %s: a storage request is required", ErrInvalid, what))
	}
	for name := range c.Spec.Resources.Requests {
		if name != corev1.ResourceStorage {
			errs = append(errs, fmt.Errorf("%w: %s: resource %q, want storage", ErrInvalid, what, name))
		}
	}
	return errs
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
