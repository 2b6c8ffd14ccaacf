package main

import (
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestHelp_ShortsNameEverySubcommand: a command whose one-line help lists
// its subcommands (engram window: open, append, ...) lists every one, so
// that engram --help does not hide one the README names.
func TestHelp_ShortsNameEverySubcommand(t *testing.T) {
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
	checked := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		var named, missing []string
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			if regexp.MustCompile(`\b` + regexp.QuoteMeta(sub.Name()) + `\b`).MatchString(c.Short) {
				named = append(named, sub.Name())
			} else {
				missing = append(missing, sub.Name())
			}
			walk(sub)
		}
		if len(named) >= 3 {
			checked++
			if len(missing) > 0 {
				t.Errorf("engram %s: its short help %q lists %d of its subcommands but not %s", c.Name(), c.Short, len(named), strings.Join(missing, ", "))
			}
		}
	}
	walk(a.rootCmd())
	if checked == 0 {
		t.Fatal("no command's short help lists its subcommands; engram window's does")
	}
}
