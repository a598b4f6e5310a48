package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"strconv"
	"strings"
	"sync"

	"github.com/maypok86/otter/v2"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// jwtCacheWeight bounds the JWT cache: the estimated bytes its entries
// hold (jwtWeight), about 7,000 entries of 1 KiB tokens.
const jwtCacheWeight = 32 << 20

// jwtMaxToken is the longest token the cache keeps; a longer one is
// verified on every call.
const jwtMaxToken = 64 << 10

// jwtEntry is a token a JWT builtin found valid for one key and set of
// constraints. For io.jwt.decode_verify it holds the builtin's answer,
// [true, header, payload], answered again as it is (the same term), the
// payload's exp and nbf checked again at each use; for io.jwt.verify_*
// the entry alone says the signature verifies.
type jwtEntry struct {
	answer *ast.Term
	size   uint32 // the token's length, for the weight
}

// jwtInvalid is decode_verify's answer for a token no longer (or not
// yet) valid.
var jwtInvalid = ast.ArrayTerm(ast.InternedTerm(false), ast.InternedEmptyObject, ast.InternedEmptyObject)

// jwtKey is a SHA-256 of the builtin's name and of its arguments (the
// token, and the key or the constraints without "time"), each prefixed
// by its length: two calls share an entry only if their material is the
// same, short of a SHA-256 collision.
type jwtKey [sha256.Size]byte

var (
	jwtCacheOnce sync.Once
	jwtCache     *otter.Cache[jwtKey, jwtEntry]
)

func jwtWeight(_ jwtKey, e jwtEntry) uint32 { return 3*e.size + 512 }

func jwtCacheGet() *otter.Cache[jwtKey, jwtEntry] {
	jwtCacheOnce.Do(func() {
		jwtCache = otter.Must(&otter.Options[jwtKey, jwtEntry]{MaximumWeight: jwtCacheWeight, Weigher: jwtWeight})
	})
	return jwtCache
}

// jwtCached returns f, OPA's builtin name, wrapped in the process-wide
// cache of verified tokens if it is io.jwt.decode_verify or one of the
// io.jwt.verify_* builtins, else f itself.
//
// Only successes are cached: a token whose signature or constraints fail
// (a forged token, a wrong key) is verified again on every call, and so
// is any call that fails with an error. A cached decode_verify result is
// checked again against the evaluation's time (the constraints' "time",
// else the evaluation's clock) on every use, as OPA checks it: exp must
// be after it, nbf not after it; otherwise the answer is [false, {}, {}].
func jwtCached(name string, f topdown.BuiltinFunc) topdown.BuiltinFunc {
	switch {
	case !isJWTCached(name):
		return f
	case name == ast.JWTDecodeVerify.Name:
		return func(bctx topdown.BuiltinContext, ops []*ast.Term, iter func(*ast.Term) error) error {
			return decodeVerifyCached(bctx, ops, iter, f)
		}
	default:
		return func(bctx topdown.BuiltinContext, ops []*ast.Term, iter func(*ast.Term) error) error {
			return verifyCached(name, bctx, ops, iter, f)
		}
	}
}

// isJWTCached reports whether OPA's builtin name goes through the cache
// of verified tokens: io.jwt.decode_verify and the io.jwt.verify_*.
func isJWTCached(name string) bool {
	return name == ast.JWTDecodeVerify.Name || strings.HasPrefix(name, "io.jwt.verify_")
}

// jwtKeyMemo is an instance's memo of the keys (jwtKeyOf) of the calls
// it made, by the builtin and the arguments' terms: an instance hands
// OPA's builtins the same term for an argument of the same content
// (argCache), so a session's token and the policy's keys are hashed once,
// not on every check. Holding the terms, it keeps their addresses from
// being reused while they are keys; OPA's builtins never change their
// operands. It lives in the builtins' per-evaluation cache under
// jwtKeysEntry, put back at every evaluation, keeps only calls whose
// arguments argCache keeps, and starts again empty past jwtKeyMemoMax
// calls.
type jwtKeyMemo map[jwtKeyCall]jwtKey

type jwtKeyCall struct {
	name         string
	token, other *ast.Term
}

type jwtKeysEntry struct{}

const jwtKeyMemoMax = 64

// jwtKeyFor is jwtKeyOf(name, token, other) for the call with operands
// ops, from the instance's memo when bctx has one.
func jwtKeyFor(bctx topdown.BuiltinContext, name string, ops []*ast.Term, token ast.String, other ast.Value) (jwtKey, bool) {
	memo, _ := bctx.Cache[jwtKeysEntry{}].(jwtKeyMemo)
	call := jwtKeyCall{name, ops[0], ops[1]}
	if k, ok := memo[call]; ok {
		return k, true
	}
	k, ok := jwtKeyOf(name, token, other)
	// Arguments larger than argCache keeps are new terms on every call:
	// they would only fill the memo.
	if ok && memo != nil && len(token) <= argCacheMaxKey && withinSize(other, argCacheMaxKey) {
		if len(memo) >= jwtKeyMemoMax {
			clear(memo)
		}
		memo[call] = k
	}
	return k, ok
}

// jwtKeyOf hashes the builtin's name, the token and the other argument's
// material (the key, or the constraints but "time"), each value written
// with its type and length, so that two calls share a key only if their
// material is the same; false when the material holds something that is
// not a value.
func jwtKeyOf(name string, token ast.String, other ast.Value) (jwtKey, bool) {
	bp := jwtKeyBufs.Get().(*[]byte)
	b := binary.AppendUvarint((*bp)[:0], uint64(len(name)))
	b = append(b, name...)
	b, ok := appendValueKey(b, token)
	if obj, isObj := other.(ast.Object); isObj && name == ast.JWTDecodeVerify.Name {
		// The entries but "time", then a byte no value starts with.
		b = append(b, 'C')
		obj.Foreach(func(k, v *ast.Term) {
			if s, isStr := k.Value.(ast.String); ok && !(isStr && s == "time") {
				if b, ok = appendValueKey(b, k.Value); ok {
					b, ok = appendValueKey(b, v.Value)
				}
			}
		})
		b = append(b, '.')
	} else if ok {
		b, ok = appendValueKey(b, other)
	}
	var k jwtKey
	if ok {
		k = sha256.Sum256(b)
	}
	if cap(b) <= jwtKeyBufMax {
		*bp = b
		jwtKeyBufs.Put(bp)
	}
	return k, ok
}

// jwtKeyBufMax bounds the buffers jwtKeyOf keeps for the next key.
const jwtKeyBufMax = 2 * jwtMaxToken

var jwtKeyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// appendValueKey appends v with its type and length (an object's entries
// in key order); false for anything but a value.
func appendValueKey(b []byte, v ast.Value) ([]byte, bool) {
	ok := true
	switch x := v.(type) {
	case ast.Null:
		b = append(b, 'n')
	case ast.Boolean:
		if x {
			b = append(b, 't')
		} else {
			b = append(b, 'f')
		}
	case ast.Number:
		b = append(binary.AppendUvarint(append(b, 'N'), uint64(len(x))), x...)
	case ast.String:
		b = append(binary.AppendUvarint(append(b, 'S'), uint64(len(x))), x...)
	case *ast.Array:
		b = binary.AppendUvarint(append(b, 'A'), uint64(x.Len()))
		for i := 0; i < x.Len() && ok; i++ {
			b, ok = appendValueKey(b, x.Elem(i).Value)
		}
	case ast.Object:
		b = binary.AppendUvarint(append(b, 'O'), uint64(x.Len()))
		x.Foreach(func(k, e *ast.Term) {
			if ok {
				if b, ok = appendValueKey(b, k.Value); ok {
					b, ok = appendValueKey(b, e.Value)
				}
			}
		})
	case ast.Set:
		b = binary.AppendUvarint(append(b, 'E'), uint64(x.Len()))
		for i, es := 0, x.Sorted(); i < es.Len() && ok; i++ {
			b, ok = appendValueKey(b, es.Elem(i).Value)
		}
	default:
		return b, false
	}
	return b, ok
}

func verifyCached(name string, bctx topdown.BuiltinContext, ops []*ast.Term, iter func(*ast.Term) error, f topdown.BuiltinFunc) error {
	if len(ops) != 2 {
		return f(bctx, ops, iter)
	}
	token, ok1 := ops[0].Value.(ast.String)
	key, ok2 := ops[1].Value.(ast.String)
	if !ok1 || !ok2 || len(token) > jwtMaxToken {
		return f(bctx, ops, iter)
	}
	k, _ := jwtKeyFor(bctx, name, ops, token, key) // a string is a value
	c := jwtCacheGet()
	if _, ok := c.GetIfPresent(k); ok {
		return iter(ast.InternedTerm(true))
	}
	return f(bctx, ops, func(t *ast.Term) error {
		if b, ok := t.Value.(ast.Boolean); ok && bool(b) {
			c.Set(k, jwtEntry{size: uint32(len(token))})
		}
		return iter(t)
	})
}

func decodeVerifyCached(bctx topdown.BuiltinContext, ops []*ast.Term, iter func(*ast.Term) error, f topdown.BuiltinFunc) error {
	if len(ops) != 2 {
		return f(bctx, ops, iter)
	}
	token, ok1 := ops[0].Value.(ast.String)
	cons, ok2 := ops[1].Value.(ast.Object)
	if !ok1 || !ok2 || len(token) > jwtMaxToken {
		return f(bctx, ops, iter)
	}
	// The evaluation's time, as OPA reads it; anything it would refuse
	// goes to OPA's builtin for its error.
	timeVal := bctx.Time
	if t := cons.Get(ast.InternedTerm("time")); t != nil {
		timeVal = t
	}
	now, ok := jwtTime(timeVal)
	if !ok {
		return f(bctx, ops, iter)
	}
	k, ok := jwtKeyFor(bctx, ast.JWTDecodeVerify.Name, ops, token, cons)
	if !ok {
		return f(bctx, ops, iter)
	}
	c := jwtCacheGet()
	if e, ok := c.GetIfPresent(k); ok {
		if !jwtCurrent(e.answer.Value.(*ast.Array).Elem(2).Value.(ast.Object), now) {
			return iter(jwtInvalid)
		}
		return iter(e.answer)
	}
	return f(bctx, ops, func(t *ast.Term) error {
		if a, ok := t.Value.(*ast.Array); ok && a.Len() == 3 {
			if b, ok := a.Elem(0).Value.(ast.Boolean); ok && bool(b) {
				if _, ok := a.Elem(2).Value.(ast.Object); ok {
					c.Set(k, jwtEntry{answer: t, size: uint32(len(token))})
				}
			}
		}
		return iter(t)
	})
}

// jwtTime reads a time in nanoseconds as OPA's decode_verify does: a
// non-negative number.
func jwtTime(t *ast.Term) (float64, bool) {
	if t == nil {
		return 0, false
	}
	n, ok := t.Value.(ast.Number)
	if !ok {
		return 0, false
	}
	f, ok := n.Float64()
	if !ok || f < 0 {
		return 0, false
	}
	return f, true
}

// jwtCurrent checks a verified payload's exp and nbf against now (in
// nanoseconds) with OPA's comparisons: valid while now is before exp, and
// from nbf on. A payload cached was valid once, so both are numbers if
// present.
func jwtCurrent(payload ast.Object, now float64) bool {
	if exp := payload.Get(ast.InternedTerm("exp")); exp != nil {
		v, ok := exp.Value.(ast.Number)
		if !ok || compareSeconds(now/1e9, v) != -1 {
			return false
		}
	}
	if nbf := payload.Get(ast.InternedTerm("nbf")); nbf != nil {
		v, ok := nbf.Value.(ast.Number)
		if !ok || compareSeconds(now/1e9, v) == -1 {
			return false
		}
	}
	return true
}

// compareSeconds is ast.Compare(ast.FloatNumberTerm(x), v), OPA's exact
// comparison of the shortest decimal of x with v, without its big
// numbers when v is an integer a float64 holds exactly (as exp and nbf
// are): the decimal of x rounds to x, so it is on the same side of such
// an integer as x is, and equals it only when x does.
func compareSeconds(x float64, v ast.Number) int {
	const exact = 1 << 53
	if i, err := strconv.ParseInt(string(v), 10, 64); err == nil && i > -exact && i < exact && !math.IsNaN(x) && !math.IsInf(x, 0) {
		switch f := float64(i); {
		case x < f:
			return -1
		case x > f:
			return 1
		}
		return 0
	}
	return ast.Compare(ast.FloatNumberTerm(x), v)
}
