package bundle_test

import (
	"bytes"
	"fmt"

	"github.com/nexuspdp/nexus/bundle"
)

func Example() {
	b := &bundle.Bundle{
		Manifest: bundle.Manifest{
			Revision:    "v1",
			Roots:       []string{"nexus/authz"},
			Entrypoints: []string{"nexus/authz/allow"},
		},
		Wasm: []byte("\x00asm\x01\x00\x00\x00"), // the compiler writes the real module
		Data: []byte(`{"roles":{"bob":"admin"}}`),
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
	fmt.Println(back.Manifest.Revision, back.Manifest.Entrypoints, string(back.Data))
	// Output: v1 [nexus/authz/allow] {"roles":{"bob":"admin"}}
}

func ExampleManifest_InputPaths() {
	m := bundle.Manifest{Metadata: map[string]any{
		bundle.MetadataInputPaths: []any{
			[]any{"user"},
			[]any{"headers", map[string]any{"data": []any{"nexus", "subject_header"}}},
		},
	}}
	paths, known := m.InputPaths([]byte(`{"nexus":{"subject_header":"x-user"}}`))
	fmt.Println(paths, known)
	// Output: [[user] [headers x-user]] true
}
