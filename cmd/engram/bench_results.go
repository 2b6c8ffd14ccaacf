package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/index"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// toolCall is one typical call of an MCP tool, as an agent would make it.
type toolCall struct {
	what string
	name string
	args map[string]any
}

// benchResults fills eng with the repository at root (indexed), the
// example session beside it and a little archive, then makes the typical
// call of every tool through cs and writes the tokens of each result: its
// text and its structured content (the server sends both here; Claude
// Code and Codex show the model the structured content when it comes).
func (a *app) benchResults(ctx context.Context, w io.Writer, eng *engine.Engine, cs *mcp.ClientSession, enc *tokens.Encoding, root string) error {
	fmt.Fprintf(a.stderr, "indexing %s...\n", root)
	sum, err := eng.Index(ctx, root, index.Options{Logger: a.log})
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "%d files indexed\n", sum.New)
	session := "demo-flaky-test"
	f, err := os.Open(filepath.Join(root, "examples", "session.jsonl"))
	if err != nil {
		return fmt.Errorf("typical results need a recorded session: %w", err)
	}
	lines, err := eng.ReadJSONL(f, engine.Record{})
	_ = f.Close()
	if err != nil {
		return err
	}
	recs := make([]engine.Record, len(lines))
	for i, l := range lines {
		recs[i] = l.Record
		session = l.Session
	}
	if err := eng.AddAll(ctx, recs, 100, nil); err != nil {
		return err
	}

	call := func(c toolCall) (*mcp.CallToolResult, error) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: c.name, Arguments: c.args})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		if res.IsError {
			return nil, fmt.Errorf("%s: %s", c.name, text(res))
		}
		return res, nil
	}
	// The archive a session would find: a few of each kind.
	for _, c := range []toolCall{
		{name: "record_pattern", args: map[string]any{"category": "error.handling", "pattern": "Wrap errors with the operation that failed", "example": `fmt.Errorf("open store: %w", err)`}},
		{name: "record_pattern", args: map[string]any{"category": "testing.flaky", "pattern": "Inject a clock instead of sleeping in tests"}},
		{name: "record_insight", args: map[string]any{"insight": "The upload retry test is flaky because backoff uses the wall clock", "category": "testing.flaky"}},
	} {
		if _, err := call(c); err != nil {
			return err
		}
	}
	hits, err := call(toolCall{name: "search", args: map[string]any{"query": "retry backoff", "limit": 1, "types": []string{"code_file"}}})
	if err != nil {
		return err
	}
	path := "README.md"
	if h := structured(hits)["places"]; h != nil {
		if hs, ok := h.([]any); ok && len(hs) > 0 {
			if where, ok := hs[0].(map[string]any)["where"].(string); ok {
				path, _, _ = strings.Cut(where, ":")
			}
		}
	}

	calls := []toolCall{
		{"search, 10 places", "search", map[string]any{"query": "retry with backoff and jitter", "limit": 10}},
		{"search_history, 10 results", "search_history", map[string]any{"query": "flaky upload test deadline", "max_results": 10}},
		{"get_file, 40 lines", "get_file", map[string]any{"path": path, "start_line": 1, "end_line": 40}},
		{"prefetch, budget 2,000", "prefetch", map[string]any{"query": "why is the upload retry test flaky", "budget": 2000}},
		{"retrieve_context, by query", "retrieve_context", map[string]any{"query": "upload retry deadline", "max_tokens": 2000}},
		{"get_turn_range, 6 turns", "get_turn_range", map[string]any{"session": session, "from": 1, "to": 6}},
		{"record, a tool result", "record", map[string]any{"type": "tool_result", "content": "ok  \tgithub.com/acme/upload\t0.412s"}},
		{"briefing, micro", "briefing", map[string]any{"tier": "micro"}},
		{"briefing, standard", "briefing", map[string]any{}},
		{"briefing, full", "briefing", map[string]any{"tier": "full"}},
		{"recall, a question", "recall", map[string]any{"query": "what do we know about flaky tests?"}},
		{"record_failure, with resolution", "record_failure", map[string]any{"approach": "time.Sleep in the retry test", "reason": "flaky under load",
			"category": "testing.flaky", "resolution": "a fake clock", "outcome": "success"}},
		{"record_decision", "record_decision", map[string]any{"decision": "Retries use a jittered exponential backoff", "rationale": "avoid thundering herds"}},
		{"update_resume", "update_resume", map[string]any{"task": "fix the flaky upload test", "current": "injecting a clock", "next": []string{"run the race detector"}}},
		{"update_file", "update_file", map[string]any{"path": "internal/upload/retry.go", "summary": "clock injected"}},
		{"declare_intent", "declare_intent", map[string]any{"description": "rename Uploader to Sender", "paths": []string{"internal/upload"}}},
	}
	fmt.Fprintln(w, "\nTYPICAL RESULT\tTEXT TOKENS\tSTRUCTURED TOKENS")
	for _, c := range calls {
		res, err := call(c)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s\t%d\t%d\n", c.what, enc.Count(text(res)), structuredTokens(enc, res))
	}
	// The session's window, as its harness would have kept it: an 8,000
	// token window with the conversation appended turn by turn (after the
	// calls above, whose turns it would add to).
	if err := a.benchWindow(ctx, eng, filepath.Join(root, "examples", "session.jsonl")); err != nil {
		return err
	}
	res, err := call(toolCall{name: "window", args: map[string]any{"session": session}})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s\t%d\t%d\n", "window, status", enc.Count(text(res)), structuredTokens(enc, res))
	// A briefing the agent already holds (the versions moved since the
	// standard one: ask again, then ask with what came back).
	res, err = call(toolCall{name: "briefing", args: map[string]any{}})
	if err != nil {
		return err
	}
	s := structured(res)
	gv, _ := s["gv"].(float64)
	sv, _ := s["sv"].(float64)
	res, err = call(toolCall{name: "briefing", args: map[string]any{"gv": gv, "sv": sv}})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s\t%d\t%d\n", "briefing, unchanged", enc.Count(text(res)), structuredTokens(enc, res))
	return nil
}

// benchWindow opens a window for each session and agent of the records in
// file, and appends their conversation to it turn by turn.
func (a *app) benchWindow(ctx context.Context, eng *engine.Engine, file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	convs, err := readAddRecords(eng, f, file)
	if err != nil {
		return err
	}
	m, err := a.windowManager(eng)
	if err != nil {
		return err
	}
	for _, c := range convs {
		if _, err := m.Open(ctx, c.key, window.OpenOptions{Limit: 8000}); err != nil {
			return err
		}
		for _, turn := range c.turns {
			msgs := make([]window.Message, len(turn))
			for i, t := range turn {
				msgs[i] = t.msg
			}
			if _, err := m.Append(ctx, c.key, msgs); err != nil {
				return fmt.Errorf("%s: %w", c.key, err)
			}
		}
	}
	return nil
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

func structured(res *mcp.CallToolResult) map[string]any {
	m, _ := res.StructuredContent.(map[string]any)
	return m
}

func structuredTokens(enc *tokens.Encoding, res *mcp.CallToolResult) int {
	if res.StructuredContent == nil {
		return 0
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return 0
	}
	return enc.Count(string(b))
}
