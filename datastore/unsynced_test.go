package datastore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/internal/fixture"
)

// unsyncedStore opens a store at path, makes it unsynced and applies a
// schema and a tuple at revisions 1 and 2.
func unsyncedStore(t *testing.T, path string) *datastore.BoltStore {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("unsynced commits need the boot ID Linux tells")
	}
	ctx := context.Background()
	s, err := datastore.Open(ctx, datastore.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Unsync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".unsynced"); err != nil {
		t.Fatalf("no record of unsynced commits: %v", err)
	}
	res, err := s.ApplyRun(ctx, 1, []datastore.Batch{
		{Schema: mustParseSchema(t, replicaSchema)},
		{Write: datastore.WriteRequest{Touches: fixture.Tuples(t, "folder:a#viewer@user:ann")}},
	})
	if err != nil || res[0] != nil || res[1] != nil {
		t.Fatal(err, res)
	}
	return s
}

// TestUnsync: a store that committed without fsync and then stopped is
// trusted after a clean close or a process crash in the same boot, and
// moved aside, for an empty store, after the operating system stopped.
func TestUnsync(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		// record is what the record of unsynced commits holds when the
		// store is opened again: "" for none (a clean close), "same" for
		// this boot (the process died), or another boot ID.
		record   string
		wantRev  datastore.Revision
		wantTorn bool
	}{
		{name: "clean close", record: "", wantRev: 2},
		{name: "process died", record: "same", wantRev: 2},
		{name: "system stopped", record: "00000000-0000-0000-0000-000000000000", wantRev: 0, wantTorn: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "nexus.db")
			s := unsyncedStore(t, path)
			boot, err := os.ReadFile(path + ".unsynced")
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(path + ".unsynced"); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("Close left the record of unsynced commits: %v", err)
			}
			// A crash is a close whose record stays behind.
			switch tt.record {
			case "":
			case "same":
				err = os.WriteFile(path+".unsynced", boot, 0o600)
			default:
				err = os.WriteFile(path+".unsynced", []byte(tt.record+"\n"), 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantTorn {
				// A read-only open refuses the file rather than move it.
				if _, err := datastore.Open(ctx, datastore.Config{Path: path, ReadOnly: true}); !errors.Is(err, datastore.ErrCorrupt) {
					t.Fatalf("read-only open of a file that may be torn = %v, want ErrCorrupt", err)
				}
			}
			s2, err := datastore.Open(ctx, datastore.Config{Path: path})
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			if rev, _ := s2.Revision(ctx); rev != tt.wantRev {
				t.Fatalf("revision %d after reopening, want %d", rev, tt.wantRev)
			}
			if _, err := os.Stat(path + ".unsynced"); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("Open left the record of unsynced commits: %v", err)
			}
			var torn []string
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), "nexus.db.torn-") {
					torn = append(torn, e.Name())
				}
			}
			if (len(torn) == 1) != tt.wantTorn || len(torn) > 1 {
				t.Fatalf("files moved aside %v, want one: %v", torn, tt.wantTorn)
			}
			if tt.wantTorn {
				old, err := datastore.Open(ctx, datastore.Config{Path: filepath.Join(dir, torn[0]), ReadOnly: true})
				if err != nil {
					t.Fatalf("the file moved aside does not open: %v", err)
				}
				if rev, _ := old.Revision(ctx); rev != 2 {
					t.Fatalf("the file moved aside is at revision %d, want 2", rev)
				}
				_ = old.Close()
			} else if got := export(t, s2); got != "folder:a#viewer@user:ann\n" {
				t.Fatalf("export after reopening %q", got)
			}
		})
	}
}
