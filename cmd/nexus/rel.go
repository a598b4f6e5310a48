package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/internal/cli"
)

// relDataFile is the relationship store's file inside the data directory.
const relDataFile = "relations.db"

type relFlags struct {
	dataDir string
}

func newRelCmd() *cobra.Command {
	f := &relFlags{}
	cmd := &cobra.Command{
		Use:   "rel",
		Short: "Manage the relationship store (schema, tuples, import, export, checks)",
		Long: `Manage the relationship store in a data directory (the file relations.db).

Tuples are written type:id#relation@type:id[#relation], e.g.
folder:d1#viewer@user:alice or folder:d1#editor@group:eng#member.
The store is locked while a command runs: stop a running server first.`,
	}
	def := cmp.Or(os.Getenv("NEXUS_DATA_DIR"), "./nexus-data")
	cmd.PersistentFlags().StringVar(&f.dataDir, "data-dir", def, "data directory (env NEXUS_DATA_DIR)")
	cmd.AddCommand(
		newRelSchemaCmd(f),
		newRelWriteCmd(f, false),
		newRelWriteCmd(f, true),
		newRelReadCmd(f),
		newRelCheckCmd(f),
		newRelRolesCmd(f),
		newRelImportCmd(f),
		newRelExportCmd(f),
		newRelTestCmd(),
		newRelVerifyCmd(f),
	)
	return cmd
}

func (f *relFlags) path() string { return filepath.Join(f.dataDir, relDataFile) }

// exists refuses a data directory that holds no relationship store.
func (f *relFlags) exists() error {
	if _, err := os.Stat(f.path()); err != nil {
		return fmt.Errorf("no relationship store in %s: %w", f.dataDir, err)
	}
	return nil
}

// open opens the store of the data directory: read-only, one that
// exists; else created where there is none, and refused if it is a
// cluster replica's (refuseReplicaStore): every command that writes
// goes through here.
func (f *relFlags) open(ctx context.Context, readOnly bool) (*datastore.BoltStore, error) {
	if readOnly {
		if err := f.exists(); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(f.dataDir, 0o755); err != nil {
		return nil, err
	}
	s, err := datastore.Open(ctx, datastore.Config{Path: f.path(), ReadOnly: readOnly})
	if err != nil {
		return nil, openHint(err, f.dataDir)
	}
	if !readOnly {
		if err := refuseReplicaStore(ctx, s, f.dataDir); err != nil {
			_ = s.Close()
			return nil, err
		}
	}
	return s, nil
}

// openHint adds to an error of datastore.Open what to do about it.
func openHint(err error, dataDir string) error {
	if errors.Is(err, datastore.ErrCorrupt) {
		return fmt.Errorf("%w\nnexus rel verify --data-dir %s checks the whole file; restore the data directory from a backup, or rebuild the store (see nexus rel verify --help)", err, dataDir)
	}
	return err
}

func newRelSchemaCmd(f *relFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "schema", Short: "Write, print or convert the schema"}
	var force bool
	var from string
	write := &cobra.Command{
		Use:   "write FILE|-",
		Short: "Validate and store a schema (nexus YAML, OpenFGA .fga or SpiceDB .zed)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := readArg(cmd, args[0])
			if err != nil {
				return err
			}
			sc, err := parseSchemaArg(cmd, from, args[0], src)
			if err != nil {
				return err
			}
			s, err := f.open(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer s.Close()
			rev, err := s.WriteSchema(cmd.Context(), sc, force)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "schema written at revision %d\n", rev)
			return err
		},
	}
	write.Flags().BoolVar(&force, "force", false, "delete stored tuples the new schema no longer allows")
	write.Flags().StringVar(&from, "from", "", fromHelp)
	read := &cobra.Command{
		Use:   "read",
		Short: "Print the stored schema",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := f.open(cmd.Context(), true)
			if err != nil {
				return err
			}
			defer s.Close()
			sc, err := s.Schema(cmd.Context())
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(sc.Source())
			return err
		},
	}
	cmd.AddCommand(write, read, newRelSchemaConvertCmd())
	return cmd
}

func readArg(cmd *cobra.Command, name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(cmd.InOrStdin())
	}
	return os.ReadFile(name)
}

// openArg opens the file name, or standard input for "-".
func openArg(cmd *cobra.Command, name string) (io.ReadCloser, error) {
	if name == "-" {
		return io.NopCloser(cmd.InOrStdin()), nil
	}
	return os.Open(name)
}

// tupleArgs parses tuples from args, or from stdin lines when args is "-".
func tupleArgs(cmd *cobra.Command, args []string) ([]api.Tuple, error) {
	if len(args) == 1 && args[0] == "-" {
		return tupleLines(cmd.InOrStdin(), "stdin")
	}
	out := make([]api.Tuple, 0, len(args))
	for _, a := range args {
		t, err := api.ParseTuple(a)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// tupleLines parses a tuple a line of r, what names it in errors; blank
// lines and lines starting with # or // are skipped.
func tupleLines(r io.Reader, what string) ([]api.Tuple, error) {
	var out []api.Tuple
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "//") {
			continue
		}
		t, err := api.ParseTuple(l)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", what, n, err)
		}
		out = append(out, t)
	}
	return out, sc.Err()
}

func newRelWriteCmd(f *relFlags, del bool) *cobra.Command {
	use, short := "write TUPLE...|-", "Write tuples in one transaction"
	if del {
		use, short = "delete TUPLE...|-", "Delete tuples in one transaction"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ts, err := tupleArgs(cmd, args)
			if err != nil {
				return err
			}
			s, err := f.open(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer s.Close()
			req := datastore.WriteRequest{Touches: ts}
			if del {
				req = datastore.WriteRequest{Deletes: ts}
			}
			rev, err := s.Write(cmd.Context(), req)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "revision %d\n", rev)
			return err
		},
	}
}

func newRelReadCmd(f *relFlags) *cobra.Command {
	var object, relation, subject, format string
	var limit int
	cmd := &cobra.Command{
		Use:   "read",
		Short: "Print stored tuples that match a filter",
		Long: `Print the stored tuples that match a filter, one per line, or with
--format json as {"tuples": ["type:id#relation@type:id", ...]}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cli.CheckFormat(cmd, format); err != nil {
				return err
			}
			var flt datastore.Filter
			flt.ObjectType, flt.ObjectID, _ = strings.Cut(object, ":")
			flt.Relation = relation
			if subject != "" {
				st, rest, _ := strings.Cut(subject, ":")
				id, rel, _ := strings.Cut(rest, "#")
				flt.SubjectType, flt.SubjectID, flt.SubjectRelation = st, id, rel
			}
			flt.Limit = limit
			s, err := f.open(cmd.Context(), true)
			if err != nil {
				return err
			}
			defer s.Close()
			ts, err := s.Read(cmd.Context(), flt)
			if err != nil {
				return err
			}
			if format == cli.FormatJSON {
				out := make([]string, len(ts))
				for i, t := range ts {
					out[i] = t.String()
				}
				return cli.WriteJSON(cmd.OutOrStdout(), map[string][]string{"tuples": out})
			}
			w := bufio.NewWriter(cmd.OutOrStdout())
			for _, t := range ts {
				fmt.Fprintln(w, t)
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&object, "object", "", "object type or type:id")
	cmd.Flags().StringVar(&relation, "relation", "", "relation")
	cmd.Flags().StringVar(&subject, "subject", "", "subject type, type:id or type:id#relation")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many tuples (0: all)")
	cli.FormatFlag(cmd, &format)
	return cmd
}

func newRelCheckCmd(f *relFlags) *cobra.Command {
	var trace, failDeny bool
	var format string
	cmd := &cobra.Command{
		Use:   "check OBJECT PERMISSION SUBJECT",
		Short: "Check a permission; prints allowed or denied",
		Long: `Check a permission (or relation) of an object for a subject in the
relationship store. Prints allowed or denied (with --trace, how), or with
--format json {"allowed": bool, "trace": {...}}. With --fail-deny a deny
exits 3, so that scripts can test the exit status.`,
		Example: `  nexus rel check file:report.pdf read user:bob
  nexus rel check --trace folder:q3 write group:eng#member
  nexus rel check --fail-deny --format json file:report.pdf write user:bob`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cli.CheckFormat(cmd, format); err != nil {
				return err
			}
			obj, err := api.ParseObject(args[0])
			if err != nil {
				return err
			}
			sub, err := api.ParseSubject(args[2])
			if err != nil {
				return err
			}
			s, err := f.open(cmd.Context(), true)
			if err != nil {
				return err
			}
			defer s.Close()
			res, err := s.Check(cmd.Context(), datastore.CheckRequest{Object: obj, Permission: args[1], Subject: sub, Trace: trace})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch {
			case format == cli.FormatJSON:
				err = cli.WriteJSON(out, res)
			default:
				if trace && res.Trace != nil {
					fmt.Fprint(out, res.Trace)
				}
				if res.Allowed {
					_, err = fmt.Fprintln(out, "allowed")
				} else {
					_, err = fmt.Fprintln(out, "denied")
				}
			}
			if err == nil && failDeny && !res.Allowed {
				return denied("denied: %s may not %s %s", sub, args[1], obj)
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&trace, "trace", false, "print how the decision was reached")
	cmd.Flags().BoolVar(&failDeny, "fail-deny", false, "exit 3 on a deny")
	cli.FormatFlag(cmd, &format)
	return cmd
}

func newRelRolesCmd(f *relFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "roles SUBJECT TENANT",
		Short: "Print the tenant roles a subject holds",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			sub, err := api.ParseSubject(args[0])
			if err != nil {
				return err
			}
			s, err := f.open(cmd.Context(), true)
			if err != nil {
				return err
			}
			defer s.Close()
			roles, err := s.AppendRoles(cmd.Context(), nil, sub, args[1])
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), strings.Join(roles, "\n"))
			return err
		},
	}
}

// countingReader counts bytes read.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// importOptions are the flags of rel import.
type importOptions struct {
	format   string
	from     string
	batch    int
	compact  bool
	interval time.Duration
}

func newRelImportCmd(f *relFlags) *cobra.Command {
	var o importOptions
	var ro remoteOptions
	cmd := &cobra.Command{
		Use:   "import FILE|-",
		Short: "Import tuples from NDJSON, CSV or text (streaming)",
		Long: `Import tuples from a file or stdin (-). Formats:

  ndjson  one {"object":"folder:d1","relation":"viewer","subject":"user:alice"} per line
  csv     object,relation,subject per line; a first line object,relation,subject
          is a header; fields may be quoted
  text    one tuple per line (folder:d1#viewer@user:alice); blank lines and
          lines starting with # or // are skipped

The format is --format (ndjson, json, jsonl, csv, text, txt or tuples),
else the file's extension: .csv is csv, .txt and .tuples are text, any
other (.ndjson, .jsonl, .json, none, stdin) is ndjson. Lines are at most
4096 bytes; tuples already stored are left as they are.

The whole input is read and validated before anything is written: an
invalid line stops the import with an error naming it, and the store is
unchanged. Then the tuples are committed: in one transaction when there
are at most --batch of them, else sorted in runs of --batch (spilled
beside the data file) and merged in transactions of 250,000. If a commit
fails (a full disk, an interrupt), the transactions before it stay, and
the error says how many tuples they hold.

With --admin-url the tuples go through a running server's admin API
instead of into a data directory: this is how to import into a cluster
(any replica; the writes go through the cluster's log). The input is
validated against the server's schema first, then written in writes of
5,000 tuples.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if ro.url != "" {
				if o.from != "" || o.compact {
					return cli.UsageError(cmd, fmt.Errorf("--admin-url imports through a server: --from and --compact do not apply"))
				}
				return runRemoteImport(cmd, args[0], o, ro)
			}
			if o.from != "" {
				return importFrom(cmd, f, o.from, o.format, o.batch, args[0])
			}
			return runRelImport(cmd, f, args[0], o)
		},
	}
	cmd.Flags().StringVar(&o.format, "format", "", "ndjson, csv or text (default: from the file extension)")
	cmd.Flags().StringVar(&o.from, "from", "", importFromHelp)
	cmd.Flags().IntVar(&o.batch, "batch", 0, fmt.Sprintf("tuples sorted at once; an input of at most this many is one transaction (default %d)", datastore.DefaultImportBatch))
	cmd.Flags().BoolVar(&o.compact, "compact", false, "compact the data file afterwards (smaller file after a large import)")
	cmd.Flags().DurationVar(&o.interval, "progress-interval", 5*time.Second, "how often to print progress when stderr is not a terminal")
	ro.addFlags(cmd)
	return cmd
}

// runRelImport imports the file name (or stdin for "-") into the store of f.
func runRelImport(cmd *cobra.Command, f *relFlags, name string, o importOptions) error {
	ctx := cmd.Context()
	if o.interval <= 0 {
		return cli.UsageError(cmd, fmt.Errorf("--progress-interval %v: want a positive duration", o.interval))
	}
	fm := datastore.FormatForPath(name)
	if o.format != "" {
		var err error
		if fm, err = datastore.ParseFormat(o.format); err != nil {
			return cli.UsageError(cmd, err)
		}
	}
	in, err := openArg(cmd, name)
	if err != nil {
		return err
	}
	defer in.Close()
	size := int64(-1)
	if fh, ok := in.(*os.File); ok {
		if fi, err := fh.Stat(); err == nil {
			size = fi.Size()
		}
	}
	cr := &countingReader{r: in}
	s, err := f.open(ctx, false)
	if err != nil {
		return err
	}
	start := time.Now()
	p := startImportProgress(cmd.ErrOrStderr(), cr, size, o.interval)
	st, err := s.Import(ctx, cr, datastore.ImportOptions{Format: fm, BatchSize: o.batch, Progress: p.update})
	p.stop()
	closeErr := s.Close()
	el := time.Since(start)
	if err != nil {
		if st.Tuples == 0 {
			return fmt.Errorf("%w (nothing was written)", err)
		}
		return fmt.Errorf("%w (%d tuples committed before it, revision %d)", err, st.Tuples, st.Revision)
	}
	if closeErr != nil {
		return closeErr
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "imported %d tuples from %d lines in %v (%.0f tuples/s), revision %d\n",
		st.Tuples, st.Lines, el.Round(time.Millisecond), float64(st.Tuples)/el.Seconds(), st.Revision)
	if !o.compact {
		return nil
	}
	cs := time.Now()
	before, after, err := datastore.Compact(ctx, f.path())
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "compacted %s: %.1f MiB -> %.1f MiB in %v\n", f.path(),
		float64(before)/(1<<20), float64(after)/(1<<20), time.Since(cs).Round(time.Millisecond))
	return nil
}

// importProgress reports an import on stderr: progress bars on a
// terminal (reading, then committing), else a line every interval.
type importProgress struct {
	w              io.Writer
	in             *countingReader
	start          time.Time
	parsed, tuples atomic.Int64
	bar            *progressbar.ProgressBar
	ticker         *time.Ticker
	done, stopped  chan struct{}
}

func startImportProgress(w io.Writer, in *countingReader, size int64, interval time.Duration) *importProgress {
	p := &importProgress{w: w, in: in, start: time.Now(), done: make(chan struct{}), stopped: make(chan struct{})}
	if fh, ok := w.(*os.File); ok && term.IsTerminal(int(fh.Fd())) {
		p.bar = progressbar.NewOptions64(size,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription("reading"),
			progressbar.OptionShowBytes(true),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionFullWidth(),
			progressbar.OptionSpinnerType(14),
		)
		interval = 200 * time.Millisecond
	}
	p.ticker = time.NewTicker(interval)
	go p.run()
	return p
}

// update is the import's progress callback.
func (p *importProgress) update(st datastore.ImportStats) {
	p.parsed.Store(st.Parsed)
	p.tuples.Store(st.Tuples)
}

func (p *importProgress) run() {
	defer close(p.stopped)
	var last int64
	committing := false
	for {
		select {
		case <-p.done:
			return
		case <-p.ticker.C:
		}
		read := p.in.n.Load()
		if p.bar == nil {
			el := time.Since(p.start).Seconds()
			fmt.Fprintf(p.w, "import: %d tuples read (%.1f MiB, %.0f/s), %d committed\n", p.parsed.Load(), float64(read)/(1<<20), float64(p.parsed.Load())/el, p.tuples.Load())
			continue
		}
		if committing {
			_ = p.bar.Set64(p.tuples.Load())
			continue
		}
		_ = p.bar.Add64(read - last)
		last = read
		p.bar.Describe(fmt.Sprintf("reading (%d tuples)", p.parsed.Load()))
		if p.tuples.Load() > 0 && p.tuples.Load() < p.parsed.Load() {
			// Reading is done; a second bar follows the merge.
			_ = p.bar.Finish()
			fmt.Fprintln(p.w)
			committing = true
			p.bar = progressbar.NewOptions64(p.parsed.Load(),
				progressbar.OptionSetWriter(p.w),
				progressbar.OptionSetDescription("committing"),
				progressbar.OptionShowCount(),
				progressbar.OptionShowIts(),
				progressbar.OptionSetItsString("tuples"),
				progressbar.OptionSetPredictTime(true),
				progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionFullWidth(),
			)
			_ = p.bar.Set64(p.tuples.Load())
		}
	}
}

// stop ends the reports; the bar, if any, is finished.
func (p *importProgress) stop() {
	p.ticker.Stop()
	close(p.done)
	<-p.stopped
	if p.bar != nil {
		_ = p.bar.Finish()
		fmt.Fprintln(p.w)
	}
}

func newRelVerifyCmd(f *relFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "verify",
		Short: "Check the data file for damage, page by page and key by key",
		Long: `Check every page and every key of the relationship store (relations.db):
the file's structure as bbolt reads it (meta pages, free list, the pages of
every index), bbolt's own consistency check, and the store's data (the
name dictionary, the schema, every tuple of both indexes and the
changelog). The server checks the meta pages and the indexes' upper pages
when it starts; this finds damage anywhere.

It exits with status 1 and lists what is wrong when the file is damaged.
Then restore the data directory from a backup, or rebuild the store: move
relations.db away and write the schema and relationships again (when the
damage lies outside what opening the store checks, nexus rel export still
saves the relationships it can read).

The store is locked while it runs: stop a running server first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.exists(); err != nil {
				return err
			}
			start := time.Now()
			rep, err := datastore.Verify(cmd.Context(), f.path())
			if !errors.Is(err, datastore.ErrCorrupt) {
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: no damage found: %d tuples, revision %d, %d pages of %d bytes, %d index keys without a checksum (written before nexus kept one) (%v)\n",
					rep.Path, rep.Tuples, rep.Revision, rep.Pages, rep.PageSize, rep.Unchecked, time.Since(start).Round(time.Millisecond))
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s is damaged:\n", rep.Path)
			for _, p := range rep.Problems {
				fmt.Fprintf(out, "  %s\n", p)
			}
			return fmt.Errorf("%s is damaged (%d problems listed above): restore it from a backup, or rebuild the store (see nexus rel verify --help)", rep.Path, len(rep.Problems))
		},
	}
}

func newRelExportCmd(f *relFlags) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "export [FILE|-]",
		Short: "Export every tuple (NDJSON by default)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			fm := datastore.FormatNDJSON
			out := cmd.OutOrStdout()
			if len(args) == 1 && args[0] != "-" {
				fm = datastore.FormatForPath(args[0])
				fh, err := os.Create(args[0])
				if err != nil {
					return err
				}
				defer fh.Close()
				out = fh
			}
			if format != "" {
				var err error
				if fm, err = datastore.ParseFormat(format); err != nil {
					return cli.UsageError(cmd, err)
				}
			}
			s, err := f.open(cmd.Context(), true)
			if err != nil {
				return err
			}
			defer s.Close()
			n, err := s.Export(cmd.Context(), out, fm)
			if err != nil {
				return err
			}
			if fh, ok := out.(*os.File); ok && fh != os.Stdout {
				if err := fh.Sync(); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "exported %d tuples\n", n)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&format, "format", "", "ndjson, csv or text")
	return cmd
}
