package main

import (
	"strings"
	"testing"
)

// TestCLI_Limits: the CLI refuses numbers out of range with the range, as
// MCP and HTTP do (the same checks).
func TestCLI_Limits(t *testing.T) {
	e := newEnv(t)
	e.ok("", "agents", "register", "--session", "s1")
	for _, c := range []struct {
		code int
		args []string
		want string
	}{
		{2, []string{"search", "retry", "-n", "-5"}, "error: limit is -5; it must be from 1 to 50, or 0 (the default, 10)"},
		{2, []string{"search", "retry", "-n", "100000"}, "error: limit is 100000; it must be from 1 to 50"},
		{2, []string{"prefetch", "retry", "--budget", "-1"}, "error: budget is -1; it must be from 1 to 32000"},
		{2, []string{"prefetch", "retry", "--remaining", "-1"}, "error: remaining is -1; it must be from 1 to 10000000"},
		{2, []string{"arch", "what did we decide?", "--budget", "9000"}, "error: budget is 9000; it must be from 1 to 8000, or 0 (the default, 1000)"},
		{2, []string{"pattern", "list", "--limit", "5000"}, "error: limit: is 5000; it must be from 1 to 1000"},
		{2, []string{"events", "-n", "5000"}, "error: --limit 5000: give 1 to 1000 events"},
	} {
		if code, _, errOut := e.run("", c.args...); code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("engram %s: exit %d, %q; want exit %d with %q", strings.Join(c.args, " "), code, errOut, c.code, c.want)
		}
	}
	e.ok("", "search", "retry", "-n", "50")
	e.ok("", "pattern", "list", "--limit", "1000")
}
