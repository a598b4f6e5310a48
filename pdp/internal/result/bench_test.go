package result

import "testing"

func BenchmarkParseObject(b *testing.B) {
	doc := []byte(`{"reason":"rebac","allowed":true,"headers":{"x-nexus-decision":"rebac","x-nexus-subject":"bob"}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(doc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseEnvoyObject(b *testing.B) {
	doc := []byte(`{"reason":"rebac","allowed":true,"headers":{"x-nexus-decision":"rebac","x-nexus-subject":"bob"}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseEnvoy(doc); err != nil {
			b.Fatal(err)
		}
	}
}
