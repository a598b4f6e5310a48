package compiler_test

import (
	"bytes"
	"context"
	"fmt"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
)

func ExampleCompile() {
	b, err := compiler.Compile(context.Background(), compiler.Options{
		Modules:     map[string]string{"authz.rego": "package nexus.authz\n\ndefault allow := false\n\nallow if data.roles[input.user] == \"admin\"\n"},
		Data:        map[string]any{"roles": map[string]any{"bob": "admin"}},
		Entrypoints: []string{"nexus/authz/allow"},
		Revision:    "v1",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	var archive bytes.Buffer
	if err := b.Write(&archive); err != nil {
		fmt.Println(err)
		return
	}
	back, err := bundle.Read(&archive)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(back.Manifest.Revision, back.Manifest.Roots, back.Manifest.Entrypoints)
	// Output: v1 [nexus/authz roles] [nexus/authz/allow]
}

func ExampleErrors() {
	_, err := compiler.Compile(context.Background(), compiler.Options{
		Modules:     map[string]string{"bad.rego": "package p\n\nallow if {\n\tsha3(input.x)\n\tfoo.bar(1)\n}\n"},
		Entrypoints: []string{"p/allow"},
	})
	fmt.Println(err)
	// Output: bad.rego:5:2: unsupported builtins (neither OPA's Wasm runtime nor nexus provides them): foo.bar, sha3
}
