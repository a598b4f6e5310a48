// Package version says which nexus this is: its version and commit, the Go
// that built it, and the versions of OPA and wazero inside, for
// `nexus version` and the nexus_build_info metric.
package version

import (
	"runtime/debug"
	"sync"
)

// Version is set at build time:
//
//	go build -ldflags "-X github.com/nexuspdp/nexus/internal/version.Version=v1.2.3"
var Version = "dev"

// Info describes the build.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"go_version"`
	OPA       string `json:"opa"`
	Wazero    string `json:"wazero"`
}

// Get reads the build information once.
var Get = sync.OnceValue(func() Info {
	in := Info{Version: Version, Commit: "unknown", OPA: "unknown", Wazero: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return in
	}
	in.GoVersion = bi.GoVersion
	if in.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		in.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			in.Commit = s.Value
		}
	}
	for _, d := range bi.Deps {
		switch d.Path {
		case "github.com/open-policy-agent/opa":
			in.OPA = d.Version
		case "github.com/tetratelabs/wazero":
			in.Wazero = d.Version
		}
	}
	return in
})
