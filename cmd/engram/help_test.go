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

// TestCLI_ArgumentCounts: a command given too few or too many arguments
// names itself, what it takes and its usage line, rather than cobra's
// "accepts 1 arg(s), received 0", which says neither which command nor
// what the argument is.
func TestCLI_ArgumentCounts(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"hooks", "install"}, "engram hooks install takes 1 argument, got 0 (usage: engram hooks install claude-code|codex"},
		{[]string{"store", "copy", "a"}, "engram store copy takes 2 arguments, got 1 (usage: engram store copy FROM TO"},
		{[]string{"add", "a", "b"}, "engram add takes at most 1 argument, got 2 (usage: engram add [FILE]"},
		{[]string{"import"}, "engram import takes at least 1 argument, got 0 (usage: engram import HARNESS [PATH...]"},
	} {
		code, _, errOut := e.run("", c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("engram %s: exit %d, %q; want exit 2 and %q", strings.Join(c.args, " "), code, errOut, c.want)
		}
	}
}
