package confcheck

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// natsService is a NATS server of a Compose file, as its command line
// configures it.
type natsService struct {
	name        string
	clientPort  int
	clusterPort int
	routes      []string // host:port
	jetstream   bool
	storeOnVol  bool
}

// natsFlags reads a nats-server command line (--name value, -js, ...).
func natsFlags(args []string) map[string]string {
	flags := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := strings.TrimLeft(args[i], "-")
		if a == args[i] {
			continue
		}
		if name, v, ok := strings.Cut(a, "="); ok {
			flags[name] = v
			continue
		}
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			flags[a] = args[i+1]
			i++
			continue
		}
		flags[a] = ""
	}
	return flags
}

func hostPort(raw string) (string, int, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" || u.Port() == "" {
		return "", 0, fmt.Errorf("%q is not a URL with a host and a port", raw)
	}
	p, err := strconv.Atoi(u.Port())
	return u.Hostname(), p, err
}

// namedVolume returns the named volume a service mounts at dir (or a
// parent of it), or "".
func namedVolume(s ComposeService, dir string) string {
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || strings.ContainsAny(parts[0], "./$") {
			continue
		}
		if d := path.Clean(dir); d == path.Clean(parts[1]) || strings.HasPrefix(d, path.Clean(parts[1])+"/") {
			return parts[0]
		}
	}
	return ""
}

// mountedFile returns the host path (relative to the Compose file's
// folder) a service mounts at file, or "".
func mountSource(s ComposeService, file string) string {
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && strings.HasPrefix(parts[0], ".") && path.Clean(parts[1]) == path.Clean(file) {
			return parts[0]
		}
	}
	return ""
}

// ComposeCluster checks a Compose file of nexus replicas on a NATS
// cluster: the NATS servers run JetStream on a named volume and route to
// each other; every nexus serve --cluster service names every NATS server
// at its client port, all with one cluster name, each with its own data
// volume, and the stream replicas of its config file are at most the NATS
// servers; the admin listeners are closed (ComposeAdminClosed).
func ComposeCluster(c *Compose) error {
	var errs []error
	nats := map[string]*natsService{}
	for name, s := range c.Services {
		if !strings.HasPrefix(s.Image, "nats:") {
			continue
		}
		f := natsFlags(s.Command)
		n := &natsService{name: name, clientPort: 4222}
		if p, ok := f["port"]; ok {
			n.clientPort, _ = strconv.Atoi(p)
		} else if p, ok := f["p"]; ok {
			n.clientPort, _ = strconv.Atoi(p)
		}
		_, js1 := f["jetstream"]
		_, js2 := f["js"]
		n.jetstream = js1 || js2
		store := f["store_dir"]
		if store == "" {
			store = f["sd"]
		}
		n.storeOnVol = store != "" && namedVolume(s, store) != ""
		if cl := f["cluster"]; cl != "" {
			_, port, err := hostPort(cl)
			if err != nil {
				errs = append(errs, fmt.Errorf("%w: service %q: --cluster %w", ErrInvalid, name, err))
			}
			n.clusterPort = port
		}
		for _, r := range strings.Split(f["routes"], ",") {
			if r == "" {
				continue
			}
			h, p, err := hostPort(r)
			if err != nil {
				errs = append(errs, fmt.Errorf("%w: service %q: --routes %w", ErrInvalid, name, err))
				continue
			}
			n.routes = append(n.routes, h+":"+strconv.Itoa(p))
		}
		nats[name] = n
	}
	if len(nats) == 0 {
		errs = append(errs, fmt.Errorf("%w: no NATS service (image nats:...)", ErrInvalid))
	}
	for _, n := range nats {
		if !n.jetstream {
			errs = append(errs, fmt.Errorf("%w: NATS service %q runs without JetStream (--jetstream)", ErrInvalid, n.name))
		}
		if !n.storeOnVol {
			errs = append(errs, fmt.Errorf("%w: NATS service %q keeps JetStream's store (--store_dir) off a named volume: the log is lost with the container", ErrUnsafe, n.name))
		}
		for _, o := range nats {
			if o != n && len(nats) > 1 && !slices.Contains(n.routes, o.name+":"+strconv.Itoa(o.clusterPort)) {
				errs = append(errs, fmt.Errorf("%w: NATS service %q does not route to %q at its cluster port %d", ErrReference, n.name, o.name, o.clusterPort))
			}
		}
	}
	replicas := 0
	clusterNames := map[string]bool{}
	dataVolumes := map[string]string{}
	for name, s := range c.Services {
		flags, ok := ServeFlags(s.Command)
		if !ok {
			continue
		}
		urls := flags["cluster"]
		if urls == "" {
			errs = append(errs, fmt.Errorf("%w: service %q: nexus serve without --cluster beside a NATS cluster", ErrInvalid, name))
			continue
		}
		replicas++
		cn := flags["cluster-name"]
		if cn == "" {
			cn = "nexus"
		}
		clusterNames[cn] = true
		named := map[string]bool{}
		for _, u := range strings.Split(urls, ",") {
			h, p, err := hostPort(u)
			if err != nil {
				errs = append(errs, fmt.Errorf("%w: service %q: --cluster %w", ErrInvalid, name, err))
				continue
			}
			n, ok := nats[h]
			switch {
			case !ok:
				errs = append(errs, fmt.Errorf("%w: service %q: --cluster names %q, not a NATS service of the file", ErrReference, name, h))
			case p != n.clientPort:
				errs = append(errs, fmt.Errorf("%w: service %q: --cluster names %s:%d, but NATS service %q listens for clients on %d", ErrReference, name, h, p, h, n.clientPort))
			default:
				named[h] = true
			}
		}
		for n := range nats {
			if !named[n] {
				errs = append(errs, fmt.Errorf("%w: service %q: --cluster leaves out NATS service %q: without it the replica cannot fail over", ErrReference, name, n))
			}
		}
		dir := flags["data-dir"]
		vol := namedVolume(s, dir)
		switch {
		case dir == "" || vol == "":
			errs = append(errs, fmt.Errorf("%w: service %q: --data-dir %q is not on a named volume", ErrUnsafe, name, dir))
		case dataVolumes[vol] != "":
			errs = append(errs, fmt.Errorf("%w: services %q and %q share the data volume %q: each replica needs its own store", ErrUnsafe, name, dataVolumes[vol], vol))
		default:
			dataVolumes[vol] = name
		}
		if cfg := flags["config"]; cfg != "" {
			src := mountSource(s, cfg)
			if src == "" {
				errs = append(errs, fmt.Errorf("%w: service %q: --config %s is not mounted from a file", ErrReference, name, cfg))
				continue
			}
			data, err := os.ReadFile(filepath.Join(c.Dir, src))
			if err != nil {
				errs = append(errs, fmt.Errorf("%w: service %q: %w", ErrReference, name, err))
				continue
			}
			var conf struct {
				Cluster struct {
					StreamReplicas int `yaml:"stream_replicas"`
				} `yaml:"cluster"`
			}
			if err := yaml.Unmarshal(data, &conf); err != nil {
				errs = append(errs, fmt.Errorf("%w: %s: %w", ErrInvalid, src, err))
			} else if r := conf.Cluster.StreamReplicas; r > len(nats) {
				errs = append(errs, fmt.Errorf("%w: %s: stream_replicas %d, but only %d NATS servers", ErrInvalid, src, r, len(nats)))
			}
		}
	}
	if replicas < 2 {
		errs = append(errs, fmt.Errorf("%w: %d nexus replicas: a cluster has at least two", ErrInvalid, replicas))
	}
	if len(clusterNames) > 1 {
		errs = append(errs, fmt.Errorf("%w: the replicas name %d different clusters", ErrInvalid, len(clusterNames)))
	}
	if err := ComposeAdminClosed(c); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// HelmNATS is what a values file for the official NATS Helm chart, with
// the helm install line of its header, says of the NATS a nexus cluster
// keeps its log on.
type HelmNATS struct {
	Release, Namespace string
	// Port is the client port (config.nats.port; 4222 by default).
	Port int
	// Servers is config.cluster.replicas.
	Servers int
}

// Hosts are the names the client Service answers to.
func (h *HelmNATS) Hosts() []string {
	b := h.Release + "." + h.Namespace
	return []string{b, b + ".svc", b + ".svc.cluster.local"}
}

var helmInstall = regexp.MustCompile(`helm install (\S+) nats/nats (?:--namespace|-n) (\S+)`)

// NATSHelmValues reads the values file (strictly: a misspelt key is an
// error) and its helm install line, and checks that it runs a JetStream
// cluster of at least three servers that keeps the log on persistent
// volumes.
func NATSHelmValues(data []byte) (*HelmNATS, error) {
	m := helmInstall.FindSubmatch(data)
	if m == nil {
		return nil, fmt.Errorf("%w: no \"helm install RELEASE nats/nats --namespace NS\" line", ErrInvalid)
	}
	var v struct {
		Config struct {
			NATS *struct {
				Port int `yaml:"port"`
			} `yaml:"nats"`
			Cluster struct {
				Enabled  bool `yaml:"enabled"`
				Replicas int  `yaml:"replicas"`
			} `yaml:"cluster"`
			JetStream struct {
				Enabled   bool `yaml:"enabled"`
				FileStore struct {
					Enabled *bool `yaml:"enabled"`
					PVC     struct {
						Enabled *bool  `yaml:"enabled"`
						Size    string `yaml:"size"`
					} `yaml:"pvc"`
				} `yaml:"fileStore"`
			} `yaml:"jetstream"`
		} `yaml:"config"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnknownField, err)
	}
	h := &HelmNATS{Release: string(m[1]), Namespace: string(m[2]), Port: 4222, Servers: v.Config.Cluster.Replicas}
	if v.Config.NATS != nil && v.Config.NATS.Port != 0 {
		h.Port = v.Config.NATS.Port
	}
	var errs []error
	if !v.Config.Cluster.Enabled || v.Config.Cluster.Replicas < 3 {
		errs = append(errs, fmt.Errorf("%w: config.cluster: want enabled with at least 3 replicas (a JetStream quorum that survives losing one)", ErrInvalid))
	}
	fs := v.Config.JetStream.FileStore
	switch {
	case !v.Config.JetStream.Enabled:
		errs = append(errs, fmt.Errorf("%w: config.jetstream.enabled is not true: the cluster's log needs JetStream", ErrInvalid))
	case fs.Enabled != nil && !*fs.Enabled, fs.PVC.Enabled != nil && !*fs.PVC.Enabled:
		errs = append(errs, fmt.Errorf("%w: config.jetstream.fileStore: the log must be on persistent volumes", ErrUnsafe))
	case fs.PVC.Size == "":
		errs = append(errs, fmt.Errorf("%w: config.jetstream.fileStore.pvc.size is not set", ErrInvalid))
	}
	return h, errors.Join(errs...)
}

// KubeCluster checks the nexus serve --cluster containers of a manifest
// against the NATS of a Helm values file: every replica names the chart's
// client Service (in its namespace, on its port), all name one cluster,
// and the stream replicas of the config file they mount (a ConfigMap of
// the manifest) are at most the NATS servers.
func KubeCluster(objs []Object, nats *HelmNATS) error {
	var errs []error
	configMaps := map[string]map[string]string{}
	for _, o := range objs {
		if o.GVK.Kind == "ConfigMap" {
			data := map[string]string{}
			if d, ok := o.Raw["data"].(map[string]any); ok {
				for k, v := range d {
					data[k], _ = v.(string)
				}
			}
			configMaps[o.Name] = data
		}
	}
	names := map[string]bool{}
	found := 0
	for _, n := range nexusContainers(objs) {
		urls := n.flags["cluster"]
		if urls == "" {
			continue
		}
		found++
		cn := n.flags["cluster-name"]
		if cn == "" {
			cn = "nexus"
		}
		names[cn] = true
		for _, u := range strings.Split(urls, ",") {
			h, p, err := hostPort(u)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("%w: %s: --cluster %w", ErrInvalid, n, err))
			case !slices.Contains(nats.Hosts(), h) && !(h == nats.Release && n.w.Namespace == nats.Namespace):
				errs = append(errs, fmt.Errorf("%w: %s: --cluster names %q, not the NATS Service of release %q in namespace %q (%s)", ErrReference, n, h, nats.Release, nats.Namespace, nats.Hosts()[2]))
			case p != nats.Port:
				errs = append(errs, fmt.Errorf("%w: %s: --cluster port %d, but NATS listens for clients on %d", ErrReference, n, p, nats.Port))
			}
		}
		cfg := n.flags["config"]
		if cfg == "" {
			continue
		}
		var cm string
		for _, m := range n.c.VolumeMounts {
			if path.Dir(path.Clean(cfg)) == path.Clean(m.MountPath) {
				for _, v := range n.w.Template.Spec.Volumes {
					if v.Name == m.Name && v.ConfigMap != nil {
						cm = v.ConfigMap.Name
					}
				}
			}
		}
		data, ok := configMaps[cm][path.Base(cfg)]
		if !ok {
			errs = append(errs, fmt.Errorf("%w: %s: --config %s is not a key of a ConfigMap of this file", ErrReference, n, cfg))
			continue
		}
		var conf struct {
			Cluster struct {
				StreamReplicas int `yaml:"stream_replicas"`
			} `yaml:"cluster"`
		}
		if err := yaml.Unmarshal([]byte(data), &conf); err != nil {
			errs = append(errs, fmt.Errorf("%w: ConfigMap %s: %w", ErrInvalid, cm, err))
		} else if r := conf.Cluster.StreamReplicas; r > nats.Servers {
			errs = append(errs, fmt.Errorf("%w: ConfigMap %s: stream_replicas %d, but NATS runs %d servers", ErrInvalid, cm, r, nats.Servers))
		}
	}
	if found == 0 {
		errs = append(errs, fmt.Errorf("%w: no nexus serve --cluster container", ErrInvalid))
	}
	if len(names) > 1 {
		errs = append(errs, fmt.Errorf("%w: the replicas name %d different clusters", ErrInvalid, len(names)))
	}
	return errors.Join(errs...)
}
