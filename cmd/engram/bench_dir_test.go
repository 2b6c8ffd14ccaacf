package main

import (
	"os"
	"path/filepath"
	"testing"
)

// A benchmark's --dir is new, empty or an earlier run's: one holding
// anything else (a data directory with a real store in it) is refused,
// and nothing in it is touched, since a run replaces its stores there.
func TestBench_DirIsClaimed(t *testing.T) {
	e := newEnv(t)
	real := t.TempDir()
	store := filepath.Join(real, "engram.db")
	if err := os.WriteFile(store, []byte("a store a user keeps"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"bench", "ingest", "--messages", "10", "--batch", "5", "--dir", real},
		{"bench", "index", "--dir", real, t.TempDir()},
	} {
		e.fail("", 1, "holds files an earlier run did not make", args...)
	}
	if b, err := os.ReadFile(store); err != nil || string(b) != "a store a user keeps" {
		t.Fatalf("the store in --dir after the refused runs: %q, %v", b, err)
	}
	// A new directory is claimed, and serves the next run too.
	fresh := filepath.Join(t.TempDir(), "bench")
	for range 2 {
		e.ok("", "bench", "ingest", "--messages", "10", "--batch", "5", "--dir", fresh)
	}
}
