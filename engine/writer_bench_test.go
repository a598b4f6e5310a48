package engine

import (
	"syscall"
	"testing"
)

// envoyInput is an opa-envoy-plugin input document of the size a proxied
// request makes.
var envoyInput = []byte(`{"attributes":{"source":{"address":{"socketAddress":{"address":"10.1.2.3","portValue":40000}},"principal":"spiffe://cluster.local/ns/web/sa/frontend"},"destination":{"address":{"socketAddress":{"address":"10.1.2.4","portValue":8080}},"principal":"spiffe://cluster.local/ns/drive/sa/drive"},"request":{"http":{"id":"5b1d0c1e","method":"GET","headers":{":authority":"drive.example.com",":method":"GET",":path":"/tenants/acme/files/report.pdf",":scheme":"https","user-agent":"curl/8.0","x-forwarded-client-cert":"By=spiffe://cluster.local/ns/drive/sa/drive;Hash=0123;URI=spiffe://cluster.local/ns/web/sa/frontend","x-request-id":"5b1d0c1e-8c1f-4a6e-9d3a-1f2e3d4c5b6a","x-user":"alice"},"path":"/tenants/acme/files/report.pdf","host":"drive.example.com","scheme":"https","protocol":"HTTP/2"}}},"parsed_path":["tenants","acme","files","report.pdf"],"parsed_query":{},"parsed_body":null,"truncated_body":false,"version":{"encoding":"protojson","ext_authz":"v3"},"source_principal":"spiffe://cluster.local/ns/web/sa/frontend"}`)

// BenchmarkJSONValues is the Go side of an evaluation's input: JSON text
// read into the runtime's values in the arena, relocated for the heap.
func BenchmarkJSONValues(b *testing.B) {
	var a arena
	var w ValueWriter
	b.SetBytes(int64(len(envoyInput)))
	b.ReportAllocs()
	cpu0 := cpuNanos()
	for b.Loop() {
		a.reset()
		a.alloc(sizeCtx)
		w.reset(&a)
		p := jsonParser{w: &w, b: envoyInput}
		if err := p.document(); err != nil {
			b.Fatal(err)
		}
		if _, _, err := w.result(); err != nil {
			b.Fatal(err)
		}
		a.relocate(1 << 20)
	}
	b.ReportMetric(float64(cpuNanos()-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuNanos is the CPU time the process used so far: on a loaded machine
// it measures work where wall time measures waiting.
func cpuNanos() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
