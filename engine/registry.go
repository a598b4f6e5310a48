package engine

import (
	"context"
	"fmt"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Fast-path builtin signatures. String arguments are read straight from the
// instance's memory without a copy: they are valid only during the call and
// must not be retained (copy them with strings.Clone to keep them).
type (
	// Predicate2 is a builtin of two strings returning a boolean.
	Predicate2 func(ctx context.Context, a, b string) (bool, error)
	// Predicate3 is a builtin of three strings returning a boolean, e.g.
	// nexus.check(object, permission, subject).
	Predicate3 func(ctx context.Context, a, b, c string) (bool, error)
	// StringList2 is a builtin of two strings returning strings, e.g.
	// nexus.roles(subject, tenant). It appends to dst (which it may reuse)
	// and returns the result; the strings need only stay valid until it
	// returns to the engine.
	StringList2 func(ctx context.Context, dst []string, a, b string) ([]string, error)
	// StringList3 is a builtin of three strings returning strings.
	StringList3 func(ctx context.Context, dst []string, a, b, c string) ([]string, error)
	// StringList4 is a builtin of four strings returning strings.
	StringList4 func(ctx context.Context, dst []string, a, b, c, d string) ([]string, error)
	// JSON2 is a builtin of two strings returning any value, written as
	// JSON: it appends the value to dst (which it may reuse) and returns
	// it; appending nothing makes the call undefined.
	JSON2 func(ctx context.Context, dst []byte, a, b string) ([]byte, error)
	// Values2 is a builtin of two values of any type, read in place in
	// the instance's memory, that writes its result through w as the
	// runtime's values: no JSON is written or parsed on either side.
	// Writing nothing makes the call undefined; a misuse of w (two
	// values, a collection left open) is an error, as is a returned one.
	Values2 func(ctx context.Context, w *ValueWriter, a, b Value) error
	// Generic is a builtin of any arguments as OPA terms. Returning a nil
	// term makes the call undefined.
	Generic func(ctx context.Context, args []*ast.Term) (*ast.Term, error)
)

type builtinKind uint8

const (
	kindPred2 builtinKind = iota + 1
	kindPred3
	kindList2
	kindList3
	kindList4
	kindJSON2
	kindValues2
	kindGeneric
	kindTopdown
)

type hostBuiltin struct {
	name    string
	kind    builtinKind
	arity   int
	pred2   Predicate2
	pred3   Predicate3
	list2   StringList2
	list3   StringList3
	list4   StringList4
	json2   JSON2
	values2 Values2
	generic Generic
}

// Registry holds host builtins by name. Errors returned by registered
// builtins abort the evaluation with CodeBuiltin (fail closed), unlike OPA's
// own builtins whose errors make the call undefined. It is safe for
// concurrent use; an engine reads it when a bundle is loaded.
type Registry struct {
	mu  sync.RWMutex
	fns map[string]*hostBuiltin
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{fns: map[string]*hostBuiltin{}}
}

// Register adds a builtin. fn is one of Predicate2, Predicate3,
// StringList2, StringList3, StringList4, JSON2, Values2 or Generic (or a
// func literal of one of those signatures); arity is only used for Generic and may be 0 otherwise.
func (r *Registry) Register(name string, arity int, fn any) error {
	hb := &hostBuiltin{name: name}
	switch f := fn.(type) {
	case Predicate2:
		hb.kind, hb.arity, hb.pred2 = kindPred2, 2, f
	case func(context.Context, string, string) (bool, error):
		hb.kind, hb.arity, hb.pred2 = kindPred2, 2, f
	case Predicate3:
		hb.kind, hb.arity, hb.pred3 = kindPred3, 3, f
	case func(context.Context, string, string, string) (bool, error):
		hb.kind, hb.arity, hb.pred3 = kindPred3, 3, f
	case StringList2:
		hb.kind, hb.arity, hb.list2 = kindList2, 2, f
	case func(context.Context, []string, string, string) ([]string, error):
		hb.kind, hb.arity, hb.list2 = kindList2, 2, f
	case StringList3:
		hb.kind, hb.arity, hb.list3 = kindList3, 3, f
	case func(context.Context, []string, string, string, string) ([]string, error):
		hb.kind, hb.arity, hb.list3 = kindList3, 3, f
	case StringList4:
		hb.kind, hb.arity, hb.list4 = kindList4, 4, f
	case func(context.Context, []string, string, string, string, string) ([]string, error):
		hb.kind, hb.arity, hb.list4 = kindList4, 4, f
	case JSON2:
		hb.kind, hb.arity, hb.json2 = kindJSON2, 2, f
	case func(context.Context, []byte, string, string) ([]byte, error):
		hb.kind, hb.arity, hb.json2 = kindJSON2, 2, f
	case Values2:
		hb.kind, hb.arity, hb.values2 = kindValues2, 2, f
	case func(context.Context, *ValueWriter, Value, Value) error:
		hb.kind, hb.arity, hb.values2 = kindValues2, 2, f
	case Generic:
		hb.kind, hb.arity, hb.generic = kindGeneric, arity, f
	case func(context.Context, []*ast.Term) (*ast.Term, error):
		hb.kind, hb.arity, hb.generic = kindGeneric, arity, f
	default:
		return fmt.Errorf("engine: builtin %s: unsupported function type %T", name, fn)
	}
	if name == "" {
		return fmt.Errorf("engine: builtin with empty name")
	}
	if hb.arity < 0 || hb.arity > 4 {
		return fmt.Errorf("engine: builtin %s: arity %d out of range 0..4 (OPA's Wasm ABI)", name, hb.arity)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.fns[name]; ok {
		return fmt.Errorf("%w: %s", ErrBuiltinExists, name)
	}
	r.fns[name] = hb
	return nil
}

// Names lists the registered builtins.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.fns))
	for n := range r.fns {
		out = append(out, n)
	}
	return out
}

func (r *Registry) lookup(name string) *hostBuiltin {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.fns[name]
}
