package schema_test

import (
	"fmt"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore/schema"
)

func ExampleParse() {
	sc, err := schema.Parse([]byte(`types:
  user: {}
  folder:
    relations:
      viewer: [user]
  file:
    relations:
      parent: [folder]
      viewer: [user]
    permissions:
      read: viewer + parent->viewer
`))
	if err != nil {
		panic(err)
	}
	fmt.Println(sc.Permissions("file"), sc.Expr("file", "read"))
	t := api.Tuple{Object: api.Object{Type: "file", ID: "f1"}, Relation: "parent", Subject: api.Subject{Type: "user", ID: "ann"}}
	fmt.Println(sc.ValidateTuple(t))
	// Output:
	// [read] (viewer + parent->viewer)
	// datastore: invalid tuple: file:f1#parent@user:ann: relation file#parent does not accept subject type user (accepts [folder])
}
