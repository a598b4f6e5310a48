package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBenchGenAndGateFlags(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		args    []string
		wantErr string
		wantOut string
	}{
		{"gen small", []string{"gen", "--profile", "small", "--seed", "3", "--out", dir}, "", "14443 tuples"},
		{"gen unknown profile", []string{"gen", "--profile", "huge", "--out", dir}, `profile "huge"`, ""},
		{"gate needs a file", []string{"gate", "--target", "127.0.0.1:1"}, `"file" not set`, ""},
		{"gate bad interface", []string{"gate", "--interface", "smtp", "--file", filepath.Join(dir, "gate-rbac.ndjson")}, "interface", ""},
		{"gate missing file", []string{"gate", "--file", filepath.Join(dir, "nope.ndjson")}, "no such file", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			cmd := newRootCmd()
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SetArgs(tt.args)
			err := cmd.Execute()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), tt.wantOut) {
				t.Fatalf("output %q lacks %q", out.String(), tt.wantOut)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "gate-rebac3.ndjson")); err != nil {
		t.Fatal(err)
	}
}
