package pdp_test

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/pdp"
)

// TestPolicyDataCopiesOnce: adding the server's entries to a large
// data.json decodes only data.nexus; the rest is copied once, so the
// allocation stays near one copy of the document, not a decoded tree.
func TestPolicyDataCopiesOnce(t *testing.T) {
	var sb strings.Builder
	sb.WriteString(`{"big":[`)
	for i := range 2 << 20 {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"a":1}`)
	}
	sb.WriteString(`],"nexus":{"routes":[{"method":"GET","path":"/files/{id}","action":"read","type":"file"}]}}`)
	data := []byte(sb.String())
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	out, err := pdp.PolicyData(data, nil)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	n := after.TotalAlloc - before.TotalAlloc
	t.Logf("PolicyData of %d bytes allocated %d", len(data), n)
	if n > uint64(2*len(data)) {
		t.Fatalf("PolicyData of %d bytes allocated %d", len(data), n)
	}
	var doc struct {
		Big   []json.RawMessage `json:"big"`
		Nexus map[string]any    `json:"nexus"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Big) != 2<<20 || doc.Nexus["route_table"] == nil || !bytes.HasPrefix(out, []byte(`{"big":[{"a":1},`)) {
		t.Fatalf("PolicyData lost or reordered data: %d elements, nexus %v", len(doc.Big), doc.Nexus)
	}
}
