package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/store/sqlite"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3"; a
// module-aware install (go install ...@v1.2.3) reports its own version.
var version = ""

func versionInfo() (v, commit string) {
	v, commit = version, ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				commit = s.Value[:12]
			}
		}
	}
	if v == "" {
		v = "dev"
	}
	return v, commit
}

func (a *app) versionCmd() *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print engram's version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v, commit := versionInfo()
			if jsonOut {
				return writeJSON(a.stdout, map[string]any{
					"version": v, "commit": commit, "go": runtime.Version(),
					"os": runtime.GOOS, "arch": runtime.GOARCH, "schema_version": sqlite.SchemaVersion(),
				})
			}
			details := []string{runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH, fmt.Sprintf("store schema %d", sqlite.SchemaVersion())}
			if commit != "" {
				details = append([]string{"commit " + commit}, details...)
			}
			fmt.Fprintf(a.stdout, "engram %s (%s)\n", v, strings.Join(details, ", "))
			return nil
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print as JSON")
	return cmd
}
