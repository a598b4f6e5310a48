package schemaconv_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/schemaconv"
)

func TestReadOpenFGATuples(t *testing.T) {
	want := "folder:product#owner@user:anne line 2\nfolder:product-2021#parent@folder:product line 3\nfolder:product-2021#viewer@team:fga#member line 4\n"
	tests := []struct {
		name   string
		format schemaconv.TupleFormat
		src    string
		want   string
	}{
		{"jsonl", schemaconv.TuplesJSONL, "\n" +
			`{"user":"user:anne","relation":"owner","object":"folder:product"}` + "\n" +
			`{"user":"folder:product","relation":"parent","object":"folder:product-2021"}` + "\n" +
			`{"user":"team:fga#member","relation":"viewer","object":"folder:product-2021"}` + "\n", want},
		{"csv", schemaconv.TuplesCSV, "user_type,user_id,user_relation,relation,object_type,object_id,condition_name,condition_context\n" +
			"user,anne,,owner,folder,product,,\nfolder,product,,parent,folder,product-2021,,\nteam,fga,member,viewer,folder,product-2021,,\n", want},
		{"json array", schemaconv.TuplesDocument, "[\n" +
			`{"user":"user:anne","relation":"owner","object":"folder:product"},` + "\n" +
			`{"user":"folder:product","relation":"parent","object":"folder:product-2021"},` + "\n" +
			`	{"user":"team:fga#member","relation":"viewer","object":"folder:product-2021"}` + "\n]\n", want},
		{"yaml", schemaconv.TuplesDocument, "# tuples\n- user: user:anne\n  relation: owner\n  object: folder:product\n" +
			"- {user: \"folder:product\", relation: parent, object: \"folder:product-2021\"}\n" +
			"- {user: \"team:fga#member\", relation: viewer, object: \"folder:product-2021\"}\n",
			"folder:product#owner@user:anne line 2\nfolder:product-2021#parent@folder:product line 5\nfolder:product-2021#viewer@team:fga#member line 6\n"},
		{"fga tuple read output", schemaconv.TuplesDocument, "{\"tuples\": [\n" +
			`{"key":{"user":"user:anne","relation":"owner","object":"folder:product"},"timestamp":"2024-01-01T00:00:00Z"}],` + "\n" +
			`"continuation_token":""}`, "folder:product#owner@user:anne line 2\n"},
		{"detected jsonl", "", `{"user":"user:anne","relation":"owner","object":"folder:product"}` + "\n", "folder:product#owner@user:anne line 1\n"},
		{"detected csv", "", "user_type,user_id,relation,object_type,object_id\nuser,anne,owner,folder,product\n", "folder:product#owner@user:anne line 2\n"},
		{"detected json", "", `[{"user":"user:anne","relation":"owner","object":"folder:product"}]`, "folder:product#owner@user:anne line 1\n"},
		{"empty", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			err := schemaconv.ReadOpenFGATuples(strings.NewReader(tt.src), tt.format, func(tu api.Tuple, line int) error {
				fmt.Fprintf(&b, "%s line %d\n", tu, line)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Fatalf("got\n%swant\n%s", b.String(), tt.want)
			}
		})
	}
}

func TestReadOpenFGATuplesErrors(t *testing.T) {
	tests := []struct {
		name   string
		format schemaconv.TupleFormat
		src    string
		want   string
		is     error
	}{
		{"wildcard", schemaconv.TuplesJSONL, `{"user":"user:anne","relation":"v","object":"doc:1"}` + "\n" + `{"user":"user:*","relation":"v","object":"doc:1"}`, "2:1: nexus does not support wildcard subjects", schemaconv.ErrUnsupported},
		{"condition", schemaconv.TuplesJSONL, `{"user":"user:anne","relation":"v","object":"doc:1","condition":{"name":"c"}}`, "1:1: nexus does not support OpenFGA conditions", schemaconv.ErrUnsupported},
		{"csv condition", schemaconv.TuplesCSV, "user_type,user_id,relation,object_type,object_id,condition_name\nuser,a,v,doc,1,\nuser,b,v,doc,1,c\n", "3:1: nexus does not support OpenFGA conditions", schemaconv.ErrUnsupported},
		{"yaml condition", schemaconv.TuplesDocument, "- user: user:a\n  relation: v\n  object: doc:1\n  condition: {name: c}\n", "1:3: nexus does not support OpenFGA conditions", schemaconv.ErrUnsupported},
		{"email id", schemaconv.TuplesDocument, `[{"user":"user:anne@example.com","relation":"v","object":"doc:1"}]`, `1:2: user "user:anne@example.com"`, schemaconv.ErrInvalid},
		{"missing field", schemaconv.TuplesJSONL, `{"user":"user:a","object":"doc:1"}`, "1:1: a tuple needs user, relation and object", schemaconv.ErrSyntax},
		{"bad json", schemaconv.TuplesJSONL, "{\"user\":\"user:a\",\"relation\":\"v\",\"object\":\"doc:1\"}\n{nope", "2:1: json", schemaconv.ErrSyntax},
		{"csv header", schemaconv.TuplesCSV, "user,relation,object\nuser:a,v,doc:1\n", "1:1: csv header lacks user_type", schemaconv.ErrSyntax},
		{"not a list", schemaconv.TuplesDocument, "user: user:a\n", "1:1: want a list of tuples", schemaconv.ErrSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := schemaconv.ReadOpenFGATuples(strings.NewReader(tt.src), tt.format, func(api.Tuple, int) error { return nil })
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("error %v, want prefix %q", err, tt.want)
			}
			if !errors.Is(err, tt.is) {
				t.Fatalf("error %v is not %v", err, tt.is)
			}
		})
	}
	// fn's error stops the read.
	stop := errors.New("stop")
	err := schemaconv.ReadOpenFGATuples(strings.NewReader(`[{"user":"user:a","relation":"v","object":"doc:1"},{"user":"user:b","relation":"v","object":"doc:1"}]`), "",
		func(api.Tuple, int) error { return stop })
	if !errors.Is(err, stop) {
		t.Fatal(err)
	}
}
