package engine

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// hs256 signs claims (JSON) with secret.
func hs256(claims, secret string) string {
	enc := base64.RawURLEncoding
	signed := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + enc.EncodeToString([]byte(claims))
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(signed))
	return signed + "." + enc.EncodeToString(m.Sum(nil))
}

// countingBuiltin is OPA's builtin name, wrapped in the cache, over a
// count of the calls that reach OPA's builtin (the cache's misses).
func countingBuiltin(t *testing.T, name string) (topdown.BuiltinFunc, *int) {
	t.Helper()
	f := topdown.GetBuiltin(name)
	if f == nil {
		t.Fatalf("no builtin %s", name)
	}
	calls := new(int)
	return jwtCached(name, func(bctx topdown.BuiltinContext, ops []*ast.Term, iter func(*ast.Term) error) error {
		*calls++
		return f(bctx, ops, iter)
	}), calls
}

func callBuiltin(t *testing.T, f topdown.BuiltinFunc, now time.Time, args ...*ast.Term) *ast.Term {
	t.Helper()
	bctx := topdown.BuiltinContext{Time: ast.NumberTerm(jsonNumber(now.UnixNano()))}
	var out *ast.Term
	if err := f(bctx, args, func(r *ast.Term) error { out = r; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// uniqueSecret keeps the tests' entries apart in the process-wide cache.
func uniqueSecret(t *testing.T) string {
	return fmt.Sprintf("secret-%s-%d", t.Name(), time.Now().UnixNano())
}

// TestJWTCacheVerify: io.jwt.verify_hs256 verifies a token once per key;
// another key, or a forged token, is verified again, and a forged one is
// never cached.
func TestJWTCacheVerify(t *testing.T) {
	f, calls := countingBuiltin(t, "io.jwt.verify_hs256")
	secret := uniqueSecret(t)
	tok := hs256(`{"sub":"alice"}`, secret)
	now := time.Now()
	for i := range 3 {
		if got := callBuiltin(t, f, now, ast.StringTerm(tok), ast.StringTerm(secret)); got.String() != "true" {
			t.Fatalf("call %d: %v, want true", i, got)
		}
	}
	if *calls != 1 {
		t.Fatalf("OPA's builtin ran %d times for one token and key, want 1", *calls)
	}
	if got := callBuiltin(t, f, now, ast.StringTerm(tok), ast.StringTerm(secret+"x")); got.String() != "false" {
		t.Fatalf("another key: %v, want false", got)
	}
	if *calls != 2 {
		t.Fatalf("another key was a hit (%d calls)", *calls)
	}
	forged := tok[:strings.LastIndexByte(tok, '.')] + "." + base64.RawURLEncoding.EncodeToString(make([]byte, 32))
	for range 2 {
		if got := callBuiltin(t, f, now, ast.StringTerm(forged), ast.StringTerm(secret)); got.String() != "false" {
			t.Fatalf("forged token: %v, want false", got)
		}
	}
	if *calls != 4 {
		t.Fatalf("a forged token was a hit (%d calls, want 4)", *calls)
	}
}

// TestJWTCacheDecodeVerify: a repeated token costs one verification; a
// token cached while valid is refused once expired or before its nbf, by
// the constraint's time or the evaluation's clock; other constraints or
// keys are not hits; a forged token is never a hit.
func TestJWTCacheDecodeVerify(t *testing.T) {
	f, calls := countingBuiltin(t, ast.JWTDecodeVerify.Name)
	secret := uniqueSecret(t)
	now := time.Unix(1_800_000_000, 0)
	tok := hs256(fmt.Sprintf(`{"sub":"alice","iss":"me","nbf":%d,"exp":%d}`, now.Unix()-60, now.Unix()+60), secret)
	cons := func(kv ...string) *ast.Term {
		o := ast.NewObject(ast.Item(ast.StringTerm("secret"), ast.StringTerm(secret)))
		for i := 0; i < len(kv); i += 2 {
			o.Insert(ast.StringTerm(kv[i]), ast.MustParseTerm(kv[i+1]))
		}
		return ast.NewTerm(o)
	}
	valid := func(out *ast.Term) bool {
		return out.Value.(*ast.Array).Elem(0).String() == "true"
	}
	direct := topdown.GetBuiltin(ast.JWTDecodeVerify.Name)
	want := func(at time.Time, c *ast.Term) string {
		t.Helper()
		return callBuiltin(t, direct, at, ast.StringTerm(tok), c).String()
	}

	first := callBuiltin(t, f, now, ast.StringTerm(tok), cons())
	if !valid(first) || first.String() != want(now, cons()) {
		t.Fatalf("first call %v, want OPA's %s", first, want(now, cons()))
	}
	for range 3 {
		if got := callBuiltin(t, f, now.Add(time.Second), ast.StringTerm(tok), cons()); got.String() != first.String() {
			t.Fatalf("repeated call %v, want %v", got, first)
		}
	}
	if *calls != 1 {
		t.Fatalf("OPA's builtin ran %d times for one token, want 1", *calls)
	}

	// Hits, each checked against its own time: the evaluation's clock or
	// the constraint's.
	for _, tc := range []struct {
		name string
		at   time.Time
		c    *ast.Term
	}{
		{"expired-clock", now.Add(2 * time.Minute), cons()},
		{"expired-exactly", now.Add(60 * time.Second), cons()},
		{"not-yet-clock", now.Add(-2 * time.Minute), cons()},
		{"expired-constraint", now, cons("time", fmt.Sprint(now.Add(time.Hour).UnixNano()))},
		{"valid-constraint", now.Add(time.Hour), cons("time", fmt.Sprint(now.UnixNano()))},
		{"nbf-exactly", now.Add(-60 * time.Second), cons()},
	} {
		before := *calls
		got := callBuiltin(t, f, tc.at, ast.StringTerm(tok), tc.c)
		if w := want(tc.at, tc.c); got.String() != w {
			t.Fatalf("%s: %v, want OPA's %s", tc.name, got, w)
		}
		if *calls != before {
			t.Fatalf("%s: not a hit", tc.name)
		}
	}

	// Other material: misses, answered as OPA answers.
	for _, tc := range []struct {
		name string
		c    *ast.Term
	}{
		{"iss", cons("iss", `"me"`)},
		{"other-iss", cons("iss", `"you"`)},
		{"aud", cons("aud", `"x"`)},
		{"alg", cons("alg", `"HS256"`)},
		{"other-secret", ast.NewTerm(ast.NewObject(ast.Item(ast.StringTerm("secret"), ast.StringTerm(secret+"x"))))},
	} {
		before := *calls
		got := callBuiltin(t, f, now, ast.StringTerm(tok), tc.c)
		if w := want(now, tc.c); got.String() != w {
			t.Fatalf("%s: %v, want OPA's %s", tc.name, got, w)
		}
		if *calls != before+1 {
			t.Fatalf("%s: a hit for other constraints", tc.name)
		}
	}

	// A forged token (another payload, the old signature) is never a hit.
	forgedClaims := base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, `{"sub":"root","iss":"me","exp":%d}`, now.Unix()+60))
	parts := strings.Split(tok, ".")
	forged := parts[0] + "." + forgedClaims + "." + parts[2]
	for range 2 {
		before := *calls
		if got := callBuiltin(t, f, now, ast.StringTerm(forged), cons()); valid(got) || *calls != before+1 {
			t.Fatalf("forged token: %v (calls %d -> %d), want refused by OPA's builtin", got, before, *calls)
		}
	}
}

// TestJWTCacheExpiredWhenCached: a token that was never valid is not
// cached: it becomes valid later only through OPA's own check.
func TestJWTCacheExpiredWhenCached(t *testing.T) {
	f, calls := countingBuiltin(t, ast.JWTDecodeVerify.Name)
	secret := uniqueSecret(t)
	now := time.Unix(1_800_000_000, 0)
	tok := hs256(fmt.Sprintf(`{"nbf":%d}`, now.Unix()+60), secret)
	c := ast.NewTerm(ast.NewObject(ast.Item(ast.StringTerm("secret"), ast.StringTerm(secret))))
	if got := callBuiltin(t, f, now, ast.StringTerm(tok), c); got.Value.(*ast.Array).Elem(0).String() != "false" {
		t.Fatalf("before nbf: %v", got)
	}
	if got := callBuiltin(t, f, now.Add(2*time.Minute), ast.StringTerm(tok), c); got.Value.(*ast.Array).Elem(0).String() != "true" {
		t.Fatalf("after nbf: %v", got)
	}
	if *calls != 2 {
		t.Fatalf("calls = %d, want 2 (an invalid answer is not cached)", *calls)
	}
}

func BenchmarkJWTDecodeVerify(b *testing.B) {
	secret := "bench-secret"
	now := time.Unix(1_800_000_000, 0)
	tok := ast.StringTerm(hs256(fmt.Sprintf(`{"sub":"alice","iss":"me","exp":%d}`, now.Unix()+3600), secret))
	c := ast.NewTerm(ast.NewObject(ast.Item(ast.StringTerm("secret"), ast.StringTerm(secret)), ast.Item(ast.StringTerm("iss"), ast.StringTerm("me"))))
	bctx := topdown.BuiltinContext{Time: ast.NumberTerm(jsonNumber(now.UnixNano()))}
	direct := topdown.GetBuiltin(ast.JWTDecodeVerify.Name)
	for _, bc := range []struct {
		name string
		f    topdown.BuiltinFunc
	}{{"uncached", direct}, {"cached", jwtCached(ast.JWTDecodeVerify.Name, direct)}} {
		f := bc.f
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := f(bctx, []*ast.Term{tok, c}, func(*ast.Term) error { return nil }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestJWTCacheConcurrent: evaluations share a cached header and payload;
// reading them at once is safe (run with -race).
func TestJWTCacheConcurrent(t *testing.T) {
	f := jwtCached(ast.JWTDecodeVerify.Name, topdown.GetBuiltin(ast.JWTDecodeVerify.Name))
	secret := uniqueSecret(t)
	now := time.Unix(1_800_000_000, 0)
	tok := ast.StringTerm(hs256(fmt.Sprintf(`{"sub":"alice","roles":{"b":1,"a":[2,3]},"exp":%d}`, now.Unix()+60), secret))
	c := ast.NewTerm(ast.NewObject(ast.Item(ast.StringTerm("secret"), ast.StringTerm(secret))))
	want := callBuiltin(t, f, now, tok, c).String()
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			bctx := topdown.BuiltinContext{Time: ast.NumberTerm(jsonNumber(now.UnixNano()))}
			for range 200 {
				var got string
				if err := f(bctx, []*ast.Term{tok, c}, func(r *ast.Term) error {
					if _, err := ast.JSON(r.Value); err != nil {
						return err
					}
					got = r.String()
					return nil
				}); err != nil {
					errs <- err
					return
				}
				if got != want {
					errs <- fmt.Errorf("got %s, want %s", got, want)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestCompareSeconds holds the JWT cache's comparison of the time with
// exp and nbf to OPA's, ast.Compare(ast.FloatNumberTerm(x), v), over
// times and numbers around each other, integers and not.
func TestCompareSeconds(t *testing.T) {
	xs := []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 1e-9, 1700000000, 1700000000.000000001, 1700000000.5, 1699999999.9999998,
		1 << 52, 1<<53 - 1, 1 << 53, 1<<53 + 2, 1e300, -1e300, math.MaxFloat64, math.SmallestNonzeroFloat64}
	vs := []string{"0", "-0", "1", "-1", "1700000000", "1699999999", "1700000001", "1700000000.5", "1.7e9", "9007199254740991",
		"9007199254740992", "9007199254740993", "-9007199254740991", "9223372036854775807", "-9223372036854775808", "99999999999999999999", "0.0", "1e300", "+5"}
	check := func(x float64, v string) {
		t.Helper()
		want := ast.Compare(ast.FloatNumberTerm(x), ast.Number(v))
		if got := compareSeconds(x, ast.Number(v)); got != want {
			t.Fatalf("compare(%v, %s) = %d, OPA says %d", x, v, got, want)
		}
	}
	for _, x := range xs {
		for _, v := range vs {
			check(x, v)
		}
	}
	// Times next to an integer, and the integer's neighbours.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		base := float64(rng.Int64N(1 << 40))
		v := strconv.FormatInt(int64(base)+rng.Int64N(3)-1, 10)
		for _, x := range []float64{base, base + rng.Float64(), base - rng.Float64(), math.Nextafter(base, math.Inf(1)), math.Nextafter(base, math.Inf(-1))} {
			check(x, v)
		}
	}
}

// TestJWTKeyOf checks that two calls share a cache key only when their
// material is the same, whatever the evaluation's time.
func TestJWTKeyOf(t *testing.T) {
	dv := ast.JWTDecodeVerify.Name
	key := func(name, token, other string) jwtKey {
		t.Helper()
		k, ok := jwtKeyOf(name, ast.String(token), ast.MustParseTerm(other).Value)
		if !ok {
			t.Fatalf("%s %s %s: no key", name, token, other)
		}
		return k
	}
	same := [][2]jwtKey{
		{key(dv, "t", `{"cert": "k", "aud": "a"}`), key(dv, "t", `{"aud": "a", "cert": "k"}`)},
		{key(dv, "t", `{"cert": "k"}`), key(dv, "t", `{"cert": "k", "time": 5}`)},
		{key(dv, "t", `{"cert": {"keys": {1, 2}}}`), key(dv, "t", `{"cert": {"keys": {2, 1}}}`)},
	}
	for i, p := range same {
		if p[0] != p[1] {
			t.Errorf("same material %d: different keys", i)
		}
	}
	differ := [][2]jwtKey{
		{key("io.jwt.verify_hs256", "ab", `"c"`), key("io.jwt.verify_hs256", "a", `"bc"`)},
		{key("io.jwt.verify_hs256", "t", `"k"`), key("io.jwt.verify_hs512", "t", `"k"`)},
		{key(dv, "t", `{"cert": "k"}`), key(dv, "t", `{"secret": "k"}`)},
		{key(dv, "t", `{"cert": "k"}`), key(dv, "t", `{"cert": ["k"]}`)},
		{key(dv, "t", `{"aud": "1"}`), key(dv, "t", `{"aud": 1}`)},
		{key(dv, "t", `{"aud": null}`), key(dv, "t", `{"aud": false}`)},
		{key(dv, "t", `{"cert": "k"}`), key(dv, "t", `{"cert": "k", "iss": "i"}`)},
		{key(dv, "t", `{"cert": "k", "time": 5}`), key(dv, "t", `{"cert": "k", "time": 5, "x": 1}`)},
		{key(dv, "t", `{"a": ["b", "c"]}`), key(dv, "t", `{"a": ["bc"]}`)},
	}
	for i, p := range differ {
		if p[0] == p[1] {
			t.Errorf("different material %d: one key", i)
		}
	}
	if _, ok := jwtKeyOf(dv, "t", ast.MustParseTerm(`{"cert": x}`).Value); ok {
		t.Error("a variable in the constraints has a key")
	}
}

// TestJWTKeyMemo: an instance's memo answers a call's key by its
// builtin and argument terms with jwtKeyOf's key; another builtin or
// another term has its own; arguments too large for the argument cache
// are not kept, and the memo stays bounded.
func TestJWTKeyMemo(t *testing.T) {
	memo := make(jwtKeyMemo)
	bctx := topdown.BuiltinContext{Cache: map[any]any{jwtKeysEntry{}: memo}}
	dv := ast.JWTDecodeVerify.Name
	keyFor := func(name string, tok, other *ast.Term) jwtKey {
		t.Helper()
		k, ok := jwtKeyFor(bctx, name, []*ast.Term{tok, other}, tok.Value.(ast.String), other.Value)
		want, wok := jwtKeyOf(name, tok.Value.(ast.String), other.Value)
		if !ok || !wok || k != want {
			t.Fatalf("%s(%v, %v): key %x %v, jwtKeyOf %x %v", name, tok, other, k, ok, want, wok)
		}
		return k
	}
	tok, cons := ast.StringTerm("t"), ast.MustParseTerm(`{"cert": "k", "aud": "a"}`)
	k1 := keyFor(dv, tok, cons)
	if k2 := keyFor(dv, tok, cons); k2 != k1 || len(memo) != 1 {
		t.Fatalf("same call: %x then %x, memo of %d", k1, k2, len(memo))
	}
	if k := keyFor(dv, ast.StringTerm("u"), cons); k == k1 {
		t.Fatal("another token shares the key")
	}
	key := ast.StringTerm("k")
	if keyFor("io.jwt.verify_hs256", tok, key) == keyFor("io.jwt.verify_hs512", tok, key) {
		t.Fatal("two builtins share a key")
	}
	n := len(memo)
	keyFor(dv, ast.StringTerm(strings.Repeat("t", argCacheMaxKey+1)), cons)
	keyFor(dv, tok, ast.NewTerm(ast.NewObject(ast.Item(ast.StringTerm("cert"), ast.StringTerm(strings.Repeat("k", argCacheMaxKey+1))))))
	if len(memo) != n {
		t.Fatalf("large arguments kept: memo of %d, was %d", len(memo), n)
	}
	for i := range 2 * jwtKeyMemoMax {
		keyFor(dv, ast.StringTerm(strconv.Itoa(i)), cons)
		if len(memo) > jwtKeyMemoMax {
			t.Fatalf("memo of %d calls, bound %d", len(memo), jwtKeyMemoMax)
		}
	}
}

// TestImageMemo: a term gets an image the second time it is written,
// never when what was written is larger than imageMaxBytes (nor is such a
// term held), and both maps stay bounded.
func TestImageMemo(t *testing.T) {
	var m imageMemo
	small := arena{b: make([]byte, 64), base: 100}
	big := arena{b: make([]byte, imageMaxBytes+1)}
	x := ast.StringTerm("x")
	m.wrote(x, &small, 12)
	if m.images[x] != nil {
		t.Fatal("an image of a term written once")
	}
	m.wrote(x, &small, 12)
	if img := m.images[x]; img == nil || img.root != 12 || img.a.base != 100 || len(img.a.b) != 64 || &img.a.b[0] == &small.b[0] {
		t.Fatalf("the second writing kept %+v, want a copy of the block with its root", img)
	}
	y := ast.StringTerm("y")
	m.wrote(y, &big, 0)
	m.wrote(y, &big, 0)
	if _, held := m.seen[y]; held || m.images[y] != nil {
		t.Fatal("a term written larger than imageMaxBytes is held")
	}
	for i := range 3 * imageMaxEntries {
		z := ast.IntNumberTerm(i)
		m.wrote(z, &small, 0)
		m.wrote(z, &small, 0)
		if len(m.seen) > imageMaxEntries || len(m.images) > imageMaxEntries {
			t.Fatalf("%d seen, %d images; bound %d", len(m.seen), len(m.images), imageMaxEntries)
		}
	}
}
