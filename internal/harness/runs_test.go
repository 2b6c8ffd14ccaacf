package harness

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestHarness_RecordRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "projects", "p")
	if runs, err := Runs(dir); err != nil || runs != nil {
		t.Fatalf("Runs before any: %v %v", runs, err)
	}
	// Hook processes record at once: no count is lost.
	const workers, each = 8, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				var err error
				if w == 0 && i == each-1 {
					err = errors.New("store locked: " + strings.Repeat("x", 2*maxErrorBytes))
				}
				if rerr := RecordRun(dir, "claude-code", "PostToolUse", time.Millisecond, err); rerr != nil {
					t.Error(rerr)
				}
			}
		})
	}
	wg.Wait()
	if err := RecordRun(dir, "codex", "Stop", 2*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	if err := RecordRun(dir, "claude-code", "SessionStart", 3*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	runs, err := Runs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 3 || runs[0].Event != "SessionStart" || runs[1].Event != "PostToolUse" || runs[2].Harness != "codex" {
		t.Fatalf("runs: %+v", runs)
	}
	r := runs[1]
	if r.Runs != workers*each || r.Errors != 1 || r.LastTook != time.Millisecond {
		t.Errorf("PostToolUse: %+v", r)
	}
	if !strings.HasPrefix(r.LastError, "store locked: x") || len(r.LastError) > maxErrorBytes+len("…") || r.LastErrorAt.IsZero() || r.LastSuccess.IsZero() {
		t.Errorf("PostToolUse error: %q at %v, success %v", r.LastError[:20], r.LastErrorAt, r.LastSuccess)
	}
	if s := runs[2]; s.Runs != 1 || s.Errors != 0 || s.LastError != "" || s.LastSuccess != s.LastRun {
		t.Errorf("Stop: %+v", s)
	}
	// No temporary files are left behind.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != RunsFile && e.Name() != RunsFile+".lock" {
			t.Errorf("left in %s: %s", dir, e.Name())
		}
	}
}

func TestHarness_RecordRun_DamagedFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, RunsFile), []byte("{\"runs\": {"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Runs(dir); err == nil {
		t.Error("Runs of a damaged file: no error")
	}
	if err := RecordRun(dir, "codex", "Stop", 0, nil); err != nil {
		t.Fatal(err)
	}
	if runs, err := Runs(dir); err != nil || len(runs) != 1 {
		t.Errorf("after recording over a damaged file: %v %v", runs, err)
	}
}

func BenchmarkRecordRun(b *testing.B) {
	dir := b.TempDir()
	for _, e := range Events {
		if err := RecordRun(dir, "claude-code", e, time.Millisecond, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := RecordRun(dir, "claude-code", "PostToolUse", time.Millisecond, nil); err != nil {
			b.Fatal(err)
		}
	}
}
