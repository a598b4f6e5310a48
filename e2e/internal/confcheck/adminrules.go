package confcheck

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// DefaultAdminAddr is where nexus serve binds the admin listener unless
// --admin-addr says otherwise.
const DefaultAdminAddr = "127.0.0.1:8282"

// ServeFlags returns the flags of a `nexus serve` command line (the words
// after "serve"; --name=value and --name value both work; a flag without a
// value maps to ""), and whether args run nexus serve at all.
func ServeFlags(args []string) (map[string]string, bool) {
	i := 0
	for i < len(args) && args[i] != "serve" {
		i++
	}
	if i == len(args) {
		return nil, false
	}
	flags := map[string]string{}
	rest := args[i+1:]
	for j := 0; j < len(rest); j++ {
		a, ok := strings.CutPrefix(rest[j], "--")
		if !ok {
			continue
		}
		if name, v, ok := strings.Cut(a, "="); ok {
			flags[name] = v
			continue
		}
		if j+1 < len(rest) && !strings.HasPrefix(rest[j+1], "-") {
			flags[a] = rest[j+1]
			j++
			continue
		}
		flags[a] = ""
	}
	return flags, true
}

// Loopback reports whether a listen address (host:port) binds loopback
// only; an empty host binds every address, "-" disables the listener.
func Loopback(addr string) bool {
	if addr == "-" {
		return true
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// adminAddr returns the admin address of serve flags.
func adminAddr(flags map[string]string) string {
	if a, ok := flags["admin-addr"]; ok {
		return a
	}
	return DefaultAdminAddr
}

// adminPort returns the port of the admin listener of serve flags.
func adminPort(flags map[string]string) int32 {
	_, p, err := net.SplitHostPort(adminAddr(flags))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return int32(n)
}

// nexusContainer is a container of a workload that runs nexus serve.
type nexusContainer struct {
	w     Workload
	c     corev1.Container
	flags map[string]string
}

func (n nexusContainer) String() string {
	return fmt.Sprintf("%s %q container %q", n.w.Kind, n.w.Name, n.c.Name)
}

func nexusContainers(objs []Object) []nexusContainer {
	var out []nexusContainer
	for _, w := range Workloads(objs) {
		for _, c := range w.Template.Spec.Containers {
			if flags, ok := ServeFlags(append(append([]string{}, c.Command...), c.Args...)); ok {
				out = append(out, nexusContainer{w: w, c: c, flags: flags})
			}
		}
	}
	return out
}

// secretMounted reports whether file lies under a mount of a Secret volume
// (or a projected volume of Secrets only) of the pod.
func secretMounted(w Workload, c corev1.Container, file string) bool {
	secretVols := map[string]bool{}
	for _, v := range w.Template.Spec.Volumes {
		switch {
		case v.Secret != nil:
			secretVols[v.Name] = true
		case v.Projected != nil && len(v.Projected.Sources) > 0:
			all := true
			for _, s := range v.Projected.Sources {
				all = all && s.Secret != nil
			}
			secretVols[v.Name] = all
		}
	}
	for _, m := range c.VolumeMounts {
		if secretVols[m.Name] && strings.HasPrefix(path.Clean(file), strings.TrimSuffix(path.Clean(m.MountPath), "/")+"/") {
			return true
		}
	}
	return false
}

// AdminClosed checks that the admin API of every nexus serve container in
// objs (relationships, schema, policy: whoever reaches it rewrites them)
// is closed: a listener outside loopback has a token that comes from a
// Secret (--admin-token-file under a mounted Secret, or NEXUS_ADMIN_TOKEN
// from a secretKeyRef), never a literal in the manifest; and no Service
// publishes the admin port, unless that Service publishes nothing else and
// a NetworkPolicy admits traffic to the port only from named peers.
func AdminClosed(objs []Object) error {
	var errs []error
	adminPorts := map[*corev1.PodTemplateSpec]map[string]bool{} // pod -> admin ports by name and number
	for _, n := range nexusContainers(objs) {
		addr := adminAddr(n.flags)
		ports := adminPorts[n.w.Template]
		if ports == nil {
			ports = map[string]bool{}
			adminPorts[n.w.Template] = ports
		}
		num := adminPort(n.flags)
		ports[strconv.Itoa(int(num))] = true
		for _, cp := range n.c.Ports {
			if cp.ContainerPort == num && cp.Name != "" {
				ports[cp.Name] = true
			}
		}
		if _, ok := n.flags["admin-token"]; ok {
			errs = append(errs, fmt.Errorf("%w: %s: --admin-token puts the token in the manifest: use --admin-token-file with a mounted Secret", ErrUnsafe, n))
		}
		fromSecretEnv := false
		for _, e := range n.c.Env {
			if e.Name != "NEXUS_ADMIN_TOKEN" {
				continue
			}
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				fromSecretEnv = true
			} else {
				errs = append(errs, fmt.Errorf("%w: %s: NEXUS_ADMIN_TOKEN is not from a Secret (valueFrom.secretKeyRef)", ErrUnsafe, n))
			}
		}
		file, hasFile := n.flags["admin-token-file"]
		if hasFile && !secretMounted(n.w, n.c, file) {
			errs = append(errs, fmt.Errorf("%w: %s: --admin-token-file %s is not in a mounted Secret", ErrUnsafe, n, file))
		}
		if !Loopback(addr) && !(hasFile && secretMounted(n.w, n.c, file)) && !fromSecretEnv {
			errs = append(errs, fmt.Errorf("%w: %s: the admin listener %s is reachable from other pods without a token from a Secret", ErrUnsafe, n, addr))
		}
	}
	var policies []*networkingv1.NetworkPolicy
	for _, o := range objs {
		if np, ok := o.Typed.(*networkingv1.NetworkPolicy); ok {
			policies = append(policies, np)
		}
	}
	for _, o := range objs {
		svc, ok := o.Typed.(*corev1.Service)
		if !ok {
			continue
		}
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		for tmpl, ports := range adminPorts {
			if len(svc.Spec.Selector) == 0 || !sel.Matches(labels.Set(tmpl.Labels)) {
				continue
			}
			var admin, other []corev1.ServicePort
			for _, sp := range svc.Spec.Ports {
				tp := sp.TargetPort
				if tp.Type == intstr.Int && tp.IntVal == 0 {
					tp = intstr.FromInt32(sp.Port)
				}
				if ports[tp.String()] {
					admin = append(admin, sp)
				} else {
					other = append(other, sp)
				}
			}
			if len(admin) == 0 {
				continue
			}
			if len(other) > 0 {
				errs = append(errs, fmt.Errorf("%w: Service %q publishes the admin port next to the decision ports: every client of nexus reaches the admin API", ErrUnsafe, svc.Name))
				continue
			}
			for _, sp := range admin {
				if !restricted(policies, svc.Namespace, tmpl, sp.TargetPort, ports) {
					errs = append(errs, fmt.Errorf("%w: Service %q publishes the admin port %s and no NetworkPolicy limits who reaches it", ErrUnsafe, svc.Name, sp.TargetPort.String()))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// restricted reports whether a NetworkPolicy of namespace ns selects the
// pods of tmpl for ingress and admits traffic to the admin port only from
// listed peers: no rule that covers the port (or every port) admits
// everyone.
func restricted(policies []*networkingv1.NetworkPolicy, ns string, tmpl *corev1.PodTemplateSpec, target intstr.IntOrString, adminPorts map[string]bool) bool {
	for _, np := range policies {
		if np.Namespace != ns {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !sel.Matches(labels.Set(tmpl.Labels)) {
			continue
		}
		ingress := len(np.Spec.PolicyTypes) == 0
		for _, t := range np.Spec.PolicyTypes {
			ingress = ingress || t == networkingv1.PolicyTypeIngress
		}
		if !ingress {
			continue
		}
		open := false
		for _, r := range np.Spec.Ingress {
			covers := len(r.Ports) == 0
			for _, p := range r.Ports {
				covers = covers || p.Port == nil || adminPorts[p.Port.String()]
			}
			if covers && len(r.From) == 0 {
				open = true
			}
			for _, peer := range r.From {
				if covers && peer.IPBlock != nil && (peer.IPBlock.CIDR == "0.0.0.0/0" || peer.IPBlock.CIDR == "::/0") {
					open = true
				}
				if covers && peer.PodSelector == nil && peer.NamespaceSelector != nil && len(peer.NamespaceSelector.MatchLabels) == 0 && len(peer.NamespaceSelector.MatchExpressions) == 0 {
					open = true
				}
			}
		}
		if !open {
			return true
		}
	}
	return false
}

// NoDemoData checks that every nexus serve container loads its schema and
// policy (--schema, --policy): without them the first start writes the demo
// relationships and serves the demo policy.
func NoDemoData(objs []Object) error {
	var errs []error
	for _, n := range nexusContainers(objs) {
		for _, f := range []string{"schema", "policy"} {
			if n.flags[f] == "" {
				errs = append(errs, fmt.Errorf("%w: %s: no --%s: the first start writes the demo data and serves the demo policy", ErrUnsafe, n, f))
			}
		}
	}
	return errors.Join(errs...)
}

// OneStore checks that the relationships of every nexus serve container
// live in a store that survives a restart: --data-dir is on a
// PersistentVolumeClaim, and a Deployment holding a claim replaces its pod
// with strategy Recreate (a rolling update would wait for a second pod that
// cannot mount the claim). Without --cluster the workload runs one
// replica; with it (replicas kept in step through NATS) several, each with
// its own claim from the StatefulSet's volumeClaimTemplates.
func OneStore(objs []Object) error {
	var errs []error
	for _, n := range nexusContainers(objs) {
		clustered := n.flags["cluster"] != ""
		if r := n.w.Replicas; r != nil && *r != 1 && !clustered {
			errs = append(errs, fmt.Errorf("%w: %s: %d replicas, each with its own store: a write lands on one of them (run them as a cluster: --cluster)", ErrUnsafe, n, *r))
		}
		if clustered && n.w.Kind != "StatefulSet" {
			errs = append(errs, fmt.Errorf("%w: %s: cluster replicas in a %s: each needs its own store, from a StatefulSet's volumeClaimTemplates", ErrUnsafe, n, n.w.Kind))
		}
		dir := n.flags["data-dir"]
		if dir == "" {
			errs = append(errs, fmt.Errorf("%w: %s: no --data-dir", ErrUnsafe, n))
			continue
		}
		claims := map[string]bool{}
		for _, c := range n.w.Claims {
			claims[c.Name] = true
		}
		for _, v := range n.w.Template.Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				claims[v.Name] = true
			}
		}
		persistent := false
		for _, m := range n.c.VolumeMounts {
			if claims[m.Name] && (path.Clean(dir) == path.Clean(m.MountPath) || strings.HasPrefix(path.Clean(dir), path.Clean(m.MountPath)+"/")) {
				persistent = true
			}
		}
		if !persistent {
			errs = append(errs, fmt.Errorf("%w: %s: --data-dir %s is not on a PersistentVolumeClaim: the relationships are lost with the pod", ErrUnsafe, n, dir))
		}
		if n.w.Kind == "Deployment" && persistent && !n.w.Recreate {
			errs = append(errs, fmt.Errorf("%w: %s: a Deployment with a claim needs strategy Recreate", ErrUnsafe, n))
		}
	}
	return errors.Join(errs...)
}

// ComposeAdminClosed checks the nexus serve services of a Compose file: an
// admin listener outside loopback reads its token from a Compose secret
// (--admin-token-file /run/secrets/NAME, with NAME among the service's and
// the file's secrets), never from a literal flag or variable. A service
// built from a Dockerfile without a command of its own runs the stage's
// ENTRYPOINT and CMD.
func ComposeAdminClosed(c *Compose) error {
	var errs []error
	for name, s := range c.Services {
		cmd := s.Command
		if len(cmd) == 0 && s.Build != nil {
			df := s.Build.Dockerfile
			if df == "" {
				df = "Dockerfile"
			}
			data, err := os.ReadFile(filepath.Join(c.Dir, s.Build.Context, df))
			if err != nil {
				errs = append(errs, fmt.Errorf("%w: service %q: %w", ErrReference, name, err))
				continue
			}
			stages, err := DockerfileStages(data)
			if err != nil {
				errs = append(errs, fmt.Errorf("%w: service %q: %w", ErrInvalid, name, err))
				continue
			}
			for _, st := range stages {
				if st.Name == s.Build.Target || (s.Build.Target == "" && st.Name == stages[len(stages)-1].Name) {
					cmd = st.Command
				}
			}
		}
		flags, ok := ServeFlags(cmd)
		if !ok {
			continue
		}
		if _, ok := flags["admin-token"]; ok {
			errs = append(errs, fmt.Errorf("%w: service %q: --admin-token puts the token in the file: use --admin-token-file with a secret", ErrUnsafe, name))
		}
		if _, ok := s.Environment["NEXUS_ADMIN_TOKEN"]; ok {
			errs = append(errs, fmt.Errorf("%w: service %q: NEXUS_ADMIN_TOKEN in environment: use --admin-token-file with a secret", ErrUnsafe, name))
		}
		addr := adminAddr(flags)
		if Loopback(addr) {
			continue
		}
		file := flags["admin-token-file"]
		secret, ok := strings.CutPrefix(file, "/run/secrets/")
		listed := false
		for _, sc := range s.Secrets {
			listed = listed || sc == secret
		}
		_, declared := c.Secrets[secret]
		if !ok || !listed || !declared {
			errs = append(errs, fmt.Errorf("%w: service %q: the admin listener %s has no token from a Compose secret (--admin-token-file /run/secrets/NAME)", ErrUnsafe, name, addr))
		}
	}
	return errors.Join(errs...)
}

// DockerfileStage is one stage of a Dockerfile: its base image, name and
// final command line (ENTRYPOINT then CMD, exec form), its last USER and
// WORKDIR, and the destinations its COPY --chown lines give to an owner.
type DockerfileStage struct {
	From, Name    string
	Command       []string
	User, Workdir string
	Chowned       map[string]string // destination: the owner --chown names
}

// DockerfileStages parses the stages of a Dockerfile (FROM, ENTRYPOINT and
// CMD in exec form, USER, WORKDIR, COPY --chown; line continuations
// joined).
func DockerfileStages(data []byte) ([]DockerfileStage, error) {
	var stages []DockerfileStage
	var entry, cmd []string
	flush := func() {
		if len(stages) > 0 {
			stages[len(stages)-1].Command = append(append([]string{}, entry...), cmd...)
		}
	}
	from := regexp.MustCompile(`(?i)^FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?\s*$`)
	sc := bufio.NewScanner(bytes.NewReader(data))
	var line string
	for sc.Scan() {
		t := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(t, "#") {
			continue
		}
		if c, ok := strings.CutSuffix(t, "\\"); ok {
			line += c + " "
			continue
		}
		line += t
		t, line = strings.TrimSpace(line), ""
		if m := from.FindStringSubmatch(t); m != nil {
			flush()
			entry, cmd = nil, nil
			stages = append(stages, DockerfileStage{From: m[1], Name: m[2]})
			continue
		}
		kw, rest, _ := strings.Cut(t, " ")
		var v *[]string
		switch strings.ToUpper(kw) {
		case "USER", "WORKDIR", "COPY":
			if len(stages) == 0 {
				continue
			}
			st := &stages[len(stages)-1]
			switch f := strings.Fields(rest); strings.ToUpper(kw) {
			case "USER":
				st.User = strings.TrimSpace(rest)
			case "WORKDIR":
				st.Workdir = strings.TrimSpace(rest)
			default:
				for _, w := range f {
					if owner, ok := strings.CutPrefix(w, "--chown="); ok && len(f) > 0 {
						if st.Chowned == nil {
							st.Chowned = map[string]string{}
						}
						st.Chowned[f[len(f)-1]] = owner
					}
				}
			}
			continue
		case "ENTRYPOINT":
			v = &entry
		case "CMD":
			v = &cmd
		default:
			continue
		}
		var words []string
		if err := json.Unmarshal([]byte(strings.TrimSpace(rest)), &words); err != nil {
			words = strings.Fields(rest)
		}
		*v = words
	}
	flush()
	return stages, sc.Err()
}

// DockerfileWritableWorkdir checks that stage's working directory is a
// directory the stage copied with --chown to the user it runs as, so that
// a relative data directory (`nexus run`'s default ./nexus-data, as OPA's
// persistence directory is relative) can be created in the container.
func DockerfileWritableWorkdir(data []byte, stage string) error {
	stages, err := DockerfileStages(data)
	if err != nil {
		return err
	}
	for _, st := range stages {
		if st.Name != stage {
			continue
		}
		if st.Workdir == "" || st.User == "" {
			return fmt.Errorf("Dockerfile stage %q: no WORKDIR or USER: a relative data directory would be created in / as a user that cannot write there", stage)
		}
		owner, ok := st.Chowned[strings.TrimSuffix(st.Workdir, "/")]
		if !ok {
			owner, ok = st.Chowned[strings.TrimSuffix(st.Workdir, "/")+"/"]
		}
		if !ok || strings.Split(owner, ":")[0] != strings.Split(st.User, ":")[0] {
			return fmt.Errorf("Dockerfile stage %q: WORKDIR %s is not copied with --chown to its user %s: a relative data directory cannot be created there", stage, st.Workdir, st.User)
		}
		return nil
	}
	return fmt.Errorf("Dockerfile: no stage %q", stage)
}

// DockerfileAdminClosed checks that no stage of a Dockerfile runs nexus
// serve with its admin listener outside loopback and no token.
func DockerfileAdminClosed(data []byte) error {
	stages, err := DockerfileStages(data)
	if err != nil {
		return err
	}
	var errs []error
	for _, st := range stages {
		flags, ok := ServeFlags(st.Command)
		if !ok {
			continue
		}
		_, tokenFile := flags["admin-token-file"]
		if !Loopback(adminAddr(flags)) && !tokenFile {
			errs = append(errs, fmt.Errorf("%w: Dockerfile stage %q: nexus serve binds the admin listener to %s without a token: every container of the image starts open", ErrUnsafe, st.Name, adminAddr(flags)))
		}
	}
	return errors.Join(errs...)
}
