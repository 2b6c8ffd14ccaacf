package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestCLI_Archivalist runs a small multi-session story through the CLI.
func TestCLI_Archivalist(t *testing.T) {
	e := newEnv(t)
	if out := e.ok("", "agents", "register", "--session", "s1", "--model", "claude-opus-4-5"); !strings.Contains(out, "registered o1 in session s1") {
		t.Fatalf("register: %q", out)
	}
	e.ok("", "agents", "register", "--parent", "o1", "--model", "claude-opus-4-5") // o2
	out := e.ok("", "pattern", "add", "wrap errors with %w so callers can match them", "--category", "error.handling", "--agent", "o1", "--session", "s1")
	if !strings.Contains(out, "created pat-1 (gv 1)") {
		t.Fatalf("pattern add: %q", out)
	}
	if out := e.ok("", "pattern", "add", "Wrap errors with %w, so callers can match them.", "--category", "error.handling", "--session", "s2"); !strings.Contains(out, "merged into pat-1 (hash") {
		t.Errorf("duplicate: %q", out)
	}
	code, _, errOut := e.run("", "pattern", "add", "never wrap errors, return them as they are so callers can match them", "--category", "error.handling", "--session", "s2")
	if code != 1 || !strings.Contains(errOut, "contradicts active pat-1") {
		t.Errorf("contradiction: exit %d, %q", code, errOut)
	}
	e.ok("", "pattern", "add", "never wrap errors, return them as they are so callers can match them", "--category", "error.handling",
		"--session", "s2", "--supersedes", "pat-1", "--reason", "sentinel errors are compared with ==")
	// An agent of s1 cannot write as s2.
	code, _, errOut = e.run("", "insight", "add", "x", "--agent", "o1", "--session", "s2")
	if code != 1 || !strings.Contains(errOut, "belongs to session s1") {
		t.Errorf("cross-session write: exit %d, %q", code, errOut)
	}
	e.ok("", "failure", "add", "--approach", "raw SQL in handlers", "--reason", "injection risk", "--resolution", "parameterized queries",
		"--outcome", "success", "--category", "database.sql", "--session", "s2")
	out = e.ok("", "intent", "declare", "rename db.Conn to db.Pool", "--path", "internal/db", "--session", "s2")
	if !strings.Contains(out, "created int-5") {
		t.Fatalf("intent: %q", out)
	}
	list := e.ok("", "pattern", "list")
	if !strings.Contains(list, "pat-2") || strings.Contains(list, "pat-1") {
		t.Errorf("active patterns:\n%s", list)
	}
	if out := e.ok("", "pattern", "list", "--if-gv", "5"); !strings.Contains(out, "NOT_MODIFIED") {
		t.Errorf("conditional list: %q", out)
	}
	if out := e.ok("", "failure", "list"); !strings.Contains(out, "fix: parameterized queries (1 success") {
		t.Errorf("failures:\n%s", out)
	}
	brief := e.ok("", "briefing", "--session", "s1", "--tier", "full")
	for _, want := range []string{"pat-2", "fail-3", "int-5", "2 agents"} {
		if !strings.Contains(brief, want) {
			t.Errorf("full briefing lacks %s:\n%s", want, brief)
		}
	}
	var b struct {
		GV, SV uint64
		Tokens int
	}
	if err := jsonUnmarshal(e.ok("", "briefing", "--session", "s1", "--json"), &b); err != nil || b.GV != 5 || b.SV != 2 || b.Tokens == 0 {
		t.Fatalf("briefing JSON: %+v, %v", b, err)
	}
	if out := e.ok("", "briefing", "--session", "s1", "--if-gv", "5", "--if-sv", "2"); !strings.Contains(out, "NOT_MODIFIED") {
		t.Errorf("conditional briefing: %q", out)
	}
	if out := e.ok("", "intent", "complete", "int-5", "--session", "s2"); !strings.HasPrefix(out, "completed int-5 ") {
		t.Errorf("intent complete: %q, want completed int-5", out)
	}
	// A delta of intents since the briefing's gv says which one ended.
	if out := e.ok("", "intent", "list", "--since", "5"); !strings.Contains(out, "completes int-5") {
		t.Errorf("intent list --since 5: %q", out)
	}
	if out := e.ok("", "intent", "list"); strings.Contains(out, "int-5") {
		t.Errorf("completed intent still listed:\n%s", out)
	}
	// --all lists it, as completed, by whom: not as open until it expires.
	if out := e.ok("", "intent", "list", "--all"); !strings.Contains(out, "int-5") || !strings.Contains(out, "completed by cli@s2 at") || strings.Contains(out, "until") {
		t.Errorf("a completed intent in intent list --all:\n%s", out)
	}
	if out := e.ok("", "intent", "list", "--all", "--json"); !strings.Contains(out, `"completed_by": "cli@s2"`) || !strings.Contains(out, `"completed_at": "`) {
		t.Errorf("a completed intent in intent list --all --json:\n%s", out)
	}
	events := e.ok("", "events", "-n", "100")
	for _, want := range []string{"agent_register", "pattern_add", "pattern_merge", "failure_add", "resolution_add", "intent_add", "intent_complete"} {
		if !strings.Contains(events, want) {
			t.Errorf("events lack %s:\n%s", want, events)
		}
	}
	// Each event names its agent in its session once: o1 of s1 as o1@s1,
	// the operator agent cli@s2 as itself, not cli@s2@s2.
	if !strings.Contains(events, " o1@s1 error.handling pat-1") || !strings.Contains(events, " cli@s2 intents int-5") || strings.Contains(events, "cli@s2@s2") {
		t.Errorf("events name their agents:\n%s", events)
	}
	// 0 is not "the default": the command's is 20, the API's 100.
	e.fail("", 2, "--limit 0: give 1 to 1000 events", "events", "-n", "0")
	if n := strings.Count(e.ok("", "events", "-n", "3"), "\n"); n != 3 {
		t.Errorf("events -n 3: %d lines", n)
	}
	// Session state through the CLI, and the hierarchy: o2 is o1's sub-agent.
	e.ok("", "session", "resume", "--agent", "o1", "--task", "auth rewrite", "--current", "middleware", "--next", "tests", "--next", "docs")
	// A blocker, then --blocker= clears the list; the rest stays.
	e.ok("", "session", "resume", "--agent", "o1", "--blocker", "waiting on the signing keys")
	if show := e.ok("", "session", "show", "--session", "s1"); !strings.Contains(show, "waiting on the signing keys") {
		t.Errorf("session show lacks the blocker:\n%s", show)
	}
	e.ok("", "session", "resume", "--agent", "o1", "--blocker=")
	if show := e.ok("", "session", "show", "--session", "s1"); strings.Contains(show, "waiting on the signing keys") || !strings.Contains(show, "tests; docs") {
		t.Errorf("--blocker= should clear the blockers and keep the rest:\n%s", show)
	}
	code, _, errOut = e.run("", "session", "resume", "--agent", "o2", "--current", "something else")
	if code != 1 || !strings.Contains(errOut, "cannot override its parent") {
		t.Errorf("sub-agent overriding its parent: exit %d, %q", code, errOut)
	}
	e.ok("", "session", "file", "internal/auth/jwt.go", "--agent", "o2", "--summary", "expiry check")
	e.ok("", "session", "want", "keep the public API stable", "--agent", "o1")
	e.ok("", "session", "reject", "global state", "--agent", "o2")
	show := e.ok("", "session", "show", "--session", "s1")
	for _, want := range []string{"auth rewrite", "middleware (by o1)", "tests; docs", "internal/auth/jwt.go (modified by o2) expiry check",
		"keep the public API stable", "global state", "o1 o2"} {
		if !strings.Contains(show, want) {
			t.Errorf("session show lacks %q:\n%s", want, show)
		}
	}
	var sr struct{ SV uint64 }
	if err := jsonUnmarshal(e.ok("", "session", "show", "--session", "s1", "--json"), &sr); err != nil || sr.SV == 0 {
		t.Fatalf("session show --json: %+v, %v", sr, err)
	}
	if out := e.ok("", "session", "show", "--session", "s1", "--if-sv", fmt.Sprint(sr.SV)); !strings.Contains(out, "NOT_MODIFIED") {
		t.Errorf("conditional session show: %q", out)
	}
	if out := e.ok("", "briefing", "--session", "s1", "--tier", "micro"); strings.TrimSpace(out) != "auth-rewrite:1/3:jwt.go(m):block=none:mem=1p,1f" {
		t.Errorf("micro briefing: %q", out)
	}

	// The query language and questions in words.
	if out := e.ok("", "arch", "@arch:recall:patterns?scope=error"); !strings.Contains(out, "pat-2") {
		t.Errorf("arch recall: %q", out)
	}
	if out := e.ok("", "arch", `@arch:store:learning{insight:"prepared statements are costly in pure-Go SQLite"}`, "--session", "s1"); !strings.Contains(out, "created ins-") {
		t.Errorf("arch store: %q", out)
	}
	if out := e.ok("", "arch", "what did we learn about prepared statements?"); !strings.Contains(out, "prepared statements are costly") {
		t.Errorf("arch question: %q", out)
	}
	// A question about what the memory holds now is a recall.
	if out := e.ok("", "arch", "what patterns do we have for error handling?"); !strings.Contains(out, "pat-2") {
		t.Errorf("arch question about what the memory holds: %q", out)
	}
	// A question about what to do is refused, and the exit status says so.
	if code, out, errOut := e.run("", "arch", "how should we handle errors?"); code != 1 || out != "" ||
		!strings.Contains(errOut, `error: refused "how should we handle errors?": it asks what to do (should, how should we)`) {
		t.Errorf("arch prospective question: exit %d, %q, %q", code, out, errOut)
	}
	if code, out, _ := e.run("", "arch", "what did we learn about prepared statements? how should we handle errors?", "--json"); code != 1 ||
		!strings.Contains(out, `"status": "REFUSED"`) || !strings.Contains(out, "prepared statements are costly") {
		t.Errorf("arch --json with a refused question: exit %d, %q", code, out)
	}
	if code, _, errOut := e.run("", "arch", "@arch:recall:wat"); code != 1 || !strings.Contains(errOut, `unknown domain "wat"`) {
		t.Errorf("arch malformed: exit %d, %q", code, errOut)
	}
	if out := e.ok("", "agents", "--session", "nobody", "--json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("agents of an unknown session: %q", out)
	}
	for _, bad := range [][]string{
		{"pattern", "add", "x", "--category", "cooking.pasta"},
		{"briefing", "--session", "nosuch"},
		{"briefing", "--session", "s1", "--tier", "huge"},
		{"failure", "resolve", "fail-99", "--approach", "x", "--outcome", "success"},
		{"insight", "add", "x", "--agent", "ghost"},
	} {
		if code, _, errOut := e.run("", bad...); code == 0 || errOut == "" {
			t.Errorf("engram %s: exit %d, %q", strings.Join(bad, " "), code, errOut)
		}
	}
}

// TestCLI_ArchLLM configures a chat model (an httptest server speaking
// OpenAI's /chat/completions) and checks questions go to it.
func TestCLI_ArchLLM(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer sk-cli" {
			t.Errorf("%s, auth %q", r.URL.Path, r.Header.Get("Authorization"))
		}
		args := `{"is_retrospective": true, "intent": "recall", "domain": "patterns", "confidence": 0.92}`
		_ = json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"message": map[string]any{
			"role": "assistant", "tool_calls": []any{map[string]any{"id": "c1", "type": "function",
				"function": map[string]any{"name": "classify_archivalist_query", "arguments": args}}}}}}})
	}))
	defer srv.Close()
	e := newEnv(t)
	e.ok("", "pattern", "add", "wrap errors with %w", "--category", "error.handling", "--session", "s1")
	e.vars["ENGRAM_LLM_PROVIDER"] = "openai"
	e.vars["ENGRAM_LLM_MODEL"] = "test-model"
	e.vars["ENGRAM_LLM_URL"] = srv.URL + "/v1"
	e.vars["OPENAI_API_KEY"] = "sk-cli"
	var ans []struct {
		Status         string
		Classification struct{ By string }
		Records        []struct{ ID string }
	}
	if err := jsonUnmarshal(e.ok("", "arch", "error wrapping conventions", "--json"), &ans); err != nil {
		t.Fatal(err)
	}
	if len(ans) != 1 || ans[0].Classification.By != "llm:test-model" || ans[0].Status != "OK" || len(ans[0].Records) != 1 || calls.Load() != 1 {
		t.Errorf("answer %+v after %d calls", ans, calls.Load())
	}
	e.vars["ENGRAM_LLM_MODEL"] = ""
	if code, _, errOut := e.run("", "arch", "x"); code == 0 || !strings.Contains(errOut, "llm.model") {
		t.Errorf("provider without a model: exit %d, %q", code, errOut)
	}
}

// TestCLI_RefusedWriteRegistersNoAgent: a write the archivalist refuses
// (an empty or oversized body, an unknown kind, a bad category or status,
// a record that does not exist) registers no agent, not even the
// session's operator agent cli@SESSION; the first write that succeeds
// does.
func TestCLI_RefusedWriteRegistersNoAgent(t *testing.T) {
	e := newEnv(t)
	e.ok("", "agents", "register", "--session", "other") // a store, so that the lists below read one
	huge := strings.Repeat("x", 2_001)
	for i, bad := range [][]string{
		{"arch", `@arch:store:learning{insight:""}`},
		{"arch", `@arch:store:learning{insight:"` + huge + `"}`},
		{"arch", `@arch:store:recipes{insight:"x"}`},
		{"arch", `@arch:store:learning{insight:"x",mood:"good"}`},
		{"insight", "add", ""},
		{"insight", "add", huge},
		{"pattern", "add", "x", "--category", "cooking.pasta"},
		{"decision", "add", " "},
		{"failure", "add", "--approach", "x"},
		{"failure", "resolve", "fail-99", "--approach", "x", "--outcome", "success"},
		{"intent", "declare", "x"},
		{"intent", "complete", "int-99"},
		{"session", "file", "a.go", "--status", "eaten"},
		{"session", "want", ""},
	} {
		session := fmt.Sprintf("r%d", i)
		name := strings.ReplaceAll(strings.Join(bad, " "), huge, "x…(2001 bytes)")
		if code, _, errOut := e.run("", append(bad, "--session", session)...); code == 0 || errOut == "" {
			t.Errorf("engram %s: exit %d, %q; want it refused", name, code, errOut)
		}
		if out := e.ok("", "agents", "--session", session, "--json"); strings.TrimSpace(out) != "[]" {
			t.Errorf("engram %s, refused, registered: %s", name, out)
		}
	}
	e.ok("", "insight", "add", "a write that succeeds registers the agent", "--session", "r0")
	if out := e.ok("", "agents", "--session", "r0", "--json"); !strings.Contains(out, `"id": "cli@r0"`) {
		t.Errorf("a write that succeeded: agents %s, want cli@r0", out)
	}
}

// TestCLI_ArchNoStore: a question or a recall query asked of a project
// with no store yet says so and makes none; a store query makes it.
func TestCLI_ArchNoStore(t *testing.T) {
	e := newEnv(t)
	db := filepath.Join(e.vars["ENGRAM_DATA_DIR"], "projects")
	for _, q := range []string{"what did we decide about retries?", "@arch:recall:patterns"} {
		code, out, errOut := e.run("", "arch", q)
		if code != 1 || out != "" || !strings.Contains(errOut, "no store yet") {
			t.Errorf("arch %q with no store: exit %d, stdout %q, stderr %q", q, code, out, errOut)
		}
		if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("arch %q made a store: %v", q, err)
		}
	}
	e.ok("", "arch", `@arch:store:pattern{pattern:"use a fake clock",category:"testing.unit"}`)
	if out := e.ok("", "arch", "@arch:recall:patterns"); !strings.Contains(out, "fake clock") {
		t.Errorf("recall after a store: %q", out)
	}
}
