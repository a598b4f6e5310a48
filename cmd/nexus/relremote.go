package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nexuspdp/nexus/cluster"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/schema"
	"github.com/nexuspdp/nexus/internal/cli"
)

// remoteImportBatch is how many tuples one admin write carries: well under
// the admin API's body limit and a cluster log message.
const remoteImportBatch = 5000

// remoteOptions are the flags of rel import --admin-url.
type remoteOptions struct {
	url, token, tokenFile string
}

func (o *remoteOptions) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.url, "admin-url", "", "import through a running server's admin API (http://host:8282), e.g. a cluster replica: the tuples go through the cluster's log")
	cmd.Flags().StringVar(&o.token, "admin-token", "", "admin bearer token for --admin-url (default: $NEXUS_ADMIN_TOKEN)")
	cmd.Flags().StringVar(&o.tokenFile, "admin-token-file", "", "file holding the admin bearer token for --admin-url")
}

func (o *remoteOptions) bearer() (string, error) {
	switch {
	case o.token != "" && o.tokenFile != "":
		return "", fmt.Errorf("set the admin token once: --admin-token or --admin-token-file, not both")
	case o.token != "":
		return o.token, nil
	case o.tokenFile != "":
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return "", fmt.Errorf("admin token: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return os.Getenv("NEXUS_ADMIN_TOKEN"), nil
}

// runRemoteImport imports name through a server's admin API: the input is
// read and validated against the server's schema first (in a scratch store,
// so every format and check of a local import applies), then written in
// batches of remoteImportBatch tuples, each one write (one log entry on a
// cluster). An error stops the import and says how many tuples were
// written before it; tuples already stored are left as they are, so the
// same import can be run again.
func runRemoteImport(cmd *cobra.Command, name string, o importOptions, ro remoteOptions) error {
	ctx := cmd.Context()
	token, err := ro.bearer()
	if err != nil {
		return cli.UsageError(cmd, err)
	}
	base := strings.TrimSuffix(ro.url, "/")
	fm := datastore.FormatForPath(name)
	if o.format != "" {
		if fm, err = datastore.ParseFormat(o.format); err != nil {
			return cli.UsageError(cmd, err)
		}
	}
	in, err := openArg(cmd, name)
	if err != nil {
		return err
	}
	defer in.Close()
	client := &http.Client{Timeout: time.Minute}
	schemaSrc, err := adminCall(ctx, client, "GET", base+"/v1/schema", token, "", nil)
	if err != nil {
		return fmt.Errorf("reading the server's schema: %w", err)
	}
	sc, err := schema.Parse(schemaSrc)
	if err != nil {
		return fmt.Errorf("the server's schema: %w", err)
	}
	dir, err := os.MkdirTemp("", "nexus-import-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	scratch, err := datastore.Open(ctx, datastore.Config{Path: filepath.Join(dir, relDataFile)})
	if err != nil {
		return err
	}
	defer scratch.Close()
	if _, err := scratch.WriteSchema(ctx, sc, false); err != nil {
		return err
	}
	st, err := scratch.Import(ctx, in, datastore.ImportOptions{Format: fm, BatchSize: o.batch})
	if err != nil {
		return fmt.Errorf("%w (nothing was written)", err)
	}
	tuples, err := scratch.Read(ctx, datastore.Filter{})
	if err != nil {
		return err
	}
	start := time.Now()
	var written int
	var rev uint64
	for batch := range slices.Chunk(tuples, remoteImportBatch) {
		touches := make([]string, len(batch))
		for i, t := range batch {
			touches[i] = t.String()
		}
		body, _ := json.Marshal(map[string][]string{"touches": touches})
		var out struct {
			Revision uint64 `json:"revision"`
		}
		if _, err := adminCall(ctx, client, "POST", base+"/v1/relationships", token, string(body), &out); err != nil {
			return fmt.Errorf("%w (%d tuples written before it, revision %d)", err, written, rev)
		}
		written += len(batch)
		rev = out.Revision
	}
	el := time.Since(start)
	fmt.Fprintf(cmd.OutOrStdout(), "imported %d tuples from %d lines through %s in %v (%.0f tuples/s), revision %d\n",
		written, st.Lines, base, el.Round(time.Millisecond), float64(written)/el.Seconds(), rev)
	return nil
}

// adminCall sends one admin request; a non-2xx answer is an error with the
// server's message. With out, the JSON answer is decoded into it; the raw
// answer is returned.
func adminCall(ctx context.Context, client *http.Client, method, url, token, body string, out any) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error, Reason string
		}
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return nil, fmt.Errorf("%s %s: %d %s (%s)", method, url, resp.StatusCode, e.Error, e.Reason)
		}
		return nil, fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return nil, fmt.Errorf("%s %s: %w", method, url, err)
		}
	}
	return b, nil
}

// refuseReplicaStore refuses a direct write into a cluster replica's store:
// the replica would stop following the log.
func refuseReplicaStore(ctx context.Context, s *datastore.BoltStore, dataDir string) error {
	replica, err := cluster.IsReplicaStore(ctx, s)
	if err != nil {
		return err
	}
	if replica {
		return fmt.Errorf("%s is a cluster replica's data directory: it takes writes only through the cluster's log; import through a replica instead (nexus rel import --admin-url http://REPLICA:8282 FILE)", dataDir)
	}
	return nil
}
