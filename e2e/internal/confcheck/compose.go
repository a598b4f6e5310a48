package confcheck

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Compose is the part of the Compose specification that nexus' compose file
// uses. Decoding is strict: a field outside it is an error, so a typo is
// caught, and a new field must be added here on purpose.
type Compose struct {
	Name     string                    `yaml:"name"`
	Services map[string]ComposeService `yaml:"services"`
	Volumes  map[string]*struct{}      `yaml:"volumes"`
	Secrets  map[string]ComposeSecret  `yaml:"secrets"`
	// Dir is the folder of the file (paths in it are relative to it).
	Dir string `yaml:"-"`
}

// ComposeSecret is a top-level secret, mounted at /run/secrets/NAME in the
// services that list it.
type ComposeSecret struct {
	// File is a file next to the Compose file.
	File string `yaml:"file"`
	// Environment is a variable of the environment Compose runs in.
	Environment string `yaml:"environment"`
}

// ComposeService is one service of a Compose file.
type ComposeService struct {
	Image       string            `yaml:"image"`
	Build       *ComposeBuild     `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	DependsOn   []string          `yaml:"depends_on"`
	Profiles    []string          `yaml:"profiles"`
	Secrets     []string          `yaml:"secrets"`
	Restart     string            `yaml:"restart"`
	ReadOnly    bool              `yaml:"read_only"`
	User        string            `yaml:"user"`
}

// ComposeBuild is a service's build section.
type ComposeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
	Target     string `yaml:"target"`
}

var interpolation = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// expand applies Compose interpolation with every variable unset, so
// ${VAR:-default} becomes default; a ${VAR} without default is an error.
func expand(s string) (string, error) {
	var err error
	out := interpolation.ReplaceAllStringFunc(s, func(m string) string {
		sub := interpolation.FindStringSubmatch(m)
		if sub[2] == "" {
			err = fmt.Errorf("%w: %s has no default", ErrReference, m)
		}
		return sub[3]
	})
	return out, err
}

// ComposeFile decodes the Compose file at path strictly and checks its
// references against the files next to it: bind-mounted files and folders
// exist, build contexts and Dockerfiles exist and name the build targets,
// named volumes and secrets are declared, secret files exist, depends_on
// names services, and an Envoy command's -c file is mounted into the
// container.
func ComposeFile(path string) (*Compose, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c Compose
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrUnknownField, path, err)
	}
	dir := filepath.Dir(path)
	c.Dir = dir
	var errs []error
	if len(c.Services) == 0 {
		errs = append(errs, fmt.Errorf("%w: no services", ErrInvalid))
	}
	for name, sc := range c.Secrets {
		switch {
		case (sc.File == "") == (sc.Environment == ""):
			errs = append(errs, fmt.Errorf("%w: secret %q: one of file and environment is required", ErrInvalid, name))
		case sc.File != "":
			if _, err := os.Stat(filepath.Join(dir, sc.File)); err != nil {
				errs = append(errs, fmt.Errorf("%w: secret %q: %w", ErrReference, name, err))
			}
		}
	}
	for name, s := range c.Services {
		if s.Image == "" && s.Build == nil {
			errs = append(errs, fmt.Errorf("%w: service %q: image or build is required", ErrInvalid, name))
		}
		if b := s.Build; b != nil {
			ctx := filepath.Join(dir, b.Context)
			df := b.Dockerfile
			if df == "" {
				df = "Dockerfile"
			}
			stages, err := dockerfileStages(filepath.Join(ctx, df))
			if err != nil {
				errs = append(errs, fmt.Errorf("%w: service %q: %w", ErrReference, name, err))
			} else if b.Target != "" && !stages[b.Target] {
				errs = append(errs, fmt.Errorf("%w: service %q: build target %q is not a stage of %s", ErrReference, name, b.Target, df))
			}
		}
		mounts := map[string]string{} // container path -> host path
		for _, v := range s.Volumes {
			v, err := expand(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("service %q: %w", name, err))
				continue
			}
			parts := strings.Split(v, ":")
			if len(parts) < 2 || len(parts) > 3 {
				errs = append(errs, fmt.Errorf("%w: service %q: volume %q", ErrInvalid, name, v))
				continue
			}
			src, dst := parts[0], parts[1]
			if len(parts) == 3 && parts[2] != "ro" && parts[2] != "rw" {
				errs = append(errs, fmt.Errorf("%w: service %q: volume %q: mode %q", ErrInvalid, name, v, parts[2]))
			}
			if strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
				host := src
				if !filepath.IsAbs(host) {
					host = filepath.Join(dir, src)
				}
				if _, err := os.Stat(host); err != nil {
					errs = append(errs, fmt.Errorf("%w: service %q mounts %s: %w", ErrReference, name, src, err))
				}
				mounts[dst] = host
			} else if _, ok := c.Volumes[src]; !ok {
				errs = append(errs, fmt.Errorf("%w: service %q: named volume %q is not declared", ErrReference, name, src))
			}
		}
		for _, sc := range s.Secrets {
			if _, ok := c.Secrets[sc]; !ok {
				errs = append(errs, fmt.Errorf("%w: service %q: secret %q is not declared", ErrReference, name, sc))
			}
		}
		for _, d := range s.DependsOn {
			if _, ok := c.Services[d]; !ok {
				errs = append(errs, fmt.Errorf("%w: service %q depends on unknown service %q", ErrReference, name, d))
			}
		}
		for i, arg := range s.Command {
			arg, err := expand(arg)
			if err != nil {
				errs = append(errs, fmt.Errorf("service %q: %w", name, err))
				continue
			}
			if arg == "-c" && i+1 < len(s.Command) && s.Build == nil {
				cfg, err := expand(s.Command[i+1])
				if err != nil {
					errs = append(errs, fmt.Errorf("service %q: %w", name, err))
					continue
				}
				if !mountedFile(cfg, mounts) {
					errs = append(errs, fmt.Errorf("%w: service %q: config %s is not mounted", ErrReference, name, cfg))
				}
			}
		}
		for _, p := range s.Ports {
			if !regexp.MustCompile(`^(127\.0\.0\.1:)?[0-9]{1,5}:[0-9]{1,5}$`).MatchString(p) {
				errs = append(errs, fmt.Errorf("%w: service %q: port %q (publish on 127.0.0.1 or as host:container)", ErrInvalid, name, p))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &c, nil
}

// mountedFile reports whether container path p is a mounted file or lies
// under a mounted folder, and exists on the host.
func mountedFile(p string, mounts map[string]string) bool {
	for dst, host := range mounts {
		if p == dst {
			return true
		}
		if rel, ok := strings.CutPrefix(p, strings.TrimSuffix(dst, "/")+"/"); ok {
			if _, err := os.Stat(filepath.Join(host, rel)); err == nil {
				return true
			}
		}
	}
	return false
}

// dockerfileStages returns the stage names of a Dockerfile (FROM ... AS name).
func dockerfileStages(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	stages := map[string]bool{}
	from := regexp.MustCompile(`(?i)^FROM\s+\S+(\s+AS\s+(\S+))?\s*$`)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := from.FindStringSubmatch(strings.TrimSpace(sc.Text())); m != nil && m[2] != "" {
			stages[m[2]] = true
		}
	}
	return stages, sc.Err()
}
