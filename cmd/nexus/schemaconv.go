package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/schema"
	"github.com/nexuspdp/nexus/internal/cli"
	"github.com/nexuspdp/nexus/modeltest"
	"github.com/nexuspdp/nexus/schemaconv"
)

// Models from OpenFGA and SpiceDB: nexus rel schema convert, the --from of
// rel schema write and rel import, and nexus rel test.

// schemaFormat picks the language of a schema: --from, else the file's
// extension (.fga, .zed), else its first word.
func schemaFormat(from, name string, src []byte) (schemaconv.Format, error) {
	if from != "" {
		f, err := schemaconv.ParseFormat(from)
		if err != nil {
			return "", cli.WithExit(2, err)
		}
		return f, nil
	}
	if f := schemaconv.FormatForPath(name); f != "" {
		return f, nil
	}
	return schemaconv.Detect(src), nil
}

// convertSchema turns a schema file in any language into a nexus schema;
// errors name the file.
func convertSchema(from, name string, src []byte) (*schemaconv.Result, error) {
	f, err := schemaFormat(from, name, src)
	if err != nil {
		return nil, err
	}
	res, err := schemaconv.Convert(src, f)
	if err != nil {
		if name == "-" {
			name = "stdin"
		}
		var ce *schemaconv.Error
		if errors.As(err, &ce) && ce.Line > 0 {
			return nil, fmt.Errorf("%s:%w", name, err) // name:line:col: ...
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return res, nil
}

// parseSchemaArg is rel schema write's parser: nexus YAML, or an OpenFGA
// model or SpiceDB schema converted (the relations it split are listed on
// stderr).
func parseSchemaArg(cmd *cobra.Command, from, name string, src []byte) (*schema.Schema, error) {
	res, err := convertSchema(from, name, src)
	if err != nil {
		return nil, err
	}
	if f, _ := schemaFormat(from, name, src); f == schemaconv.OpenFGA {
		keys := slices.Sorted(maps.Keys(res.Renames))
		for _, k := range keys {
			fmt.Fprintf(cmd.ErrOrStderr(), "%s: tuples go to %s, checks use %s (nexus rel import --from openfga does this)\n", k, res.Renames[k], k)
		}
	}
	return res.Schema, nil
}

const importFromHelp = "openfga: OpenFGA tuple files (.json/.yaml lists or fga tuple read output, .jsonl, .csv), with the tuples of split relations renamed; spicedb: SpiceDB relationships"

const fromHelp = "language of the schema: openfga or spicedb (default: from the extension .fga or .zed, else the first word; nexus YAML otherwise)"

func newRelSchemaConvertCmd() *cobra.Command {
	var from string
	cmd := &cobra.Command{
		Use:   "convert [--from openfga|spicedb] FILE|-",
		Short: "Print an OpenFGA model or SpiceDB schema as a nexus schema",
		Long: `Convert an OpenFGA model (the DSL of schema 1.1, or its JSON form) or a
SpiceDB schema into a nexus schema, and print its YAML.

An OpenFGA relation that mixes directly assigned types with computed parts
(define viewer: [user] or editor) becomes two: a relation viewer_direct
that stores the tuples and a permission viewer that checks use. The YAML
marks the stored relation ("# tuples of OpenFGA's viewer") and
nexus rel import --from openfga writes viewer tuples there.

What nexus lacks (conditions, caveats, wildcard subjects user:*, expiration,
.all() arrows, modules) is an error naming the feature and its line:column.
Exit status: 0 converted, 1 the model cannot be converted, 2 wrong usage.`,
		Example: `  nexus rel schema convert examples/drive/drive.fga
  nexus rel schema convert --from spicedb schema.zed > schema.yaml
  fga model get --store-id $STORE --format json | nexus rel schema convert --from openfga -`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := schemaFormat(from, "", nil); err != nil {
				return err
			}
			src, err := readArg(cmd, args[0])
			if err != nil {
				return err
			}
			res, err := convertSchema(from, args[0], src)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(res.YAML)
			return err
		},
	}
	cmd.Flags().StringVar(&from, "from", "", fromHelp)
	return cmd
}

// importText imports SpiceDB relationships (document:1#viewer@user:anne),
// which are nexus' text tuple syntax.
func importText(cmd *cobra.Command, f *relFlags, file string) error {
	in, err := openArg(cmd, file)
	if err != nil {
		return err
	}
	defer in.Close()
	s, err := f.open(cmd.Context(), false)
	if err != nil {
		return err
	}
	defer s.Close()
	st, err := s.Import(cmd.Context(), in, datastore.ImportOptions{Format: datastore.FormatText})
	if err != nil {
		return fmt.Errorf("%w (%d tuples committed before it)", err, st.Tuples)
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "imported %d tuples, revision %d\n", st.Tuples, st.Revision)
	return err
}

// importFrom is rel import --from openfga|spicedb.
func importFrom(cmd *cobra.Command, f *relFlags, from, format string, batch int, file string) error {
	lang, err := schemaconv.ParseFormat(from)
	if err != nil {
		return cli.WithExit(2, err)
	}
	switch lang {
	case schemaconv.SpiceDB, schemaconv.Nexus:
		return importText(cmd, f, file)
	}
	var tf schemaconv.TupleFormat
	switch strings.ToLower(format) {
	case "":
		tf = schemaconv.TupleFormatForPath(file)
	case "json", "yaml", "yml":
		tf = schemaconv.TuplesDocument
	case "jsonl", "ndjson":
		tf = schemaconv.TuplesJSONL
	case "csv":
		tf = schemaconv.TuplesCSV
	default:
		return cli.WithExit(2, fmt.Errorf("--from openfga: unknown --format %q (want json, yaml, jsonl or csv)", format))
	}
	in, err := openArg(cmd, file)
	if err != nil {
		return err
	}
	defer in.Close()
	name := file
	if file == "-" {
		name = "stdin"
	}
	ctx := cmd.Context()
	s, err := f.open(ctx, false)
	if err != nil {
		return err
	}
	defer s.Close()
	sc, err := s.Schema(ctx)
	if err != nil {
		return fmt.Errorf("import --from openfga: write the schema first (nexus rel schema write model.fga): %w", err)
	}
	renames := schemaconv.RenamesFromSchema(sc.Source())

	// The OpenFGA tuples go to Import as NDJSON through a pipe; lines
	// remembers the source line of each, to name it on an error.
	start := time.Now()
	pr, pw := io.Pipe()
	var lines []int32
	renamed := 0
	var readErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		w := bufio.NewWriter(pw)
		readErr = schemaconv.ReadOpenFGATuples(in, tf, func(t api.Tuple, line int) error {
			if r := renames.Tuple(t); r != t {
				t = r
				renamed++
			}
			lines = append(lines, int32(line))
			_, err := fmt.Fprintf(w, "{\"object\":%q,\"relation\":%q,\"subject\":%q}\n", t.Object.String(), t.Relation, t.Subject.String())
			return err
		})
		if readErr == nil {
			readErr = w.Flush()
		}
		pw.CloseWithError(readErr)
	}()
	st, err := s.Import(ctx, pr, datastore.ImportOptions{Format: datastore.FormatNDJSON, BatchSize: batch})
	pr.CloseWithError(errors.New("import stopped"))
	<-done
	var ce *schemaconv.Error
	if errors.As(readErr, &ce) {
		return fmt.Errorf("%s:%w (%d tuples committed before it)", name, ce, st.Tuples)
	}
	if err != nil {
		var ie *datastore.ImportError
		if errors.As(err, &ie) && ie.Line >= 1 && ie.Line <= len(lines) {
			return fmt.Errorf("%s: line %d: %w (%d tuples committed before it)", name, lines[ie.Line-1], ie.Err, st.Tuples)
		}
		return fmt.Errorf("%w (%d tuples committed before it)", err, st.Tuples)
	}
	el := time.Since(start)
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "imported %d OpenFGA tuples (%d to the relations that store split ones) in %v, revision %d\n",
		st.Tuples, renamed, el.Round(time.Millisecond), st.Revision)
	return err
}

func newRelTestCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "test FILE...",
		Short: "Run model tests offline: a schema, tuples and expected checks",
		Long: `Run model tests on a temporary store: load the schema (nexus YAML, an
OpenFGA model or a SpiceDB schema) and the tuples of each file, and check
every assertion. The data directory is not touched.

  schema_file: schema.yaml        # or schema: | inline; .fga and .zed are converted
  tuples:
    - folder:root#viewer@user:bob   # or {object, relation, subject}, or OpenFGA's {user, relation, object}
  tuple_file: tuples.txt          # or tuple_files: [...]; .txt, .csv, .json, .jsonl, .yaml
  check:
    - object: file:report.pdf
      permission: read            # or relation
      subject: user:bob           # or user
      expected: true

OpenFGA store files (.fga.yaml: model_file, tuples, tests with check,
list_objects and list_users) and SpiceDB validation files (schemaFile,
relationships, assertions with assertTrue and assertFalse) run as they are.

Each failing assertion is printed with its file and line. Exit status: 0
when every assertion holds, 1 when one fails, 2 when a file cannot run
(a bad schema, a tuple the schema refuses) or on wrong usage.`,
		Example: `  nexus rel test examples/drive/drive.test.yaml
  nexus rel test model.fga.yaml validation.zed.yaml`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
			failed, broken, total := 0, 0, 0
			for _, file := range args {
				suite, err := modeltest.Load(file)
				var rep *modeltest.Report
				if err == nil {
					rep, err = suite.Run(cmd.Context())
				}
				if err != nil {
					fmt.Fprintf(errOut, "%v\n", err)
					fmt.Fprintf(out, "ERROR %s\n", file)
					broken++
					continue
				}
				for _, sk := range rep.Skipped {
					fmt.Fprintf(out, "skipped: %s\n", sk)
				}
				for _, fl := range rep.Failures {
					fmt.Fprintf(out, "FAIL %s\n", fl)
				}
				total += rep.Assertions
				failed += len(rep.Failures)
				if len(rep.Failures) > 0 {
					fmt.Fprintf(out, "FAIL %s: %d of %d assertions failed\n", file, len(rep.Failures), rep.Assertions)
				} else {
					fmt.Fprintf(out, "ok   %s: %d assertions\n", file, rep.Assertions)
				}
			}
			switch {
			case broken > 0:
				return cli.WithExit(2, fmt.Errorf("%d of %d test files could not run", broken, len(args)))
			case failed > 0:
				return cli.WithExit(1, fmt.Errorf("%d of %d assertions failed", failed, total))
			}
			return nil
		},
	}
}
