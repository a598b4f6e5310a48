package schemaconv_test

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/schemaconv"
)

// checkConversion asserts what every conversion promises: a schema that
// parses again with the same renames, or errors that are all *Error with
// a line:column.
func checkConversion(t *testing.T, r *schemaconv.Result, err error) {
	t.Helper()
	if err != nil {
		var list []error
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			list = j.Unwrap()
		} else {
			list = []error{err}
		}
		for _, e := range list {
			var se *schemaconv.Error
			if !errors.As(e, &se) || se.Line < 1 || se.Column < 1 {
				t.Fatalf("error without a position: %v", e)
			}
		}
		return
	}
	if r.Schema == nil {
		t.Fatal("no schema")
	}
	if _, err := datastore.ParseSchema(r.YAML); err != nil {
		t.Fatalf("converted schema does not parse again: %v\n%s", err, r.YAML)
	}
	if got := schemaconv.RenamesFromSchema(r.YAML); !maps.Equal(got, r.Renames) {
		t.Fatalf("RenamesFromSchema = %v, want %v", got, r.Renames)
	}
}

func FuzzOpenFGA(f *testing.F) {
	f.Add(fgaHeader + "type doc\n  relations\n    define parent: [doc]\n    define viewer: [user] or viewer from parent\n")
	f.Add(fgaHeader + "type doc\n  relations\n    define a: [user]\n    define b: ([user] and a) but not (a or a)\n")
	f.Add(`{"schema_version":"1.1","type_definitions":[{"type":"user"},{"type":"doc","relations":{"v":{"union":{"child":[{"this":{}},{"computedUserset":{"relation":"v"}}]}}},"metadata":{"relations":{"v":{"directly_related_user_types":[{"type":"user"}]}}}}]}`)
	f.Fuzz(func(t *testing.T, src string) {
		r, err := schemaconv.FromOpenFGA([]byte(src))
		checkConversion(t, r, err)
	})
}

func FuzzSpiceDB(f *testing.F) {
	f.Add("definition user {}\ndefinition doc {\n  relation parent: doc\n  relation viewer: user | doc#viewer\n  permission view = viewer + parent->view - (viewer & parent.any(view))\n}\n")
	f.Add("/* c */ definition user {} // x\ncaveat c(a int) { a == 1 }\n")
	f.Fuzz(func(t *testing.T, src string) {
		r, err := schemaconv.FromSpiceDB([]byte(src))
		checkConversion(t, r, err)
	})
}

func FuzzOpenFGATuples(f *testing.F) {
	f.Add(`{"user":"user:anne","relation":"viewer","object":"doc:1"}` + "\n")
	f.Add("user_type,user_id,user_relation,relation,object_type,object_id\nteam,fga,member,viewer,doc,1\n")
	f.Add(`[{"user":"user:anne","relation":"viewer","object":"doc:1"}]`)
	f.Add("- user: user:anne\n  relation: viewer\n  object: doc:1\n")
	f.Fuzz(func(t *testing.T, src string) {
		err := schemaconv.ReadOpenFGATuples(strings.NewReader(src), "", func(tu api.Tuple, line int) error {
			if err := tu.Validate(); err != nil {
				t.Fatalf("invalid tuple %v: %v", tu, err)
			}
			if line < 1 {
				t.Fatalf("line %d", line)
			}
			return nil
		})
		var se *schemaconv.Error
		if err != nil && (!errors.As(err, &se) || se.Line < 1) {
			t.Fatalf("error without a line: %v", err)
		}
	})
}
