package main

import (
	"context"
	"net"
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

// TestBenchProxyReady: the memory phase knows the proxy is up from its
// socket, not from its ready line, which the runtime's gctrace can split
// (CI saw "gc engram proxy on …" and waited 30 s for a line that never
// came whole). A proxy that ends before listening is reported at once.
func TestBenchProxyReady(t *testing.T) {
	var pp proxyProcess
	exited := make(chan struct{})
	var out strings.Builder
	pp.trace(strings.NewReader("gc engram proxy on http://127.0.0.1:1: Anthropic to …\n"+
		"1 @0.037s 0%: 0.12+1.0+0.006 ms clock, 0.25+0.20/0.35/0.62+0.013 ms cpu, 3->3->1 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P\n"+
		"gc 2 @0.5s 0%: 0.1+1+0 ms clock, 0+0/0/0+0 ms cpu, 5->6->2 MB, 7 MB goal, 0 MB stacks, 0 MB globals, 2 P\n"+
		"listen tcp: address already in use\n"), exited, &out)
	select {
	case <-exited:
	default:
		t.Fatal("trace returned without closing exited")
	}
	if pp.gc.n != 2 || pp.gc.live != 2<<20 || pp.gc.goal != 7<<20 {
		t.Errorf("gc trace read as %+v, want collection 2, 2 MB live, 7 MB goal", pp.gc)
	}
	if strings.Contains(out.String(), "proxy on") || !strings.Contains(out.String(), "engram proxy: listen tcp: address already in use") {
		t.Errorf("passed on:\n%s", out.String())
	}
	if err := waitListening(context.Background(), "127.0.0.1:1", exited); err == nil || !strings.Contains(err.Error(), "ended before it listened") {
		t.Errorf("a proxy that ended: %v", err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	if err := waitListening(context.Background(), l.Addr().String(), make(chan struct{})); err != nil {
		t.Errorf("a proxy listening: %v", err)
	}
}
