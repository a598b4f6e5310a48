package lab

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// productRoot is the product module's directory: this module lives in
// its bench/ directory.
var productRoot = filepath.Join("..", "..", "..")

// TestCopiesMatchTheProduct: the files this module copies from the
// product's embedded defaults are the product's, byte for byte.
func TestCopiesMatchTheProduct(t *testing.T) {
	copies := map[string]string{
		"drive-schema.yaml":   "defaults/drive/schema.yaml",
		"allowall/authz.rego": "defaults/allowall/authz.rego",
		"allowall/envoy.rego": "defaults/allowall/envoy.rego",
	}
	for cp, orig := range copies {
		want, err := os.ReadFile(filepath.Join(productRoot, filepath.FromSlash(orig)))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.FromSlash(cp))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the product's %s: copy it again", cp, orig)
		}
	}
}
