package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestCLI_StaleVersions: --if-sv and --if-gv with an older version print
// the whole answer, with what changed; only the current one prints
// NOT_MODIFIED.
func TestCLI_StaleVersions(t *testing.T) {
	e := newEnv(t)
	versions := func(args ...string) (gv, sv uint64) {
		t.Helper()
		var v struct{ GV, SV uint64 }
		if err := jsonUnmarshal(e.ok("", append(args, "--json")...), &v); err != nil {
			t.Fatal(err)
		}
		return v.GV, v.SV
	}
	e.ok("", "session", "resume", "--session", "s1", "--task", "first task")
	_, sv := versions("session", "show", "--session", "s1")
	e.ok("", "pattern", "add", "never sleep in tests; use a fake clock", "--category", "testing.unit", "--session", "s1")
	gv, bsv := versions("briefing", "--session", "s1")

	e.ok("", "session", "resume", "--session", "s1", "--task", "second task")
	if out := e.ok("", "session", "show", "--session", "s1", "--if-sv", fmt.Sprint(sv)); strings.Contains(out, "NOT_MODIFIED") || !strings.Contains(out, "second task") {
		t.Errorf("session show with a stale sv: %q", out)
	}
	if out := e.ok("", "briefing", "--session", "s1", "--if-gv", fmt.Sprint(gv), "--if-sv", fmt.Sprint(bsv)); strings.Contains(out, "NOT_MODIFIED") || !strings.Contains(out, "second task") {
		t.Errorf("briefing with a stale sv: %q", out)
	}
	e.ok("", "pattern", "add", "wrap errors with %w", "--category", "error.handling", "--session", "s1")
	if out := e.ok("", "pattern", "list", "--if-gv", fmt.Sprint(gv)); strings.Contains(out, "NOT_MODIFIED") || !strings.Contains(out, "wrap errors with %w") {
		t.Errorf("pattern list with a stale gv: %q", out)
	}
	gv2, sv2 := versions("briefing", "--session", "s1")
	if out := e.ok("", "briefing", "--session", "s1", "--if-gv", fmt.Sprint(gv), "--if-sv", fmt.Sprint(sv2)); strings.Contains(out, "NOT_MODIFIED") || !strings.Contains(out, "wrap errors with %w") {
		t.Errorf("briefing with a stale gv: %q", out)
	}
	for _, args := range [][]string{
		{"session", "show", "--session", "s1", "--if-sv", fmt.Sprint(sv2)},
		{"pattern", "list", "--if-gv", fmt.Sprint(gv2)},
		{"briefing", "--session", "s1", "--if-gv", fmt.Sprint(gv2), "--if-sv", fmt.Sprint(sv2)},
	} {
		if out := e.ok("", args...); !strings.Contains(out, "NOT_MODIFIED") {
			t.Errorf("engram %s: %q", strings.Join(args, " "), out)
		}
	}
}
