package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/e2e/internal/nexusproc"
)

// readmeExample is one command of the README's quick start with the output
// the README promises for it.
type readmeExample struct {
	file string
	line int
	cmd  string
	want string
}

// readmePages are the README and its guides, in the order a reader meets
// their examples: the examples run in this order against one server.
var readmePages = []string{
	"README.md",
	"docs/security.md",
	"docs/application-api.md",
	"docs/policies-and-models.md",
	"docs/operations.md",
	"docs/migrating-from-opa-envoy-plugin.md",
}

// readmeExamples collects the shell examples of the README and its
// guides that have an expected output: a curl or checkclient command
// followed by a "# ..." line, or with a trailing "# 200" comment.
func readmeExamples(t *testing.T) []readmeExample {
	t.Helper()
	var out []readmeExample
	for _, page := range readmePages {
		out = append(out, pageExamples(t, page)...)
	}
	return out
}

// pageExamples collects one page's examples.
func pageExamples(t *testing.T, page string) []readmeExample {
	t.Helper()
	f, err := os.Open(filepath.Join(nexusproc.RepoRoot(), page))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []readmeExample
	pending := -1
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		// A command continued on the next lines is one command.
		start := n
		for strings.HasSuffix(line, "\\") && sc.Scan() {
			n++
			line = strings.TrimSuffix(line, "\\") + " " + strings.TrimSpace(sc.Text())
		}
		isCmd := strings.HasPrefix(line, "curl ") || strings.HasPrefix(line, "go run ./examples/checkclient")
		switch {
		case isCmd:
			cmd, comment, _ := strings.Cut(line, "  # ")
			out = append(out, readmeExample{file: page, line: start, cmd: strings.TrimSpace(cmd), want: strings.TrimSpace(comment)})
			pending = -1
			if comment == "" {
				pending = len(out) - 1
			}
		case pending >= 0 && strings.HasPrefix(line, "# "):
			out[pending].want = strings.TrimPrefix(line, "# ")
			pending = -1
		default:
			pending = -1
		}
	}
	return out
}

// readmeServeArgs returns the arguments of the quick start's
// `go run ./cmd/nexus serve ...` command.
func readmeServeArgs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(nexusproc.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		cmd, _, _ := strings.Cut(strings.TrimSpace(line), "#")
		if rest, ok := strings.CutPrefix(cmd, "go run ./cmd/nexus serve"); ok {
			return append([]string{"serve"}, strings.Fields(rest)...)
		}
	}
	t.Fatal("README.md: no `go run ./cmd/nexus serve` command")
	return nil
}

// TestServeDefaultREADME starts the built binary as the README's quick start
// does (the embedded demo, with its flags), and runs every example of the
// README against it, in order, checking the output the README shows.
func TestServeDefaultREADME(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed: the README's examples use it")
	}
	examples := readmeExamples(t)
	if len(examples) < 8 {
		t.Fatalf("found %d README examples, want at least 8: the parser or the README changed", len(examples))
	}
	args := readmeServeArgs(t)
	nexusproc.Binary(t) // build first, so the timing below is the server's
	start := time.Now()
	p := nexusproc.Start(t, "", "127.0.0.1:8282", args...)
	t.Logf("nexus serve ready after %v (time to first /readyz 200, including process start)", time.Since(start).Round(time.Millisecond))
	// The embedded default policy is the one loaded.
	if l := policyLoadedLine(t, p); !strings.Contains(l, "revision=") {
		t.Fatalf("the default policy's load names no revision: %s", l)
	}

	// The README has users export the application API key nexus serve
	// generated; its examples send $NEXUS_APP_API_KEY.
	key, err := os.ReadFile(filepath.Join(p.Dir, "nexus-data", "app-api-key"))
	if err != nil {
		t.Fatalf("no generated application API key: %v", err)
	}
	env := append(os.Environ(), "NEXUS_APP_API_KEY="+strings.TrimSpace(string(key)))
	for _, ex := range examples {
		t.Run(strings.ReplaceAll(ex.cmd[:min(len(ex.cmd), 60)], "/", "_"), func(t *testing.T) {
			cmd := exec.Command("sh", "-c", ex.cmd)
			cmd.Env = env
			// The README runs from the repository root, where nexus serve
			// keeps ./nexus-data; here the server's directory holds it.
			cmd.Dir = p.Dir
			if strings.HasPrefix(ex.cmd, "go run ") {
				cmd.Dir = nexusproc.RepoRoot()
			}
			outb, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s line %d: %s: %v\n%s", ex.file, ex.line, ex.cmd, err, outb)
			}
			out := strings.TrimSpace(string(outb))
			if ex.want == "" {
				return
			}
			switch {
			case strings.HasPrefix(ex.want, "{"):
				var got, want any
				if err := json.Unmarshal([]byte(out), &got); err != nil {
					t.Fatalf("%s line %d: output is not JSON: %s", ex.file, ex.line, out)
				}
				if err := json.Unmarshal([]byte(ex.want), &want); err != nil {
					t.Fatalf("%s line %d: the expected output is not JSON: %s", ex.file, ex.line, ex.want)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s line %d: %s\n got %s\nwant %s", ex.file, ex.line, ex.cmd, out, ex.want)
				}
			case len(ex.want) == 3 && ex.want[0] >= '1' && ex.want[0] <= '5':
				first, _, _ := strings.Cut(out, "\n")
				if !strings.Contains(first, " "+ex.want) {
					t.Fatalf("%s line %d: status line %q, want %s", ex.file, ex.line, first, ex.want)
				}
			default:
				if out != ex.want {
					t.Fatalf("%s line %d: %s\n got %q\nwant %q", ex.file, ex.line, ex.cmd, out, ex.want)
				}
			}
		})
	}

	// SIGTERM: a graceful exit, and what was written is there after a
	// restart (the README's write gave carol access).
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, p.Output.String())
	}
	nexusproc.Start(t, p.Dir, "127.0.0.1:8282", args...)
	out, err := exec.Command("curl", "-s", "localhost:8181/allowed", "-H", "Authorization: Bearer "+strings.TrimSpace(string(key)),
		"-d", `{"user":"carol","action":"read","resource":"file:report.pdf"}`).CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"allow":true`) {
		t.Fatalf("after a restart carol's relationship is gone: %s %v", out, err)
	}
}

// policyLoadedLine is the server's "policy loaded" log line.
func policyLoadedLine(t *testing.T, p *nexusproc.Proc) string {
	t.Helper()
	for _, l := range strings.Split(p.Output.String(), "\n") {
		if strings.Contains(l, `msg="policy loaded"`) {
			return l
		}
	}
	t.Fatalf("no \"policy loaded\" line in the server's log:\n%s", p.Output.String())
	return ""
}

// TestServeWasmOnlyDeprecated: --wasm-only, which every policy now
// behaves as, still starts the server, which warns that it has no effect.
func TestServeWasmOnlyDeprecated(t *testing.T) {
	p := nexusproc.Start(t, "", "127.0.0.1:8282", append(readmeServeArgs(t), "--wasm-only")...)
	policyLoadedLine(t, p)
	if !strings.Contains(p.Output.String(), "--wasm-only (wasm_only) is deprecated and has no effect") {
		t.Fatalf("--wasm-only: no deprecation warning in the server's log:\n%s", p.Output.String())
	}
}
