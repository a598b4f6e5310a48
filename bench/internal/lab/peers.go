package lab

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nexuspdp/nexus/api"
)

// The peers nexus is compared with, each loaded with the same data set
// and asked the same question: may this user do this action on this file,
// judged in this tenant?
//
//   - OPA: the tuples as one JSON document and a Rego policy that answers
//     with the drive schema's rules (tenant roles granting file actions;
//     owner, editor and viewer on the file or a folder above it), over
//     POST /v1/data/nexusbench/allow.
//   - OpenFGA: the drive schema as an authorization model and the tuples
//     written through its API (in-memory datastore), over
//     POST /stores/{id}/check. The tenant the request names is sent as a
//     contextual tuple (file#tenant@tenant:T), as nexus judges a file the
//     store assigns no tenant in the tenant the request names.

// Peer names.
const (
	PeerOPA     = "opa"
	PeerOpenFGA = "openfga"
)

// OPAPolicy is the Rego policy the OPA peer answers with.
//
//go:embed peers/nexusbench.rego
var OPAPolicy []byte

// openFGAModel is the drive schema as an OpenFGA authorization model in
// its JSON form.
//
//go:embed peers/openfga-model.json
var openFGAModel []byte

// relActions are the file and folder actions each relation grants on its
// object and on everything below it (the drive schema: read is write,
// viewer or parent->read; write is owner, editor or parent->write; delete
// is owner or parent->delete).
var relActions = map[string][]string{
	"viewer": {"read"},
	"editor": {"read", "write"},
	"owner":  {"read", "write", "delete"},
}

// readTuples parses the data set's tuples file.
func readTuples(dir string, fn func(api.Tuple) error) error {
	f, err := os.Open(filepath.Join(dir, TuplesFile))
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		t, err := api.ParseTuple(l)
		if err != nil {
			return fmt.Errorf("bench: %s line %d: %w", TuplesFile, n, err)
		}
		if err := fn(t); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

// OPAData converts the data set in dir into the data document of the OPA
// peer:
//
//	{"nexusbench": {
//	  "role_actions": {"admin": ["read", "write", "delete"], ...},
//	  "rel_actions":  {"viewer": ["read"], ...},
//	  "roles":     {"u1": {"t0": ["admin"]}},
//	  "parents":   {"file:f1": ["folder:d1-1"]},
//	  "relations": {"folder:d1-2": {"viewer": {"u7": true}}}}}
//
// Group memberships are left out: no permission of the drive schema reads
// them in the generated data (no group is granted anything).
func OPAData(dir string) ([]byte, error) {
	roles := map[string]map[string][]string{}
	parents := map[string][]string{}
	rels := map[string]map[string]map[string]bool{}
	err := readTuples(dir, func(t api.Tuple) error {
		obj := t.Object.Type + ":" + t.Object.ID
		switch {
		case t.Object.Type == "tenant" && roleActions[t.Relation] != nil && t.Subject.Type == "user" && t.Subject.Relation == "":
			if roles[t.Subject.ID] == nil {
				roles[t.Subject.ID] = map[string][]string{}
			}
			roles[t.Subject.ID][t.Object.ID] = append(roles[t.Subject.ID][t.Object.ID], t.Relation)
		case t.Relation == "parent" && t.Subject.Relation == "":
			parents[obj] = append(parents[obj], t.Subject.Type+":"+t.Subject.ID)
		case relActions[t.Relation] != nil:
			if t.Subject.Type != "user" || t.Subject.Relation != "" {
				return fmt.Errorf("%w: %s: the OPA conversion takes users only", ErrConfig, t)
			}
			if rels[obj] == nil {
				rels[obj] = map[string]map[string]bool{}
			}
			if rels[obj][t.Relation] == nil {
				rels[obj][t.Relation] = map[string]bool{}
			}
			rels[obj][t.Relation][t.Subject.ID] = true
		case t.Object.Type == "group" && t.Relation == "member":
		default:
			return fmt.Errorf("%w: %s: no OPA conversion for this tuple", ErrConfig, t)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// graph.reachable only reaches nodes that are keys of the graph: the
	// top folders get an empty list of parents.
	for _, ps := range parents {
		for _, q := range ps {
			if _, ok := parents[q]; !ok {
				parents[q] = []string{}
			}
		}
	}
	doc := map[string]any{"nexusbench": map[string]any{
		"role_actions": roleActions, "rel_actions": relActions,
		"roles": roles, "parents": parents, "relations": rels,
	}}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return b, nil
}

// fgaTuple is a tuple key of OpenFGA's API.
type fgaTuple struct {
	User     string `json:"user"`
	Relation string `json:"relation"`
	Object   string `json:"object"`
}

func fgaTupleOf(t api.Tuple) fgaTuple {
	user := t.Subject.Type + ":" + t.Subject.ID
	if t.Subject.Relation != "" {
		user += "#" + t.Subject.Relation
	}
	return fgaTuple{User: user, Relation: t.Relation, Object: t.Object.Type + ":" + t.Object.ID}
}

// fgaWriteBatch is the most tuples one OpenFGA write takes by default.
const fgaWriteBatch = 100

// OpenFGALoad creates a store on the OpenFGA server at baseURL, writes the
// authorization model and every tuple of the data set in dir, and returns
// the store and model IDs.
func OpenFGALoad(ctx context.Context, baseURL, dir string) (store, model string, err error) {
	var st struct {
		ID string `json:"id"`
	}
	if err := fgaCall(ctx, baseURL+"/stores", map[string]string{"name": "nexusbench"}, &st); err != nil {
		return "", "", err
	}
	var md struct {
		ID string `json:"authorization_model_id"`
	}
	if err := fgaCall(ctx, baseURL+"/stores/"+st.ID+"/authorization-models", json.RawMessage(openFGAModel), &md); err != nil {
		return "", "", err
	}
	var batch []fgaTuple
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		body := map[string]any{"writes": map[string]any{"tuple_keys": batch}, "authorization_model_id": md.ID}
		batch = batch[:0]
		return fgaCall(ctx, baseURL+"/stores/"+st.ID+"/write", body, nil)
	}
	err = readTuples(dir, func(t api.Tuple) error {
		batch = append(batch, fgaTupleOf(t))
		if len(batch) == fgaWriteBatch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	return st.ID, md.ID, err
}

// fgaCall posts body as JSON and decodes the answer into out (if set).
func fgaCall(ctx context.Context, url string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("bench: openfga: %w", err)
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("bench: openfga: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("bench: openfga: POST %s: %d: %s", url, resp.StatusCode, bytes.TrimSpace(rb))
	}
	if out != nil {
		if err := json.Unmarshal(rb, out); err != nil {
			return fmt.Errorf("bench: openfga: %w", err)
		}
	}
	return nil
}

// opaInput is the input document of the OPA peer for c.
func opaInput(c Check) map[string]any {
	return map[string]any{"input": map[string]string{"user": c.User, "action": c.Action, "type": c.Type, "id": c.ID, "tenant": c.Tenant}}
}

// fgaCheck is the OpenFGA check body for c.
func fgaCheck(c Check, model string) map[string]any {
	obj := c.Type + ":" + c.ID
	return map[string]any{
		"tuple_key":              fgaTuple{User: "user:" + c.User, Relation: c.Action, Object: obj},
		"contextual_tuples":      map[string]any{"tuple_keys": []fgaTuple{{User: "tenant:" + c.Tenant, Relation: "tenant", Object: obj}}},
		"authorization_model_id": model,
	}
}

// PeerProcess is a peer server started by StartPeer.
type PeerProcess struct {
	*Child
	// URL is the base URL of its HTTP API.
	URL string
}

// StartOPA runs `opa run --server` with the policy and the data document
// of the data set in dir (written into work) on addr.
func StartOPA(ctx context.Context, bin, dir, work, addr string, log io.Writer) (*PeerProcess, error) {
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	data, err := OPAData(dir)
	if err != nil {
		return nil, err
	}
	pol, dat := filepath.Join(work, "nexusbench.rego"), filepath.Join(work, "data.json")
	if err := os.WriteFile(pol, OPAPolicy, 0o644); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := os.WriteFile(dat, data, 0o644); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	c, err := StartChild(ctx, ChildConfig{
		Exe: bin, Args: []string{"run", "--server", "--addr", addr, "--log-level", "error", pol, dat},
		Log: log, Ready: "http://" + addr + "/health?bundles",
	})
	if err != nil {
		return nil, err
	}
	return &PeerProcess{Child: c, URL: "http://" + addr}, nil
}

// StartOpenFGA runs `openfga run` with the in-memory datastore on addr
// (HTTP) and grpcAddr, and loads the data set in dir.
func StartOpenFGA(ctx context.Context, bin, dir, addr, grpcAddr string, log io.Writer) (*PeerProcess, string, string, error) {
	c, err := StartChild(ctx, ChildConfig{
		Exe: bin, Args: []string{"run", "--datastore-engine", "memory", "--http-addr", addr, "--grpc-addr", grpcAddr,
			"--playground-enabled=false", "--log-level", "warn", "--metrics-enabled=false",
			// the default 3 s deadline cuts checks short on a loaded
			// machine; the load generator's own 5 s timeout applies
			"--request-timeout", "10s"},
		Log: log, Ready: "http://" + addr + "/healthz",
	})
	if err != nil {
		return nil, "", "", err
	}
	p := &PeerProcess{Child: c, URL: "http://" + addr}
	store, model, err := OpenFGALoad(ctx, p.URL, dir)
	if err != nil {
		_ = c.Stop(context.WithoutCancel(ctx))
		return nil, "", "", err
	}
	return p, store, model, nil
}

// readyWait is how long StartChild polls a ready URL by default.
const readyWait = 2 * time.Minute
