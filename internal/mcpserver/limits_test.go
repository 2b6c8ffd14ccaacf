package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/api"
)

// TestLimits: numbers out of their range are refused with the range, not
// replaced; zero is the default.
func TestLimits(t *testing.T) {
	cs, _ := newClient(t, Options{Session: "s1", Agent: "a1"})
	ok(t, cs, "record", map[string]any{"type": "tool_result", "content": "the retry loop backs off with jitter"})
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"search", map[string]any{"query": "retry", "limit": 100000}, "limit is 100000; it must be from 1 to 50, or 0 (the default, 10)"},
		{"search", map[string]any{"query": "retry", "limit": -5}, "limit is -5; it must be from 1 to 50, or 0 (the default, 10)"},
		{"search", map[string]any{"query": "retry", "paths": manyPaths(50_000)}, "paths: 50000 given; at most 256"},
		{"retrieve_context", map[string]any{"content_ids": manyPaths(101)}, "101 content_ids; at most 100 a call"},
		{"search", map[string]any{"query": "retry", "types": manyTypes(100_000)}, "types: 100000 given; at most 32"},
		{"search_history", map[string]any{"query": "retry", "max_results": 51}, "max_results is 51; it must be from 1 to 50"},
		{"retrieve_context", map[string]any{"query": "retry", "max_tokens": 9000}, "max_tokens is 9000; it must be from 100 to 8000, or 0 (the default, 4000)"},
		{"get_turn_range", map[string]any{"from": 1, "to": 2, "max_tokens": -1}, "max_tokens is -1; it must be from 100 to 8000"},
		{"prefetch", map[string]any{"query": "retry", "budget": -5}, "budget is -5; it must be from 1 to 32000, or 0 (the default, 2000)"},
		{"prefetch", map[string]any{"query": "retry", "remaining": -1}, "remaining is -1; it must be from 1 to 10000000, or 0 (not given)"},
		{"recall", map[string]any{"query": "what did we decide?", "budget": 100000}, "budget is 100000; it must be from 1 to 8000, or 0 (the default, 1000)"},
		{"recall", map[string]any{"query": "@arch:recall:patterns?budget=100000"}, "is not a number of tokens from 1 to 8000"},
		{"declare_intent", map[string]any{"description": "rename x", "paths": []string{"x"}, "ttl_minutes": -1}, "ttl_minutes is -1; it must be from 1 to 10080, or 0 (the default, 30)"},
		{"get_file", map[string]any{"path": "x.go", "start_line": -3}, "start_line is -3; it must be from 1 to"},
	} {
		text, res := call(t, cs, c.tool, c.args)
		if !res.IsError || !strings.Contains(text, c.want) {
			t.Errorf("%s(%v) = %q (error %v), want a tool error with %q", c.tool, c.args, text, res.IsError, c.want)
		}
	}
	// The extremes of the ranges are served.
	ok(t, cs, "search", map[string]any{"query": "retry", "limit": 50})
	ok(t, cs, "search", map[string]any{"query": "retry", "limit": 0})
	ok(t, cs, "retrieve_context", map[string]any{"query": "retry", "max_tokens": 8000})
	ok(t, cs, "recall", map[string]any{"query": "@arch:recall:patterns", "budget": 8000})
	// The least remaining leaves no room, and the answer says so.
	if got := ok(t, cs, "prefetch", map[string]any{"query": "retry", "remaining": 1}); !strings.HasPrefix(got, "no room to inject") {
		t.Errorf("prefetch with 1 token remaining: %q", got)
	}
}

// TestLimitsDescribed: the schemas state the ranges the operations check.
func TestLimitsDescribed(t *testing.T) {
	cs, _ := newClient(t, Options{Session: "s1", Agent: "a1"})
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]api.Range{"search.limit": api.LimitRange, "search_history.max_results": api.MaxResultsRange,
		"retrieve_context.max_tokens": api.MaxTokensRange, "get_turn_range.max_tokens": api.MaxTokensRange,
		"prefetch.budget": api.PrefetchBudget, "recall.budget": api.RecallBudgetRange, "declare_intent.ttl_minutes": api.TTLMinutesRange}
	for _, tool := range res.Tools {
		raw, _ := json.Marshal(tool.InputSchema)
		var schema struct {
			Properties map[string]struct {
				Description string `json:"description"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(raw, &schema); err != nil {
			t.Fatal(err)
		}
		for name, p := range schema.Properties {
			r, ok := want[tool.Name+"."+name]
			if !ok {
				continue
			}
			delete(want, tool.Name+"."+name)
			if s := fmt.Sprintf("%d-%d (default %d)", r.Min, r.Max, r.Default); !strings.Contains(p.Description, s) {
				t.Errorf("%s.%s = %q, want the range %q", tool.Name, name, p.Description, s)
			}
		}
	}
	if len(want) > 0 {
		t.Errorf("no such arguments: %v", want)
	}
}

// manyPaths and manyTypes are lists longer than a Filter holds.
func manyPaths(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("dir%d/", i)
	}
	return out
}

func manyTypes(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "code_file"
	}
	return out
}
