package lab

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
)

// Check is one line of a gate file: a subject (a user), an action on a
// resource in a tenant, and the decision the data set implies.
//
//	{"user":"u12","action":"read","type":"file","id":"f33","tenant":"t0","allow":true}
type Check struct {
	User   string `json:"user"`
	Action string `json:"action"`
	Type   string `json:"type"`
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	Allow  bool   `json:"allow"`
	// N, in a workload file, is how often the check was drawn: the load
	// generator sends checks in proportion to N. Zero counts as one.
	N int `json:"n,omitempty"`
}

// Method is the HTTP method of the route rule for the check's action.
func (c Check) Method() string {
	switch c.Action {
	case "write":
		return "PUT"
	case "delete":
		return "DELETE"
	}
	return "GET"
}

// Path is the request path the default route rules map to the check:
// /tenants/{tenant}/files/{id}.
func (c Check) Path() string {
	return "/tenants/" + c.Tenant + "/" + c.Type + "s/" + c.ID
}

func (c Check) validate() error {
	switch {
	case c.User == "" || c.Action == "" || c.Type == "" || c.ID == "" || c.Tenant == "":
		return fmt.Errorf("user, action, type, id and tenant are required")
	case c.Action != "read" && c.Action != "write" && c.Action != "delete":
		return fmt.Errorf("action %q: want read, write or delete", c.Action)
	}
	return nil
}

// WriteChecks writes checks as NDJSON.
func WriteChecks(w io.Writer, checks []Check) error {
	enc := json.NewEncoder(w)
	for _, c := range checks {
		if err := enc.Encode(c); err != nil {
			return err
		}
	}
	return nil
}

// ReadChecks reads an NDJSON gate file.
func ReadChecks(r io.Reader) ([]Check, error) {
	var out []Check
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var c Check
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrGateFile, n, err)
		}
		if err := c.validate(); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrGateFile, n, err)
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrGateFile, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no checks", ErrGateFile)
	}
	return out, nil
}

// ReadChecksFile reads a gate file from disk.
func ReadChecksFile(path string) ([]Check, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer f.Close()
	cs, err := ReadChecks(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cs, nil
}

// gate builds the 1,000 checks of a profile, alternating allowed and
// denied ones, each decision known by construction:
//
//   - rbac: allowed when the user's role in the tenant grants the action
//     (admin: read, write, delete; editor: read, write; viewer: read);
//     denied for a tenant where the user holds no role, or an action its
//     role does not grant. RBAC users hold no relationships, so the ReBAC
//     fallback of the default policy denies too.
//   - rebacK: allowed for the holder of a viewer grant K levels above the
//     file (0: on the file); denied for a ReBAC user of another class,
//     who holds no grant anywhere on the file's chain. ReBAC users hold
//     no tenant roles.
func (g *gen) gate(profile string) []Check {
	var tag uint64
	for _, b := range []byte(profile) {
		tag = tag*131 + uint64(b)
	}
	rng := rand.New(rand.NewPCG(g.seed, tag))
	p := g.p
	randomFileIn := func(chain int) int { return chain + p.Chains*rng.IntN(g.filesIn(chain)) }
	randomChainIn := func(t int) int {
		n := (p.Chains - t + p.Tenants - 1) / p.Tenants
		return t + p.Tenants*rng.IntN(n)
	}
	out := make([]Check, 0, GateChecks)
	for i := range GateChecks {
		allow := i%2 == 0
		var c Check
		if profile == "rbac" {
			c = g.rbacCheck(rng, allow, i, randomChainIn, randomFileIn)
		} else {
			depth := int(profile[len(profile)-1] - '0')
			c = g.rebacCheck(rng, allow, depth, randomFileIn)
		}
		out = append(out, c)
	}
	return out
}

func (g *gen) rbacCheck(rng *rand.Rand, allow bool, i int, chainIn func(int) int, fileIn func(int) int) Check {
	p := g.p
	if allow {
		u, t, role := g.assignment(rng.IntN(p.RoleAssignments))
		acts := roleActions[role]
		f := fileIn(chainIn(t))
		return Check{User: userID(u), Action: acts[rng.IntN(len(acts))], Type: "file", ID: fileID(f), Tenant: tenantID(t), Allow: true}
	}
	if i%4 == 1 {
		// a tenant where the user holds no role
		u := rng.IntN(p.RBACUsers)
		roles := g.rolesOf(u)
		t := rng.IntN(p.Tenants)
		for roles[t] != "" {
			t = (t + 1) % p.Tenants
		}
		acts := roleActions["admin"]
		f := fileIn(chainIn(t))
		return Check{User: userID(u), Action: acts[rng.IntN(len(acts))], Type: "file", ID: fileID(f), Tenant: tenantID(t)}
	}
	// an action the user's role does not grant
	for {
		u, t, role := g.assignment(rng.IntN(p.RoleAssignments))
		var denied []string
		switch role {
		case "viewer":
			denied = []string{"write", "delete"}
		case "editor":
			denied = []string{"delete"}
		default:
			continue
		}
		f := fileIn(chainIn(t))
		return Check{User: userID(u), Action: denied[rng.IntN(len(denied))], Type: "file", ID: fileID(f), Tenant: tenantID(t)}
	}
}

func (g *gen) rebacCheck(rng *rand.Rand, allow bool, depth int, fileIn func(int) int) Check {
	p := g.p
	if allow {
		j := rng.IntN(p.Grants[depth])
		for k := range depth {
			j += p.Grants[k]
		}
		d, c, u, f := g.grant(j)
		if d != depth {
			panic("bench: grant depth mismatch")
		}
		if depth > 0 {
			f = fileIn(c)
		}
		return Check{User: userID(g.rebacUser(u)), Action: "read", Type: "file", ID: fileID(f), Tenant: tenantID(tenantOfChain(p, c)), Allow: true}
	}
	r := rng.IntN(g.nr)
	c := rng.IntN(p.Chains)
	for c%p.Classes == r%p.Classes {
		c = (c + 1) % p.Chains
	}
	f := fileIn(c)
	return Check{User: userID(g.rebacUser(r)), Action: "read", Type: "file", ID: fileID(f), Tenant: tenantID(tenantOfChain(p, c))}
}
