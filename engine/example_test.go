package engine_test

import (
	"context"
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
