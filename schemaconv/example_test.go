package schemaconv_test

import (
	"fmt"
	"strings"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/schemaconv"
)

func Example() {
	model := `model
  schema 1.1
type user
type folder
  relations
    define parent: [folder]
    define owner: [user]
    define viewer: [user] or owner or viewer from parent
`
	res, err := schemaconv.Convert([]byte(model), schemaconv.OpenFGA)
	if err != nil {
		panic(err)
	}
	_, types, _ := strings.Cut(string(res.YAML), "types:\n")
	fmt.Print(types)

	// OpenFGA's viewer tuples go to the relation that stores them.
	tuples := `[{"user": "user:anne", "relation": "viewer", "object": "folder:root"}]`
	_ = schemaconv.ReadOpenFGATuples(strings.NewReader(tuples), schemaconv.TuplesDocument, func(t api.Tuple, line int) error {
		fmt.Println(res.Renames.Tuple(t))
		return nil
	})

	// What nexus lacks is an error with its place.
	_, err = schemaconv.FromSpiceDB([]byte("definition user {}\ndefinition doc {\n  relation viewer: user:*\n}\n"))
	fmt.Println(err)
	// Output:
	//   user: {}
	//   folder:
	//     relations:
	//       parent: [folder]
	//       owner: [user]
	//       viewer_direct: [user]  # tuples of OpenFGA's viewer
	//     permissions:
	//       viewer: viewer_direct + owner + parent->viewer
	// folder:root#viewer_direct@user:anne
	// 3:20: nexus does not support wildcard subjects: user:* in relation viewer
}
