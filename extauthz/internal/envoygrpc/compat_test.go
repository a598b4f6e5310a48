package envoygrpc_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/extauthz"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/pdp"
)

// compatPath is the decision every suite's policy defines:
// opa-envoy-plugin's default path.
const compatPath = "envoy/authz/allow"

var uuidShape = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// TestCompat runs the opa-envoy-plugin compatibility suite
// (testdata/compat, see its README): each directory's policy is served
// by a real nexus server, each of its CheckRequests is sent over loopback
// gRPC, and the whole CheckResponse must be the one the plugin answers,
// decision_id's value aside; or the gRPC error must have the plugin's
// code.
func TestCompat(t *testing.T) {
	dirs, err := filepath.Glob("testdata/compat/*")
	if err != nil {
		t.Fatal(err)
	}
	suites := 0
	for _, dir := range dirs {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue
		}
		suites++
		t.Run(filepath.Base(dir), func(t *testing.T) {
			client := compatServer(t, dir)
			reqs, err := filepath.Glob(filepath.Join(dir, "*.request.json"))
			if err != nil {
				t.Fatal(err)
			}
			if len(reqs) == 0 {
				t.Fatal("no *.request.json")
			}
			for _, file := range reqs {
				name := strings.TrimSuffix(filepath.Base(file), ".request.json")
				t.Run(name, func(t *testing.T) {
					compatCase(t, client, strings.TrimSuffix(file, ".request.json"))
				})
			}
		})
	}
	if suites < 5 {
		t.Fatalf("found %d suites under testdata/compat", suites)
	}
}

func compatCase(t *testing.T, client authv3.AuthorizationClient, base string) {
	req := &authv3.CheckRequest{}
	readProto(t, base+".request.json", req)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := client.Check(ctx, req)
	if b, rerr := os.ReadFile(base + ".error"); rerr == nil {
		want, msg, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		if code := status.Code(err).String(); err == nil || code != want {
			t.Fatalf("Check = %v, %v; want a gRPC error %s", got, err, want)
		}
		if msg != "" && status.Convert(err).Message() != msg {
			t.Fatalf("Check: gRPC error message %q, want the plugin's %q", status.Convert(err).Message(), msg)
		}
		return
	}
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	want := &authv3.CheckResponse{}
	readProto(t, base+".response.json", want)
	// decision_id is a new UUID each time: its presence is compared, its
	// value only for its shape.
	gotID := got.GetDynamicMetadata().GetFields()["decision_id"]
	wantID := want.GetDynamicMetadata().GetFields()["decision_id"]
	switch {
	case wantID == nil && gotID != nil:
		t.Fatalf("decision_id %v where the plugin sends none", gotID)
	case wantID != nil && gotID == nil:
		t.Fatalf("no decision_id in %v", got)
	case wantID != nil:
		if !uuidShape.MatchString(gotID.GetStringValue()) {
			t.Fatalf("decision_id %v is not a UUID", gotID)
		}
		got.DynamicMetadata.Fields["decision_id"] = wantID
	}
	if !proto.Equal(got, want) {
		opts := protojson.MarshalOptions{Multiline: true}
		t.Fatalf("CheckResponse differs from the plugin's\ngot:  %s\nwant: %s", opts.Format(got), opts.Format(want))
	}
}

func readProto(t *testing.T, file string, m proto.Message) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := protojson.Unmarshal(b, m); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// compatServer serves dir's policy (its .rego files and data.json) at
// compatPath on a real nexus server on loopback, and returns a client.
func compatServer(t *testing.T, dir string) authv3.AuthorizationClient {
	t.Helper()
	ctx := context.Background()
	files, err := filepath.Glob(filepath.Join(dir, "*.rego"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no policy in %s (%v)", dir, err)
	}
	mods := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		mods[filepath.Base(f)] = string(b)
	}
	data, err := os.ReadFile(filepath.Join(dir, "data.json"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	b, err := compiler.Compile(ctx, compiler.Options{Modules: mods, DataJSON: data, Entrypoints: []string{compatPath}, Revision: "compat"})
	if err != nil {
		t.Fatalf("compile %s: %v", dir, err)
	}
	store := fixture.DemoStore(t)
	p, err := pdp.New(ctx, pdp.Config{
		Engine: fixture.StoreEngine(t, store), Store: store, Relations: store, Policy: b,
		EnvoyEntrypoint: compatPath, AuthzEntrypoint: pdp.Disabled,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(ctx) })
	srv, err := extauthz.New(extauthz.Config{PDP: p, Store: store, GRPCAddr: "127.0.0.1:0", HTTPAddr: "-", AdminAddr: "-"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	conn, err := grpc.NewClient(srv.Addr("grpc").String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return authv3.NewAuthorizationClient(conn)
}
