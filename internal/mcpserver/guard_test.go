package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/index"
)

// TestResultCap: a result over MaxResultBytes (here a whole large file)
// is a tool error that says how to narrow the call; the narrowed call is
// served, and what the operations' limits allow stays under the cap.
func TestResultCap(t *testing.T) {
	cs, eng := newClient(t, Options{Session: "s1", Agent: "a1", Structured: true})
	dir := t.TempDir()
	var big strings.Builder
	for i := range 4000 {
		fmt.Fprintf(&big, "// line %d: the upload retry loop backs off with jitter and gives up after a deadline\n", i)
	}
	if err := os.WriteFile(filepath.Join(dir, "big.go"), []byte("package upload\n\n"+big.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// And more files of several chunks each, for a search of 50 places
	// of 5 spans.
	for f := range 60 {
		var src strings.Builder
		for i := range 300 {
			fmt.Fprintf(&src, "// file %d line %d: the upload retry loop backs off with jitter and gives up after a deadline\n", f, i)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("up%02d.go", f)), []byte("package upload\n\n"+src.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := index.Run(context.Background(), eng.Store(), dir, index.Options{}); err != nil {
		t.Fatal(err)
	}
	text, res := call(t, cs, "get_file", map[string]any{"path": "big.go"})
	if !res.IsError || !strings.Contains(text, "over the 96 KB a tool result may take: read a range of lines (start_line, end_line)") {
		t.Errorf("a whole large file: %.200q (error %v)", text, res.IsError)
	}
	if got := ok(t, cs, "get_file", map[string]any{"path": "big.go", "start_line": 100, "end_line": 120}); !strings.Contains(got, "line 98: ") {
		t.Errorf("a range of the large file: %.200q", got)
	}
	// The most the limits allow: 50 places of 5 spans, 8,000 tokens.
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"search", map[string]any{"query": "upload retry loop jitter deadline", "limit": 50, "spans": 5}},
		{"retrieve_context", map[string]any{"query": "upload retry loop jitter deadline", "max_tokens": 8000}},
	} {
		text, res := call(t, cs, c.tool, c.args)
		if res.IsError {
			t.Fatalf("%s: %s", c.tool, text)
		}
		structured, _ := json.Marshal(res.StructuredContent)
		if c.tool == "search" {
			var out struct {
				Places []struct {
					Where string            `json:"where"`
					Spans []json.RawMessage `json:"spans"`
				} `json:"places"`
			}
			if err := json.Unmarshal(structured, &out); err != nil {
				t.Fatal(err)
			}
			distinct := map[string]bool{}
			for _, p := range out.Places {
				distinct[p.Where] = len(p.Spans) > 0 && len(p.Spans) <= 5
			}
			if len(out.Places) != 50 || len(distinct) != 50 {
				t.Errorf("search for 50 places: %d places, %d distinct", len(out.Places), len(distinct))
			}
		}
		if n := len(text) + len(structured); n > MaxResultBytes || n < MaxResultBytes/4 {
			t.Errorf("%s at its limit: %d bytes (cap %d)", c.tool, n, MaxResultBytes)
		} else {
			t.Logf("%s at its limit: %d bytes", c.tool, n)
		}
	}
}

// TestErrorCap: an error that quotes a megabyte argument is cut to
// MaxErrorBytes, and a query that finds nothing quotes itself short.
func TestErrorCap(t *testing.T) {
	cs, _ := newClient(t, Options{Session: "s1", Agent: "a1"})
	text, res := call(t, cs, "get_file", map[string]any{"path": strings.Repeat("a/", 500_000)})
	if !res.IsError || len(text) > MaxErrorBytes+64 || !strings.Contains(text, "bytes more of the error left out") {
		t.Errorf("an error quoting a 1 MB path: %d bytes, error %v: %.200q", len(text), res.IsError, text)
	}
	var words strings.Builder
	for i := range 100_000 {
		fmt.Fprintf(&words, "zq%dx ", i)
	}
	text, res = call(t, cs, "retrieve_context", map[string]any{"query": words.String()})
	if res.IsError || len(text) > 1000 || !strings.HasPrefix(text, "nothing found for") {
		t.Errorf("a long query that finds nothing: %d bytes, error %v: %.200q", len(text), res.IsError, text)
	}
}
