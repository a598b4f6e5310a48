package api_test

import (
	"fmt"

	"github.com/nexuspdp/nexus/api"
)

func ExampleParseTuple() {
	t, err := api.ParseTuple("folder:d1#editor@group:eng#member")
	if err != nil {
		panic(err)
	}
	fmt.Println(t.Object, t.Relation, t.Subject.Type, t.Subject.ID, t.Subject.Relation)
	fmt.Println(t)
	// Output:
	// folder:d1 editor group eng member
	// folder:d1#editor@group:eng#member
}
