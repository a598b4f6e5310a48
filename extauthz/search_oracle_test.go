package extauthz_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/nexuspdp/nexus/datastore"
)

// TestAuthZENResourceSearchMatchesEvaluations: a resource search answers
// exactly the resources of the type that an evaluation allows, for every
// user, action and type of the drive, on a store where files and folders
// get their tenant every way the schema allows: their own, their
// folder's, a folder's several levels up, and their own where their
// folder's differs. The oracle is the evaluation API, asked for every
// resource the store holds.
func TestAuthZENResourceSearchMatchesEvaluations(t *testing.T) {
	ts := newTestServer(t, nil)
	ctx := context.Background()
	writeTuples(t, ts,
		"file:inherited.pdf#parent@folder:q3",
		"folder:sub#parent@folder:q3", "file:deep.pdf#parent@folder:sub",
		"folder:groot#tenant@tenant:globex", "file:gchild.pdf#parent@folder:groot",
		"file:own.pdf#tenant@tenant:globex", "file:own.pdf#parent@folder:q3",
		"tenant:globex#viewer@user:gina", "tenant:globex#editor@user:erin")

	type key struct{ user, action, typ string }
	universe := map[string][]string{}
	for _, typ := range []string{"file", "folder"} {
		ts, err := ts.store.Read(ctx, datastore.Filter{ObjectType: typ})
		if err != nil {
			t.Fatal(err)
		}
		for _, tu := range ts {
			universe[typ] = append(universe[typ], tu.Object.ID)
		}
		slices.Sort(universe[typ])
		universe[typ] = slices.Compact(universe[typ])
	}
	inherited := 0
	for _, user := range []string{"alice", "bob", "carol", "dave", "erin", "frank", "gina"} {
		for _, action := range []string{"read", "write", "delete"} {
			for _, typ := range []string{"file", "folder"} {
				k := key{user, action, typ}
				var want []string
				for _, id := range universe[typ] {
					body := fmt.Sprintf(`{"subject":{"type":"user","id":%q},"action":{"name":%q},"resource":{"type":%q,"id":%q}}`, user, action, typ, id)
					status, _, out := post(t, ts.http+"/access/v1/evaluation", body)
					var d struct {
						Decision *bool `json:"decision"`
					}
					if status != 200 || json.Unmarshal([]byte(out), &d) != nil || d.Decision == nil {
						t.Fatalf("%v %s: evaluation answered %d %s", k, id, status, out)
					}
					if *d.Decision {
						want = append(want, id)
						if id == "inherited.pdf" || id == "deep.pdf" || id == "gchild.pdf" || id == "sub" {
							inherited++
						}
					}
				}
				var got []string
				token := ""
				for pages := 0; ; pages++ {
					if pages > len(universe[typ])+1 {
						t.Fatalf("%v: more pages than resources", k)
					}
					page := ""
					if token != "" {
						page = fmt.Sprintf(`,"page":{"token":%q}`, token)
					}
					a := search(t, ts.http+"/access/v1/search/resource",
						fmt.Sprintf(`{"subject":{"type":"user","id":%q},"action":{"name":%q},"resource":{"type":%q}%s}`, user, action, typ, page))
					got = append(got, a.names()...)
					if token = *a.Page.NextToken; token == "" {
						break
					}
				}
				if want == nil {
					want = []string{}
				}
				if got == nil {
					got = []string{}
				}
				if !slices.Equal(got, want) {
					t.Errorf("%v: search %v, evaluations allow %v", k, got, want)
				}
			}
		}
	}
	// The store's inheritance is exercised: a test whose inherited
	// resources are all denied proves nothing about finding them.
	if inherited == 0 {
		t.Fatal("no evaluation allowed a resource that inherits its tenant")
	}
}
