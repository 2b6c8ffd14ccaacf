package mcpserver

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
)

var update = flag.Bool("update", false, "rewrite testdata/tools.json")

// newClient starts a server over a new store and connects the SDK's
// client to it through in-memory transports.
func newClient(t *testing.T, opts Options) (*mcp.ClientSession, *engine.Engine) {
	t.Helper()
	ctx := context.Background()
	st := sqlitetest.Open(t, sqlite.Options{})
	eng, err := engine.New(st, engine.Options{Embed: engine.EmbedOptions{Provider: "none"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := New(eng, opts)
	st1, st2 := mcp.NewInMemoryTransports()
	ss, err := srv.MCP().Connect(ctx, st1, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	c := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "v0"}, nil)
	cs, err := c.Connect(ctx, st2, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, eng
}

// call calls a tool and returns its text, failing on protocol errors.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, *mcp.CallToolResult) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res
}

func ok(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) string {
	t.Helper()
	text, res := call(t, cs, name, args)
	if res.IsError {
		t.Fatalf("%s(%v): tool error %s", name, args, text)
	}
	return text
}

func TestToolsSchemas(t *testing.T) {
	cs, _ := newClient(t, Options{Session: "s1", Agent: "a1"})
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.MarshalIndent(res.Tools, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "tools.json")
	if *update {
		if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -run TestToolsSchemas -update ./internal/mcpserver/)", err)
	}
	if strings.TrimSpace(string(want)) != strings.TrimSpace(string(got)) {
		t.Errorf("the tool list changed; if that is deliberate, run go test -run TestToolsSchemas -update ./internal/mcpserver/")
	}
	if len(res.Tools) != 18 {
		t.Errorf("%d tools", len(res.Tools))
	}
}

// TestSession_NotAnID: a session whose name an agent ID may not hold
// (a space, a letter outside ASCII, 61 bytes and more) still writes to the
// shared memory: its agent is mcp@ and the session made an ID.
func TestSession_NotAnID(t *testing.T) {
	for _, session := range []string{"a b", "ünï", strings.Repeat("s", 80)} {
		cs, _ := newClient(t, Options{Session: session})
		ok(t, cs, "update_resume", map[string]any{"task": "carry on"})
		if got := ok(t, cs, "record_pattern", map[string]any{"category": "testing.unit", "pattern": "one pattern for " + session}); !strings.HasPrefix(got, "created pat-") {
			t.Errorf("session %q: record_pattern: %q", session, got)
		}
		if got := ok(t, cs, "briefing", nil); !strings.Contains(got, "carry on") {
			t.Errorf("session %q: briefing: %q", session, got)
		}
	}
}

func TestSession(t *testing.T) {
	cs, eng := newClient(t, Options{Session: "s1", Agent: "a1", Model: "claude-opus-4-5", Structured: true})
	ctx := context.Background()
	if _, err := eng.Add(ctx, []engine.Record{{Session: "s0", Agent: "x", Type: store.ToolResult,
		Content: []byte("TestUploadRetry failed: context deadline exceeded after 3 retries with backoff")}}); err != nil {
		t.Fatal(err)
	}

	if got := ok(t, cs, "briefing", map[string]any{"tier": "micro"}); got != "none:1/1:-:block=none\n(gv=0 sv=1)" {
		t.Errorf("first briefing: %q", got)
	}
	ok(t, cs, "update_resume", map[string]any{"task": "fix flaky upload test", "current": "read the retry code", "next": []string{"patch", "run tests"}})
	ok(t, cs, "update_file", map[string]any{"path": "internal/upload/retry.go", "summary": "jitter added"})
	if got := ok(t, cs, "record_pattern", map[string]any{"category": "testing.unit", "pattern": "never sleep in tests; use a fake clock"}); !strings.HasPrefix(got, "created pat-") {
		t.Errorf("record_pattern: %q", got)
	}
	if got := ok(t, cs, "record_failure", map[string]any{"approach": "raising the test timeout", "reason": "still flaky under load",
		"resolution": "inject the clock", "outcome": "success", "category": "testing.unit"}); !strings.Contains(got, "resolution res-") {
		t.Errorf("record_failure: %q", got)
	}
	ok(t, cs, "record_insight", map[string]any{"insight": "CI machines have two cores, so timing tests flake"})
	ok(t, cs, "record_decision", map[string]any{"decision": "retries use full jitter", "rationale": "avoids thundering herds"})
	intent := ok(t, cs, "declare_intent", map[string]any{"description": "rename upload.Retry to upload.Backoff", "paths": []string{"internal/upload"}})

	brief := ok(t, cs, "briefing", nil)
	for _, want := range []string{"fix flaky upload test", "internal/upload/retry.go", "never sleep in tests", "raising the test timeout", "rename upload.Retry"} {
		if !strings.Contains(brief, want) {
			t.Errorf("briefing lacks %q:\n%s", want, brief)
		}
	}
	var b struct{ GV, SV uint64 }
	_, res := call(t, cs, "briefing", nil)
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &b); err != nil || b.GV == 0 || b.SV == 0 {
		t.Fatalf("structured briefing %s: %v", raw, err)
	}
	if got := ok(t, cs, "briefing", map[string]any{"gv": b.GV, "sv": b.SV}); !strings.HasPrefix(got, "NOT_MODIFIED") {
		t.Errorf("conditional briefing: %q", got)
	}
	if got := ok(t, cs, "recall", map[string]any{"query": "@arch:check:failures?approach=raising the timeout"}); !strings.Contains(got, "inject the clock") {
		t.Errorf("recall: %q", got)
	}
	if got := ok(t, cs, "recall", map[string]any{"query": "what should we do next?"}); !strings.Contains(got, "REFUSED") {
		t.Errorf("prospective recall: %q", got)
	}
	id := strings.Fields(intent)[1]
	ok(t, cs, "complete_intent", map[string]any{"intent_id": id})

	// Content: record, search, history, turns, retrieve.
	rec := ok(t, cs, "record", map[string]any{"type": "user_prompt", "content": "why does TestUploadRetry time out?", "msg_id": "m1"})
	if !strings.Contains(rec, "turn 1") {
		t.Errorf("record: %q", rec)
	}
	ok(t, cs, "record", map[string]any{"type": "agent_response", "content": "The retry loop sleeps without jitter.", "msg_id": "m2"})
	if got := ok(t, cs, "search", map[string]any{"query": "context deadline exceeded retries"}); !strings.Contains(got, "session s0") || !strings.Contains(got, "lines ") {
		t.Errorf("search: %q", got)
	}
	if got := ok(t, cs, "search_history", map[string]any{"query": "jitter", "session": "s1"}); !strings.Contains(got, "without jitter") {
		t.Errorf("search_history: %q", got)
	}
	turns := ok(t, cs, "get_turn_range", map[string]any{"from": 1, "to": 1})
	if !strings.Contains(turns, "why does TestUploadRetry time out?") || !strings.Contains(turns, "without jitter") {
		t.Errorf("get_turn_range: %q", turns)
	}
	if got := ok(t, cs, "retrieve_context", map[string]any{"query": "deadline exceeded", "max_tokens": 200}); !strings.Contains(got, "context deadline exceeded") {
		t.Errorf("retrieve_context: %q", got)
	}
	if got := ok(t, cs, "prefetch", map[string]any{"query": "TestUploadRetry deadline", "budget": 500}); got == "" {
		t.Error("prefetch: empty")
	}

	// The resources and the prompt.
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: briefingURI})
	if err != nil || !strings.Contains(rr.Contents[0].Text, "fix flaky upload test") {
		t.Errorf("briefing resource: %+v, %v", rr, err)
	}
	rr, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: statusURI})
	if err != nil || !strings.Contains(rr.Contents[0].Text, `"session":"s1"`) {
		t.Errorf("status resource: %+v, %v", rr, err)
	}
	pr, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "start_session"})
	if err != nil || len(pr.Messages) != 1 || !strings.Contains(pr.Messages[0].Content.(*mcp.TextContent).Text, "fix flaky upload test") {
		t.Errorf("prompt: %+v, %v", pr, err)
	}
}

func TestToolErrors(t *testing.T) {
	cs, _ := newClient(t, Options{Session: "s1", Agent: "a1"})
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"search", map[string]any{"query": "  "}, "empty"},
		{"search", map[string]any{"query": "x", "types": []string{"email"}}, `unknown content type "email"`},
		{"get_file", map[string]any{"path": "nope.go"}, "neither an indexed file"},
		{"record", map[string]any{"type": "user_prompt", "content": "x", "session": "s2"}, "writes to session s1, not s2"},
		{"record", map[string]any{"type": "gossip", "content": "x"}, "gossip"},
		{"record", map[string]any{"type": "code_file", "content": "package x"}, "the index's"},
		{"search_history", map[string]any{"query": "x", "content_type": "code_file"}, "search finds indexed files"},
		{"record", map[string]any{"type": "note", "content": "x", "files": []string{""}}, "is not a file's name"},
		{"record", map[string]any{"type": "note", "content": "x", "files": []string{"a\x00b"}}, "is not a file's name"},
		{"record", map[string]any{"type": "note", "content": "x", "msg_id": "m\x001"}, "holds a control character"},
		{"record_pattern", map[string]any{"category": "cooking.pasta", "pattern": "x"}, "unknown first level"},
		{"record_failure", map[string]any{"approach": "a", "reason": "b", "resolution": "c"}, "outcome"},
		{"record_failure", map[string]any{"approach": "a", "reason": "b", "outcome": "bogus"}, "give the resolution too"},
		{"record_failure", map[string]any{"failure_id": "fail-1", "approach": "a", "resolution": "c", "outcome": "success"}, "describe a new failure"},
		{"record_failure", map[string]any{"category": "testing.unit", "resolution": "c", "outcome": "success"}, "approach: is required"},
		{"briefing", map[string]any{"tier": "huge"}, "huge"},
		{"recall", map[string]any{"query": "@arch:recall:wat"}, "unknown domain"},
		// recall is annotated read-only: it writes nothing.
		{"recall", map[string]any{"query": `@arch:store:patterns{"category":"testing.unit","pattern":"via recall"}`}, "recall only reads"},
		{"get_turn_range", map[string]any{"from": 3, "to": 1}, "from <= to"},
		{"retrieve_context", map[string]any{}, "give ref_id"},
		{"retrieve_context", map[string]any{"ref_id": "[CTX-REF:nope]"}, "no reference"},
		{"complete_intent", map[string]any{"intent_id": "int-9"}, "int-9"},
	} {
		text, res := call(t, cs, c.tool, c.args)
		if !res.IsError || !strings.Contains(text, c.want) {
			t.Errorf("%s(%v) = %q (error %v), want a tool error with %q", c.tool, c.args, text, res.IsError, c.want)
		}
	}
	// Arguments that fail the schema are tool errors too, and unknown
	// tools are refused.
	text, res := call(t, cs, "search", map[string]any{"query": 42})
	if !res.IsError {
		t.Errorf("a number for query: %q", text)
	}
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "nope"}); err == nil {
		t.Error("an unknown tool was called")
	}
}

// TestToolErrors_DuplicateArguments: a call whose arguments give a member
// twice in one object is a tool error, and writes nothing; the SDK kept
// the last value and dropped the others (record stored "kept" alone).
func TestToolErrors_DuplicateArguments(t *testing.T) {
	cs, eng := newClient(t, Options{Session: "s1", Agent: "a1"})
	ctx := context.Background()
	before, err := eng.Store().Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tool string
		args string
		want string
	}{
		{"record", `{"type":"note","content":"lost","content":"kept"}`, `the arguments give "content" twice in one object (again at byte 32)`},
		{"record", `{"type":"note","content":"kept","files":["a.go"],"fil\u0065s":["b.go"]}`, `the arguments give "files" twice`},
		{"record_decision", `{"decision":"lost","rationale":"why","decision":"kept"}`, `"decision" twice`},
	} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: c.tool, Arguments: json.RawMessage(c.args)})
		if err != nil {
			t.Fatalf("%s %s: protocol error %v", c.tool, c.args, err)
		}
		text := ""
		if len(res.Content) > 0 {
			if tc, ok := res.Content[0].(*mcp.TextContent); ok {
				text = tc.Text
			}
		}
		if !res.IsError || !strings.Contains(text, c.want) {
			t.Errorf("%s %s = %q (error %v), want a tool error with %q", c.tool, c.args, text, res.IsError, c.want)
		}
	}
	after, err := eng.Store().Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Entries != before.Entries || after.Occurrences != before.Occurrences {
		t.Errorf("refused calls stored something: %d entries and %d occurrences, before %d and %d",
			after.Entries, after.Occurrences, before.Entries, before.Occurrences)
	}
	// Given once, the same call is taken.
	ok(t, cs, "record", map[string]any{"type": "note", "content": "kept"})
}

// TestIsolation: a connection's agent that belongs to another session is
// refused on its first write.
func TestIsolation(t *testing.T) {
	cs, eng := newClient(t, Options{Session: "s2", Agent: "a1"})
	arc, err := eng.Archive(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := arc.Register(context.Background(), archiveSpec("a1", "s1")); err != nil {
		t.Fatal(err)
	}
	text, res := call(t, cs, "record_insight", map[string]any{"insight": "x"})
	if !res.IsError || !strings.Contains(text, "belongs to session s1") {
		t.Errorf("cross-session agent: %q", text)
	}
}

func archiveSpec(id, session string) archive.AgentSpec {
	return archive.AgentSpec{ID: id, SessionID: session}
}

// TestCategoriesListed: the category taxonomy is closed, so every tool
// argument that takes a category lists the first levels it accepts, and
// a wrong category's error lists them too: an agent need not fail to
// learn them.
func TestCategoriesListed(t *testing.T) {
	cs, _ := newClient(t, Options{Session: "s1", Agent: "a1"})
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
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
			if name != "category" && name != "categories" {
				continue
			}
			n++
			if want := "; L1: " + strings.Join(archive.Categories(), " "); !strings.HasSuffix(p.Description, want) {
				t.Errorf("%s.%s = %q, want it to end with the first levels %q", tool.Name, name, p.Description, want)
			}
		}
	}
	if n != 5 { // record_pattern, record_failure, record_insight, record_decision, declare_intent
		t.Errorf("%d category arguments, want 5", n)
	}
	for _, args := range []map[string]any{
		{"category": "errors", "pattern": "x"},
		{"category": "cooking.pasta", "pattern": "x"},
	} {
		text, res := call(t, cs, "record_pattern", args)
		if !res.IsError || !strings.Contains(text, strings.Join(archive.Categories(), ", ")) {
			t.Errorf("record_pattern(%v) = %q, want an error listing the categories", args, text)
		}
	}
}
