package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/engine"
)

func Example() {
	ctx := context.Background()
	b, err := compiler.Compile(ctx, compiler.Options{
		Modules: map[string]string{"authz.rego": `package nexus.authz

default allow := false

allow if nexus.check(input.object, input.permission, input.subject)
`},
		Entrypoints: []string{"nexus/authz/allow"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	reg := engine.NewRegistry()
	_ = reg.Register("nexus.check", 0, engine.Predicate3(func(_ context.Context, object, permission, subject string) (bool, error) {
		return object == "doc:1" && permission == "read" && subject == "user:alice", nil
	}))
	e, err := engine.New(ctx, engine.Config{Builtins: reg})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close(ctx)
	if err := e.Load(ctx, b); err != nil {
		fmt.Println(err)
		return
	}
	buf := make([]byte, 0, 64)
	for _, subject := range []string{"user:alice", "user:bob"} {
		out, err := e.Eval(ctx, "nexus/authz/allow", []byte(`{"object":"doc:1","permission":"read","subject":"`+subject+`"}`), buf[:0])
		switch {
		case errors.Is(err, engine.ErrUndefined):
			fmt.Println(subject, "undefined")
		case err != nil:
			fmt.Println(subject, "error:", err)
		default:
			fmt.Println(subject, string(out))
		}
	}
	// Output:
	// user:alice true
	// user:bob false
}

// A server that writes the input document itself passes it as trusted:
// the engine does not scan its JSON again.
func ExampleEngine_EvalTrusted() {
	ctx := context.Background()
	b, err := compiler.Compile(ctx, compiler.Options{
		Modules:     map[string]string{"authz.rego": "package nexus.authz\n\nallow if input.user == data.owner\n"},
		Data:        map[string]any{"owner": "alice"},
		Entrypoints: []string{"nexus/authz/allow"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	e, err := engine.New(ctx, engine.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close(ctx)
	if err := e.Load(ctx, b); err != nil {
		fmt.Println(err)
		return
	}
	input, _ := json.Marshal(map[string]string{"user": "alice"}) // the server's own encoder
	out, err := e.EvalTrusted(ctx, "nexus/authz/allow", input, nil)
	fmt.Println(string(out), err)
	// Output: true <nil>
}

// nexus.roles-style builtins return strings; the engine reads their
// arguments from the instance's memory without copying.
func ExampleRegistry_Register() {
	ctx := context.Background()
	reg := engine.NewRegistry()
	err := reg.Register("nexus.roles", 0, engine.StringList2(func(_ context.Context, dst []string, subject, tenant string) ([]string, error) {
		if subject == "user:alice" && tenant == "acme" {
			dst = append(dst, "admin", "viewer")
		}
		return dst, nil
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := compiler.Compile(ctx, compiler.Options{
		Modules: map[string]string{"authz.rego": `package nexus.authz

default allow := false

allow if "admin" in nexus.roles(input.subject, input.tenant)
`},
		Entrypoints: []string{"nexus/authz/allow"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	e, err := engine.New(ctx, engine.Config{Builtins: reg})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close(ctx)
	if err := e.Load(ctx, b); err != nil {
		fmt.Println(err)
		return
	}
	for _, in := range []string{`{"subject":"user:alice","tenant":"acme"}`, `{"subject":"user:bob","tenant":"acme"}`} {
		out, err := e.Eval(ctx, "nexus/authz/allow", []byte(in), nil)
		fmt.Println(string(out), err)
	}
	// Output:
	// true <nil>
	// false <nil>
}

// Evaluations that do not complete deny with a stable code.
func ExampleEvalError() {
	ctx := context.Background()
	b, err := compiler.Compile(ctx, compiler.Options{
		Modules:     map[string]string{"authz.rego": "package nexus.authz\n\nallow if input.user == \"alice\"\n"},
		Entrypoints: []string{"nexus/authz/allow"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	e, err := engine.New(ctx, engine.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close(ctx)
	if err := e.Load(ctx, b); err != nil {
		fmt.Println(err)
		return
	}
	_, err = e.Eval(ctx, "nexus/authz/allow", []byte(`{"user":`), nil)
	var ee *engine.EvalError
	if errors.As(err, &ee) {
		fmt.Println(ee.Code, errors.Is(err, engine.ErrInvalidInput))
	}
	// Output: invalid_input true
}
