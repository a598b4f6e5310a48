package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/builtins"
	"github.com/nexuspdp/nexus/internal/cli"
	"github.com/nexuspdp/nexus/policytest"
)

// exitTestsFailed is the status of nexus test when a test fails, errs, is
// skipped (without -z) or the targets disagree, as opa test exits.
const exitTestsFailed = 2

// afterWasmHook lets this package's tests alter the Wasm side of nexus
// test; nil otherwise.
var afterWasmHook func(test string, result []byte, err error) ([]byte, error)

func newTestCmd() *cobra.Command {
	var (
		verbose    bool
		run        string
		format     string
		target     string
		dataDir    string
		timeout    time.Duration
		regoV0     bool
		skipIsPass bool
	)
	cmd := &cobra.Command{
		Use:   "test [flags] PATH...",
		Short: "Run Rego unit tests on OPA's Go evaluator and on the compiled WebAssembly, like opa test",
		Long: `Run the Rego unit tests (rules whose name starts with test_) found in the
given files and directories, with their data files, like opa test.

Each test runs on two targets: OPA's Go evaluator, and the policy compiled
to WebAssembly by nexus and run by nexus' engine, as nexus serve runs it.
A test whose result differs between the two is reported as a disagreement,
and the command fails. --target rego or wasm runs one target only.

nexus' builtins are declared, so policies that call them type-check. On
both targets the store builtins (nexus.check, nexus.roles, ...) read an
empty relationship store, or the one in --data-dir (opened read-only: stop
nexus serve first, which holds it); a test may replace them with
"with nexus.check as ...".

Rules whose name starts with todo_test_ are skipped.

Exit status: 0 when every test passes; 2 when a test fails, errs or is
skipped (unless -z), or the targets disagree; 1 when the policy does not
load or compile (errors as file:line:col: message).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cli.CheckFormat(cmd, format); err != nil {
				return err
			}
			targets, err := policytest.ParseTargets(target)
			if err != nil {
				return cli.UsageError(cmd, fmt.Errorf("--target: %w", err))
			}
			ctx := cmd.Context()
			opts := policytest.Options{
				Paths:     args,
				Run:       run,
				Targets:   targets,
				RegoV0:    regoV0,
				Timeout:   timeout,
				AfterWasm: afterWasmHook,
			}
			store, closeStore, err := testStore(ctx, dataDir)
			if err != nil {
				return err
			}
			defer closeStore()
			opts.Store = store
			rep, err := policytest.Run(ctx, opts)
			if err != nil {
				return err
			}
			if format == cli.FormatJSON {
				if err := cli.WriteJSON(cmd.OutOrStdout(), testJSON{Results: rep.Results, Summary: rep.Counts()}); err != nil {
					return err
				}
			} else if err := writeTestReport(cmd.OutOrStdout(), rep, verbose); err != nil {
				return err
			}
			return testsVerdict(rep, skipIsPass)
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&verbose, "verbose", "v", false, "report every test, its duration on each target and what it printed")
	f.StringVarP(&run, "run", "r", "", "run only the tests whose full name (data.pkg.test_name) matches this regular expression")
	f.StringVarP(&target, "target", "t", "both", "where tests run: rego (OPA's Go evaluator), wasm (nexus' compiled Wasm) or both, compared")
	f.StringVar(&dataDir, "data-dir", "", "data directory whose relationship store the store builtins read (default: an empty store)")
	f.DurationVar(&timeout, "timeout", 5*time.Second, "deadline of each test on each target")
	f.BoolVar(&regoV0, "v0-compatible", false, "parse policies as Rego v0")
	f.BoolVarP(&skipIsPass, "exit-zero-on-skipped", "z", false, "skipped tests do not make the command fail")
	cli.FormatFlag(cmd, &format)
	return cmd
}

// testStore opens the store of dataDir read-only, or an empty one in a
// temporary directory removed by the returned function.
func testStore(ctx context.Context, dataDir string) (builtins.Store, func(), error) {
	if dataDir != "" {
		s, err := (&relFlags{dataDir: dataDir}).open(ctx, true)
		if err != nil {
			return nil, nil, err
		}
		return s, func() { _ = s.Close() }, nil
	}
	dir, err := os.MkdirTemp("", "nexus-test-")
	if err != nil {
		return nil, nil, fmt.Errorf("test store: %w", err)
	}
	s, err := datastore.Open(ctx, datastore.Config{Path: filepath.Join(dir, relDataFile)})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("test store: %w", err)
	}
	return s, func() { _ = s.Close(); _ = os.RemoveAll(dir) }, nil
}

// testJSON is the --format json document.
type testJSON struct {
	Results []policytest.Result       `json:"results"`
	Summary map[policytest.Status]int `json:"summary"`
}

// testsVerdict is the command's error: nil when every test passed.
func testsVerdict(rep *policytest.Report, skipIsPass bool) error {
	var bad, disagree []string
	for _, r := range rep.Results {
		switch r.Status {
		case policytest.Pass, policytest.NotRun:
		case policytest.Skip:
			if !skipIsPass {
				bad = append(bad, r.Name)
			}
		case policytest.Differs:
			disagree = append(disagree, r.Disagreement())
		default:
			bad = append(bad, r.Name)
		}
	}
	if len(bad) == 0 && len(disagree) == 0 {
		return nil
	}
	var msg []string
	if len(bad) > 0 {
		msg = append(msg, fmt.Sprintf("%d of %d tests did not pass", len(bad), len(rep.Results)))
	}
	msg = append(msg, disagree...)
	return cli.WithExit(exitTestsFailed, fmt.Errorf("test: %s", strings.Join(msg, "\n")))
}

var statusWords = map[policytest.Status]string{
	policytest.Pass:    "PASS",
	policytest.Fail:    "FAIL",
	policytest.Error:   "ERROR",
	policytest.Skip:    "SKIPPED",
	policytest.NotRun:  "NOT RUN",
	policytest.Differs: "DISAGREE",
}

// writeTestReport writes the results for people: the tests that did not
// pass (every test with verbose), then a summary.
func writeTestReport(w io.Writer, rep *policytest.Report, verbose bool) error {
	ew := &errWriter{w: w}
	if len(rep.Results) == 0 {
		ew.printf("no tests found\n")
		return ew.err
	}
	for _, r := range rep.Results {
		if !verbose && (r.Status == policytest.Pass || r.Status == policytest.NotRun) {
			continue
		}
		ew.printf("%s: %s", r.Name, statusWords[r.Status])
		if d := r.Disagreement(); d != "" {
			ew.printf(": %s", d)
		}
		if verbose {
			ew.printf(" (%s)", r.Location)
		}
		ew.printf("\n")
		for _, t := range []struct {
			name string
			o    *policytest.Outcome
		}{{"rego", r.Rego}, {"wasm", r.Wasm}} {
			o := t.o
			if o == nil {
				continue
			}
			switch {
			case o.Status == policytest.NotRun:
				ew.printf("  %s: %s\n", t.name, o.Reason)
			case o.Status == policytest.Error:
				ew.printf("  %s: error: %s\n", t.name, o.Error)
			case verbose || o.Status != r.Status || r.Status == policytest.Differs:
				ew.printf("  %s: %s (%s)\n", t.name, statusWords[o.Status], o.Duration.Round(time.Microsecond))
			}
			if o.Output != "" && (verbose || o.Status != policytest.Pass) {
				ew.printf("  %s printed:\n", t.name)
				for _, line := range strings.Split(strings.TrimRight(o.Output, "\n"), "\n") {
					ew.printf("    %s\n", line)
				}
			}
		}
	}
	ew.printf("%s\n", strings.Repeat("-", 80))
	counts := rep.Counts()
	for _, st := range []policytest.Status{policytest.Pass, policytest.Fail, policytest.Error, policytest.Skip, policytest.NotRun, policytest.Differs} {
		if n := counts[st]; n > 0 {
			ew.printf("%s: %d/%d\n", statusWords[st], n, len(rep.Results))
		}
	}
	return ew.err
}

// errWriter keeps the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}
