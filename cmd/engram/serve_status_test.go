package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestServe_IndexStatus: engram serve, which indexes the project, reports
// its watcher's live state at GET /v1/index: the first run's update once
// it is done, with the project's file counted.
func TestServe_IndexStatus(t *testing.T) {
	e := newEnv(t)
	if err := os.WriteFile(e.project+"/retry.go", []byte("package p\n\nfunc Backoff(n int) int { return n * n }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, url, tokenFile := startServe(ctx, t, e)
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	type indexOut struct {
		Files    map[string]int64
		Watching bool
		Live     *struct {
			Updates int64
			Last    *struct{ New int }
		}
	}
	get := func() indexOut {
		req, _ := http.NewRequestWithContext(ctx, "GET", url+"/v1/index", nil)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		var out indexOut
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&out) != nil {
			t.Fatalf("GET /v1/index: HTTP %d", resp.StatusCode)
		}
		return out
	}
	// The index is built in the background: wait for its first update.
	deadline := time.Now().Add(30 * time.Second)
	out := get()
	for out.Live == nil || out.Live.Last == nil {
		if !out.Watching || time.Now().After(deadline) {
			t.Fatalf("no index update reported within 30s: %+v", out)
		}
		time.Sleep(100 * time.Millisecond)
		out = get()
	}
	// (The first update is the first run, which found the file; a
	// watcher's batch after it would be the last.)
	if out.Live.Updates < 1 || (out.Live.Updates == 1 && out.Live.Last.New != 1) || out.Files["current"] != 1 {
		t.Errorf("after the first run: %+v, last %+v, files %v", out.Live, out.Live.Last, out.Files)
	}
}
