package main

import (
	"strings"
	"testing"
)

// TestBenchProxy runs engram bench proxy at a tiny size, so that the
// command cannot rot: every case runs through the proxy and the model
// server, and the memory phase runs the built engram proxy. No figure is
// checked: they are the bench's to report, not the test's to assert.
func TestBenchProxy(t *testing.T) {
	e := newEnv(t)
	args := []string{"bench", "proxy", "-n", "3", "--first", "2", "--turns", "2", "--messages", "14", "--streams", "0"}
	if !testing.Short() { // the memory phase builds and runs the binary
		args = append(args, "--streams", "2", "--pace", "5ms", "--settle", "10ms", "--exe", binary(t))
	}
	out := e.ok("", args...)
	want := []string{"request: 14 messages", "steady, non-streamed", "steady, streamed: first byte", "first sight, non-streamed",
		"first sight, streamed: first byte", "engram's own time", "goal: per-turn overhead, excluding upstream time, p95", "goal: first byte added p95"}
	if !testing.Short() {
		want = append(want, "peak, 2 streams open", "goal: RSS per concurrent stream", "after the streams:")
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("the report lacks %q:\n%s", w, out)
		}
	}
	e.fail("", 2, "--turns 2 of --messages 4", "bench", "proxy", "--messages", "4", "--turns", "2")
	e.fail("", 2, "--requests 0: want 1 or more", "bench", "proxy", "-n", "0")
	// Every bench command refuses numbers it cannot run with, before
	// anything runs (some crashed, or never ended).
	for _, args := range [][]string{
		{"ingest", "--messages", "-5"}, {"ingest", "--batch", "0"}, {"archive", "--sessions", "0"},
		{"serve", "--messages", "-1"}, {"hybrid", "--limit", "-3"}, {"compaction", "--expand", "-1"},
		{"shed", "--timeout", "0s"}, {"search", "--queries", "0"}, {"hooks", "--runs", "0"},
	} {
		e.fail("", 2, "--"+strings.TrimLeft(args[1], "-")+" "+args[2]+": want", append([]string{"bench"}, args...)...)
	}
}
