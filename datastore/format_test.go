package datastore

import (
	"bytes"
	"encoding/csv"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore/internal/index"
)

func TestParseLineCSV(t *testing.T) {
	tests := []struct {
		name, line, want string // want "" means an error
	}{
		{"plain", `folder:d1,viewer,user:alice`, "folder:d1#viewer@user:alice"},
		{"userset", `folder:d1,editor,group:eng#member`, "folder:d1#editor@group:eng#member"},
		{"spaces around fields", `folder:d1 , viewer ,  user:alice`, "folder:d1#viewer@user:alice"},
		{"quoted fields", `"folder:d1","viewer","user:alice"`, "folder:d1#viewer@user:alice"},
		{"quoted then spaces", `"folder:d1" ,viewer, "user:alice"`, "folder:d1#viewer@user:alice"},
		{"two fields", `folder:d1,viewer`, ""},
		{"four fields", `folder:d1,viewer,user:alice,x`, ""},
		{"comma inside quotes", `"folder:d1,x",viewer,user:alice`, ""},
		{"bad id", `folder:d 1,viewer,user:alice`, ""},
		{"open quote", `"folder:d1,viewer,user:alice`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseLine(FormatCSV, []byte(tt.line))
			if tt.want == "" {
				if err == nil {
					t.Fatalf("parseLine(%q) = %s, want an error", tt.line, got)
				}
				return
			}
			if err != nil || got.String() != tt.want {
				t.Fatalf("parseLine(%q) = %s, %v, want %s", tt.line, got, err, tt.want)
			}
		})
	}
}

// csvStd parses one CSV line with encoding/csv, reusing one reader: the
// alternative BenchmarkParseLineCSV measures parseLine against.
type csvStd struct {
	src bytes.Reader
	r   *csv.Reader
}

func newCSVStd() *csvStd {
	c := &csvStd{}
	c.r = csv.NewReader(&c.src)
	c.r.FieldsPerRecord = 3
	c.r.ReuseRecord = true
	c.r.TrimLeadingSpace = true
	return c
}

func (c *csvStd) parse(line []byte) (api.Tuple, error) {
	c.src.Reset(line)
	rec, err := c.r.Read()
	if err != nil {
		return api.Tuple{}, err
	}
	return tupleFromParts(strings.TrimSpace(rec[0]), strings.TrimSpace(rec[1]), strings.TrimSpace(rec[2]))
}

// BenchmarkParseLineCSV compares the import's CSV line parser with
// encoding/csv on the lines Export writes.
func BenchmarkParseLineCSV(b *testing.B) {
	lines := [][]byte{
		[]byte("folder:d12345,viewer,user:u6789"),
		[]byte("file:f424242,parent,folder:d1717"),
		[]byte("folder:d99,editor,group:g42#member"),
	}
	b.Run("split", func(b *testing.B) {
		b.ReportAllocs()
		cpu := cpuTime()
		for i := 0; b.Loop(); i++ {
			if _, err := parseLine(FormatCSV, lines[i%len(lines)]); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
	})
	b.Run("encoding-csv", func(b *testing.B) {
		c := newCSVStd()
		b.ReportAllocs()
		cpu := cpuTime()
		for i := 0; b.Loop(); i++ {
			if _, err := c.parse(lines[i%len(lines)]); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
	})
}

// FuzzDecodeChangeSet: a changelog value that does not decode is an
// error, never a panic.
func FuzzDecodeChangeSet(f *testing.F) {
	f.Add([]byte{1, 'a', 0, 2, 0, 3, 'b'})
	f.Add([]byte{0xff, 0xff})
	f.Fuzz(func(t *testing.T, v []byte) {
		_, _ = decodeChangeSet(&index.Dict{Numbers: map[string]uint64{}, Names: []string{""}}, 1, v)
	})
}
