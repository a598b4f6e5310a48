package extauthz_test

// The generators of the adversarial test: random worlds and mutated
// requests, deterministic for a seed.

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// Name pools. They mix case variants ("acme"/"Acme", "bob"/"Bob"), IDs
// with every punctuation an ID may hold, and names shared by a folder and
// a file, so that a mix-up shows.
var (
	advTenantPool = []string{"acme", "globex", "initech", "umbrella", "Acme", "t-1"}
	advUserPool   = []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "o.neil", "x~y", "p+q", "s/t", "Bob", "a=b", "u|v"}
	advGroupPool  = []string{"eng", "ops", "sales", "all"}
	advFolderPool = []string{"root", "q1", "q2", "q3", "docs", "shared", "a.b", "x=y", "tmp", "Root", "1", ".."}
	advFilePool   = []string{"report.pdf", "plan.txt", "shared", "a~b", "Report.pdf", "x", "notes", "budget.xls", "root", "f+g", "1", "..."}
)

func advPick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

func advSample(rng *rand.Rand, pool []string, n int) []string {
	xs := slices.Clone(pool)
	rng.Shuffle(len(xs), func(i, j int) { xs[i], xs[j] = xs[j], xs[i] })
	return xs[:min(n, len(xs))]
}

// advGenWorld builds the world of seed: tenants, users with tenant roles,
// groups (nested, sometimes in a cycle), folders in parent chains
// (sometimes a cycle), files in folders, stored tenants for some
// resources and none for others, and direct grants to users and groups.
func advGenWorld(rules *advRules, seed uint64) *advWorld {
	rng := rand.New(rand.NewPCG(seed, 0x3e77))
	tenants := advSample(rng, advTenantPool, 2+rng.IntN(3))
	users := advSample(rng, advUserPool, 6+rng.IntN(4))
	groups := advSample(rng, advGroupPool, 1+rng.IntN(3))
	folders := advSample(rng, advFolderPool, 3+rng.IntN(6))
	files := advSample(rng, advFilePool, 4+rng.IntN(7))
	tt := rules.tenantType
	roles := make([]string, 0, len(rules.grants))
	for r := range rules.grants {
		roles = append(roles, r)
	}
	slices.Sort(roles)

	var tuples []advTuple
	seen := map[advTuple]bool{}
	add := func(objType, objID, rel string, sub advSubject) {
		t := advTuple{objType, objID, rel, sub}
		if !seen[t] {
			seen[t] = true
			tuples = append(tuples, t)
		}
	}
	user := func(u string) advSubject { return advSubject{typ: "user", id: u} }
	members := func(g string) advSubject { return advSubject{typ: "group", id: g, rel: "member"} }

	for _, u := range users {
		for _, t := range tenants {
			if rng.IntN(100) < 22 {
				add(tt, t, advPick(rng, roles), user(u))
				if rng.IntN(100) < 10 {
					add(tt, t, advPick(rng, roles), user(u))
				}
			}
		}
	}
	for _, g := range groups {
		for _, u := range advSample(rng, users, 1+rng.IntN(3)) {
			add("group", g, "member", user(u))
		}
		if len(groups) > 1 && rng.IntN(100) < 35 {
			if h := advPick(rng, groups); h != g {
				add("group", g, "member", members(h))
			}
		}
	}
	for i, f := range folders {
		if i > 0 && rng.IntN(100) < 80 {
			p := folders[i-1]
			if rng.IntN(100) < 40 {
				p = folders[rng.IntN(i)]
			}
			add("folder", f, "parent", advSubject{typ: "folder", id: p})
		}
	}
	if len(folders) > 1 && rng.IntN(100) < 10 {
		add("folder", folders[0], "parent", advSubject{typ: "folder", id: folders[len(folders)-1]})
	}
	for _, f := range files {
		if rng.IntN(100) < 80 {
			add("file", f, "parent", advSubject{typ: "folder", id: advPick(rng, folders)})
			if rng.IntN(100) < 5 {
				add("file", f, "parent", advSubject{typ: "folder", id: advPick(rng, folders)})
			}
		}
	}
	for _, r := range append(advTyped("folder", folders), advTyped("file", files)...) {
		// Most folders are in a tenant and half the files: the others
		// inherit their folder's (or are in none).
		if rng.IntN(100) < map[string]int{"folder": 95, "file": 50}[r[0]] {
			add(r[0], r[1], "tenant", advSubject{typ: tt, id: advPick(rng, tenants)})
			if rng.IntN(100) < 5 {
				add(r[0], r[1], "tenant", advSubject{typ: tt, id: advPick(rng, tenants)})
			}
		}
	}
	resources := append(advTyped("folder", folders), advTyped("file", files)...)
	for range 4 + rng.IntN(9) {
		r := advPick(rng, resources)
		rel := advPick(rng, []string{"owner", "editor", "viewer", "viewer"})
		sub := user(advPick(rng, users))
		if rel != "owner" && rng.IntN(100) < 30 {
			sub = members(advPick(rng, groups))
		}
		add(r[0], r[1], rel, sub)
	}
	w := newAdvWorld(rules, tuples)
	w.tenants, w.users, w.groups, w.folders, w.files = tenants, users, groups, folders, files
	return w
}

func advTyped(typ string, ids []string) [][2]string {
	out := make([][2]string, len(ids))
	for i, id := range ids {
		out[i] = [2]string{typ, id}
	}
	return out
}

// advGen generates the requests of one world.
type advGen struct {
	w     *advWorld
	rng   *rand.Rand
	notes []string
}

func (g *advGen) note(format string, args ...any) {
	g.notes = append(g.notes, fmt.Sprintf(format, args...))
}

func (g *advGen) pct(p int) bool { return g.rng.IntN(100) < p }

// advGenRequests generates n requests for w.
func advGenRequests(w *advWorld, seed uint64, n int) []*advReq {
	g := &advGen{w: w, rng: rand.New(rand.NewPCG(seed, 0x7e57))}
	total := 0
	for _, k := range advKinds {
		total += k.weight
	}
	reqs := make([]*advReq, 0, n)
	for len(reqs) < n {
		x := g.rng.IntN(total)
		kind := ""
		for _, k := range advKinds {
			if x < k.weight {
				kind = k.kind
				break
			}
			x -= k.weight
		}
		g.notes = g.notes[:0]
		var r *advReq
		switch kind {
		case "allowed", "authzen", "allowed-bulk", "authzen-batch":
			r = g.app(kind)
		default:
			r = g.proxied(kind)
		}
		r.kind = kind
		r.note = strings.Join(g.notes, ", ")
		reqs = append(reqs, r)
	}
	return reqs
}

// resource picks what a request is about: mostly a resource of the world,
// sometimes one that does not exist or exists with the other type.
func (g *advGen) resource() (typ, id string) {
	w := g.w
	switch x := g.rng.IntN(42); {
	case x < 19:
		return "file", advPick(g.rng, w.files)
	case x >= 40:
		// An ID the store does not hold: a case variant of one it does.
		typ, id := "file", advPick(g.rng, w.files)
		if x == 41 {
			typ, id = "folder", advPick(g.rng, w.folders)
		}
		g.note("a case variant of %s:%s", typ, id)
		if u := strings.ToUpper(id); u != id {
			return typ, u
		}
		return typ, strings.ToLower(id)
	case x < 36:
		return "folder", advPick(g.rng, w.folders)
	case x < 37:
		g.note("ghost resource")
		return advPick(g.rng, []string{"file", "folder"}), "ghost"
	case x < 38:
		g.note("a file's id as a folder")
		return "folder", advPick(g.rng, w.files)
	default:
		g.note("a folder's id as a file")
		return "file", advPick(g.rng, w.folders)
	}
}

// claim picks the tenant a request claims for typ:id: mostly its stored
// one, else another tenant, none, a case variant or an invalid one.
func (g *advGen) claim(typ, id string) string {
	stored := g.w.storedTenants(typ, id)
	switch x := g.rng.IntN(40); {
	case x < 20 && len(stored) > 0:
		return advPick(g.rng, stored)
	case x < 27:
		t := advPick(g.rng, g.w.tenants)
		if !slices.Contains(stored, t) {
			g.note("claims tenant %s", t)
		}
		return t
	case x < 34:
		return ""
	case x < 37:
		t := advPick(g.rng, g.w.tenants)
		g.note("claims a case variant of %s", t)
		if strings.ToLower(t) == t {
			return strings.ToUpper(t[:1]) + t[1:]
		}
		return strings.ToLower(t)
	default:
		g.note("claims an invalid tenant")
		return advPick(g.rng, []string{"a b", "acme,globex", "..", "acme%", "é", strings.Repeat("t", 257), "acme#x", "a@b"})
	}
}

// subject picks who asks: half the time someone the model lets through
// (so that the test is not all denials), else anyone.
func (g *advGen) subject(allowed func(user string) bool) string {
	if g.pct(55) {
		for _, i := range g.rng.Perm(len(g.w.users)) {
			if u := g.w.users[i]; allowed(u) {
				return u
			}
		}
	}
	if g.pct(10) {
		g.note("a stranger")
		return advPick(g.rng, []string{"mallory", "root", "admin"})
	}
	return advPick(g.rng, g.w.users)
}

var advMethods = map[string]string{"read": "GET", "write": "PUT", "delete": "DELETE"}

// proxied generates a request for a proxy: a route with its tenant in the
// path or in the x-tenant header, a subject in x-user or in a JWT, and
// mutations of each.
func (g *advGen) proxied(kind string) *advReq {
	r := &advReq{}
	grpcKind := strings.HasPrefix(kind, "grpc")
	typ, id := g.resource()
	action := advPick(g.rng, []string{"read", "read", "write", "delete"})
	claim := g.claim(typ, id)
	tenantInPath := g.pct(50)
	sendTenantHeader := !tenantInPath && claim != "" && g.pct(85)
	effClaim := claim
	if !tenantInPath && !sendTenantHeader {
		effClaim = ""
	}
	subject := g.subject(func(u string) bool {
		return g.w.decide(advCheck{subType: "user", subID: u, action: action, resType: typ, resID: id, tenant: effClaim}).allow
	})
	r.method = advMethods[action]
	if g.pct(12) {
		m := advPick(g.rng, []string{"get", "Get", "POST", "HEAD", "PATCH", "OPTIONS", "*", "GET", "PUT", "DELETE", ""})
		if m == "" && !grpcKind {
			m = "TRACE"
		}
		g.note("method %q", m)
		r.method = m
	}
	segs := []string{typ + "s", id}
	if tenantInPath {
		segs = []string{"tenants", claim, typ + "s", id}
	}
	r.path = g.mutatePath("/"+strings.Join(segs, "/"), kind)

	// The subject.
	var hdrs [][2]string
	header := func(v string) { hdrs = append(hdrs, [2]string{advTrustedHeader, v}) }
	other := advPick(g.rng, g.w.users)
	jwt := func(sub any) map[string]any {
		return map[string]any{"iss": "https://idp.example.com", "sub": sub, "aud": "drive"}
	}
	mode := g.rng.IntN(100)
	if !grpcKind && (mode >= 50 && mode < 70 || mode >= 96) {
		mode = 0 // no JWT reaches forward auth
	}
	if kind == "grpc-untrusted" && mode >= 70 && g.pct(50) {
		mode = 50 // mostly JWTs where no header is trusted
	}
	switch {
	case mode < 50:
		header(subject)
	case mode < 58:
		r.jwts = []map[string]any{jwt(subject)}
	case mode < 62:
		g.note("JWT and a different x-user")
		r.jwts = []map[string]any{jwt(subject)}
		header(other)
	case mode < 64:
		g.note("JWT without sub, and x-user")
		r.jwts = []map[string]any{{"iss": "https://idp.example.com", "aud": "drive"}}
		header(subject)
	case mode < 66:
		g.note("two JWTs, one subject")
		r.jwts = []map[string]any{jwt(subject), jwt(subject)}
	case mode < 68:
		g.note("two JWTs, two subjects")
		r.jwts = []map[string]any{jwt(subject), jwt(other)}
		if other == subject {
			r.jwts[1] = jwt("mallory")
		}
	case mode < 70:
		g.note("JWT with a bad sub")
		r.jwts = []map[string]any{jwt(advPick[any](g.rng, []any{"a b", 42.0, "", "bob,alice", true}))}
	case mode < 73:
		g.note("empty x-user")
		header("")
	case mode < 75:
		g.note("blank x-user")
		header(" ")
	case mode < 79:
		g.note("x-user twice")
		if grpcKind {
			header(subject + "," + other)
		} else {
			header(subject)
			header(other)
		}
	case mode < 81:
		g.note("x-user with a space")
		header(subject + " " + other)
	case mode < 84:
		g.note("padded x-user")
		header(" " + subject + "\t")
	case mode < 86:
		g.note("X-User")
		hdrs = append(hdrs, [2]string{"X-User", subject})
	case mode < 88:
		g.note("x-user in another case")
		header(strings.ToUpper(subject))
	case mode < 93:
		g.note("no subject")
	case mode < 96:
		g.note("other identity headers")
		hdrs = append(hdrs, [2]string{"x-forwarded-user", subject}, [2]string{"x-auth-request-user", subject}, [2]string{"authorization", "Bearer forged"})
	default:
		g.note("x-user and a JWT that agree")
		r.jwts = []map[string]any{jwt(subject)}
		header(subject)
	}
	// The tenant header.
	switch {
	case sendTenantHeader:
		v := claim
		switch x := g.rng.IntN(100); {
		case x < 4:
			g.note("padded x-tenant")
			v = " " + v
		case x < 8:
			g.note("x-tenant twice")
			v += "," + advPick(g.rng, g.w.tenants)
		case x < 11:
			g.note("X-Tenant")
			hdrs = append(hdrs, [2]string{"X-Tenant", v})
			v = ""
		}
		if v != "" {
			hdrs = append(hdrs, [2]string{g.w.rules.tenantHeader, v})
		}
	case tenantInPath && g.pct(20):
		t := advPick(g.rng, g.w.tenants)
		g.note("x-tenant %s besides the path's", t)
		hdrs = append(hdrs, [2]string{g.w.rules.tenantHeader, t})
	case !tenantInPath && g.pct(5):
		g.note("empty x-tenant")
		hdrs = append(hdrs, [2]string{g.w.rules.tenantHeader, ""})
	}
	// The client's own forwarding headers: nginx passes a client's
	// headers to its auth_request subrequest and only sets X-Original-*,
	// Caddy only sets X-Forwarded-*. nexus must decide on what the proxy
	// set, never on a copy the client made up for a request it may make.
	if (kind == "fwd-nginx" || kind == "fwd-caddy") && g.pct(10) {
		dm, dp := g.decoy(subject)
		if kind == "fwd-nginx" {
			g.note("client sends X-Forwarded-Uri %s %s", dm, dp)
			hdrs = append(hdrs, [2]string{"X-Forwarded-Method", dm}, [2]string{"X-Forwarded-Uri", dp})
		} else {
			g.note("client sends X-Original-URI %s %s", dm, dp)
			hdrs = append(hdrs, [2]string{"X-Original-Method", dm}, [2]string{"X-Original-URI", dp})
		}
	}
	g.rng.Shuffle(len(hdrs), func(i, j int) {
		// The order of repeated headers is kept.
		if hdrs[i][0] != hdrs[j][0] {
			hdrs[i], hdrs[j] = hdrs[j], hdrs[i]
		}
	})
	r.headers = hdrs
	return r
}

// decoy is a request subject may make (when there is one): its method
// and path.
func (g *advGen) decoy(subject string) (method, path string) {
	w := g.w
	res := append(advTyped("file", w.files), advTyped("folder", w.folders)...)
	for _, i := range g.rng.Perm(len(res)) {
		for _, action := range []string{"read", "write", "delete"} {
			typ, id := res[i][0], res[i][1]
			if w.decide(advCheck{subType: "user", subID: subject, action: action, resType: typ, resID: id}).allow {
				return advMethods[action], "/" + typ + "s/" + id
			}
		}
	}
	return "GET", "/files/" + advPick(g.rng, w.files)
}

// mutatePath applies none, one or two mutations to p.
func (g *advGen) mutatePath(p, kind string) string {
	if g.pct(45) {
		return p
	}
	for range 1 + g.rng.IntN(2) {
		p = g.mutateOnce(p, kind)
	}
	return p
}

func (g *advGen) mutateOnce(p, kind string) string {
	slashes := func() []int {
		var is []int
		for i := 1; i < len(p); i++ {
			if p[i] == '/' {
				is = append(is, i)
			}
		}
		return is
	}
	letters := func() []int {
		var is []int
		for i := 0; i < len(p); i++ {
			if c := p[i]; 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' {
				is = append(is, i)
			}
		}
		return is
	}
	q, _, _ := strings.Cut(p, "?")
	switch m := g.rng.IntN(21); m {
	case 0:
		g.note("leading //")
		return "/" + p
	case 1:
		if is := slashes(); len(is) > 0 {
			i := advPick(g.rng, is)
			g.note("inner //")
			return p[:i] + "/" + p[i:]
		}
	case 2:
		g.note("trailing /")
		return q + "/" + p[len(q):]
	case 3, 4:
		if is := slashes(); len(is) > 0 {
			i := advPick(g.rng, is)
			enc := advPick(g.rng, []string{"%2F", "%2f"})
			g.note("/ as %s", enc)
			return p[:i] + enc + p[i+1:]
		}
	case 5:
		if is := letters(); len(is) > 0 {
			i := advPick(g.rng, is)
			f := advPick(g.rng, []string{"%%%02X", "%%%02x"})
			g.note("a letter percent-encoded")
			return p[:i] + fmt.Sprintf(f, p[i]) + p[i+1:]
		}
	case 6:
		segs := strings.Split(q, "/")
		i := 1 + g.rng.IntN(len(segs)-1)
		dot := advPick(g.rng, []string{"..", ".", "%2e%2e", "%2E"})
		if g.pct(50) {
			g.note("segment replaced by %s", dot)
			segs[i] = dot
		} else {
			g.note("x/.. inserted")
			segs = slices.Insert(segs, i, advPick(g.rng, []string{"x", "files", "tenants"}), dot)
		}
		return strings.Join(segs, "/") + p[len(q):]
	case 7:
		segs := strings.Split(q, "/")
		i := 1 + g.rng.IntN(len(segs)-1)
		g.note("; in a segment")
		segs[i] += advPick(g.rng, []string{";x=1", ";", ";jsessionid=a"})
		return strings.Join(segs, "/") + p[len(q):]
	case 8:
		segs := strings.Split(q, "/")
		i := 1 + g.rng.IntN(len(segs)-1)
		g.note("a segment upper-cased")
		segs[i] = strings.ToUpper(segs[i])
		return strings.Join(segs, "/") + p[len(q):]
	case 9, 10:
		qs := advPick(g.rng, []string{"?a=1", "?a=1;b=2", "?x-user=alice", "?", "?a=%zz", "?tenant=acme&x-tenant=globex", "?a=1&a=2", "?a;b"})
		g.note("query %s", qs)
		return p + qs
	case 11:
		g.note("bad escape")
		return p + advPick(g.rng, []string{"%zz", "%", "%4"})
	case 12:
		g.note("NUL")
		return q + "%00" + p[len(q):]
	case 13:
		if is := slashes(); len(is) > 0 {
			i := advPick(g.rng, is)
			g.note("double-encoded /")
			return p[:i] + "%252F" + p[i+1:]
		}
	case 14:
		if kind != "fwd-envoy" {
			g.note("no leading /")
			return strings.TrimLeft(p, "/")
		}
	case 15:
		g.note("extra leading segment")
		return advPick(g.rng, []string{"/api", "/v1", "/tenants"}) + p
	case 16:
		g.note("non-ASCII")
		return q + "%C3%A9" + p[len(q):]
	case 17:
		g.note("encoded space")
		return q + "%20" + p[len(q):]
	case 18:
		if is := slashes(); len(is) > 0 {
			i := advPick(g.rng, is)
			g.note("/ as %%5C")
			return p[:i] + "%5C" + p[i+1:]
		}
	case 19:
		g.note("encoded ?")
		return q + "%3Fa=1" + p[len(q):]
	case 20:
		// url.Parse would take the first segment for a host.
		g.note("authority-like //host prefix")
		return "//" + advPick(g.rng, []string{"evil.example.com", "x", "tenants"}) + "/" + strings.TrimLeft(p, "/")
	}
	return p
}

// app generates an application request: /allowed or AuthZEN, one check
// or a batch.
func (g *advGen) app(kind string) *advReq {
	r := &advReq{}
	n := 1
	if kind == "allowed-bulk" || kind == "authzen-batch" {
		n = 2 + g.rng.IntN(3)
	}
	authzen := strings.HasPrefix(kind, "authzen")
	var bodies []map[string]any
	for range n {
		c, body, malformed := g.appCheck(authzen)
		r.checks = append(r.checks, advAppCheck{check: c, malformed: malformed})
		bodies = append(bodies, body)
	}
	var doc any = bodies[0]
	switch kind {
	case "allowed-bulk":
		if g.pct(50) {
			doc = bodies
		} else {
			doc = map[string]any{"checks": bodies}
		}
	case "authzen-batch":
		top := map[string]any{"subject": bodies[0]["subject"]}
		for _, b := range bodies {
			if g.pct(50) && fmt.Sprint(b["subject"]) == fmt.Sprint(top["subject"]) {
				delete(b, "subject") // the top-level subject is the default
			}
		}
		top["evaluations"] = bodies
		doc = top
	}
	js, err := json.Marshal(doc)
	if err != nil {
		panic(err)
	}
	r.body = string(js)
	return r
}

// appCheck generates one check, its JSON body (Permit or AuthZEN shape)
// and whether that body is malformed in a way the check does not show.
func (g *advGen) appCheck(authzen bool) (c advCheck, body map[string]any, malformed string) {
	w := g.w
	c.subType = "user"
	mark := len(g.notes)
	c.resType, c.resID = g.resource()
	c.action = advPick(g.rng, []string{"read", "read", "write", "delete", "view"})
	switch x := g.rng.IntN(100); {
	case x < 4:
		c.resType, c.resID, c.action = w.rules.tenantType, advPick(g.rng, w.tenants), "manage"
		g.notes = g.notes[:mark]
		g.note("tenant resource")
	case x < 6:
		c.resType, c.resID, c.action = "group", advPick(g.rng, w.groups), advPick(g.rng, []string{"member", "read"})
		g.notes = g.notes[:mark]
		g.note("group resource")
	case x < 7:
		c.resType = advPick(g.rng, []string{"widget", "File", "files"})
		g.notes = g.notes[:mark]
		g.note("unknown type")
	case x < 17:
		c.action = advPick(g.rng, []string{"manage", "owner", "parent", "tenant", "*", "READ", "x", "member", "editor", "viewer"})
		g.note("action %q", c.action)
	case x < 20:
		c.resID = ""
		g.note("no resource id")
	}
	c.tenant = g.claim(c.resType, c.resID)
	c.subID = g.subject(func(u string) bool {
		cc := c
		cc.subID = u
		return w.decide(cc).allow
	})
	switch x := g.rng.IntN(100); {
	case x < 3:
		g.note("invalid subject")
		c.subID = advPick(g.rng, []string{"a b", "a,b", "", "é", "bob#member", "user:bob"})
	case x < 6 && authzen:
		c.subType = advPick(g.rng, []string{"group", "User", "tenant", "", "folder", "widget"})
		g.note("subject type %q", c.subType)
	}
	var attrs map[string]any
	switch x := g.rng.IntN(100); {
	case x < 20:
		attrs = map[string]any{"locked": true}
	case x < 25:
		attrs = map[string]any{"locked": false}
	case x < 28:
		attrs = map[string]any{"locked": "true"}
	case x < 30:
		attrs = map[string]any{"locked": 1}
	case x < 32:
		attrs = map[string]any{"Locked": true}
	}
	if attrs != nil {
		g.note("attributes %v", attrs)
	}
	if !authzen {
		c.attrs = attrs
		body = map[string]any{"action": c.action}
		if g.pct(50) {
			body["user"] = c.subID
		} else {
			body["user"] = map[string]any{"key": c.subID}
		}
		if c.tenant == "" && attrs == nil && g.pct(40) {
			if c.resID == "" {
				body["resource"] = c.resType
			} else {
				body["resource"] = c.resType + ":" + c.resID
			}
			return c, body, ""
		}
		res := map[string]any{"type": c.resType, "key": c.resID}
		if c.tenant != "" {
			res["tenant"] = c.tenant
		}
		if attrs != nil {
			res["attributes"] = attrs
		}
		body["resource"] = res
		return c, body, ""
	}
	props := map[string]any{}
	for k, v := range attrs {
		props[k] = v
	}
	if c.tenant != "" {
		props["tenant"] = c.tenant
	}
	if g.pct(2) {
		g.note("tenant not a string")
		props["tenant"] = 7
		malformed = "properties.tenant is not a string"
	}
	res := map[string]any{"type": c.resType, "id": c.resID}
	if len(props) > 0 {
		res["properties"] = props
		c.attrs = props
	}
	body = map[string]any{
		"subject":  map[string]any{"type": c.subType, "id": c.subID},
		"action":   map[string]any{"name": c.action},
		"resource": res,
	}
	return c, body, malformed
}
