package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// env is a test environment: a project directory and a data directory of
// its own, so no test touches the user's stores.
type env struct {
	t       *testing.T
	project string
	vars    map[string]string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	root := t.TempDir()
	project := filepath.Join(root, "project")
	if err := os.Mkdir(project, 0o755); err != nil {
		t.Fatal(err)
	}
	// The user's config: searches wait for both signals. On a loaded
	// machine (the race detector, CI testing packages side by side) a
	// signal can take more than the default 250 ms, and tests of what
	// search finds would fail for the wrong reason.
	conf := filepath.Join(root, "home", ".config", "engram", "config.toml")
	if err := os.MkdirAll(filepath.Dir(conf), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, []byte("[retrieve]\ndeadline = \"1m\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, project: project, vars: map[string]string{
		"HOME":            filepath.Join(root, "home"),
		"ENGRAM_DATA_DIR": filepath.Join(root, "data"),
		"ENGRAM_PROJECT":  project,
	}}
}

// run runs engram in-process and returns its exit status and output.
func (e *env) run(stdin string, args ...string) (code int, stdout, stderr string) {
	e.t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, strings.NewReader(stdin), &out, &errOut, func(k string) string { return e.vars[k] })
	return code, out.String(), errOut.String()
}

func (e *env) ok(stdin string, args ...string) string {
	e.t.Helper()
	code, out, errOut := e.run(stdin, args...)
	if code != 0 {
		e.t.Fatalf("engram %s: exit %d\n%s", strings.Join(args, " "), code, errOut)
	}
	return out
}

func readExample(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../examples/session.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCLI_AddSearchShow(t *testing.T) {
	e := newEnv(t)
	sample := readExample(t)
	ids := strings.Fields(e.ok(sample, "add"))
	if want := strings.Count(sample, "\n"); len(ids) != want {
		t.Fatalf("add printed %d ids for %d lines", len(ids), want)
	}
	out := e.ok("", "search", "backoff", "jitter")
	if !strings.Contains(out, "backoff") || !strings.Contains(out, "session demo-flaky-test") {
		t.Errorf("search output:\n%s", out)
	}
	if out := e.ok("", "stats", "--check", "--json"); !strings.Contains(out, `"ok": true`) {
		t.Errorf("stats --check --json: %q", out)
	}
	if out := e.ok("", "stats", "--check"); !strings.HasSuffix(out, ": ok\n") {
		t.Errorf("stats --check: %q", out)
	}
	var res searchJSON
	if err := json.Unmarshal([]byte(e.ok("", "search", "withRetry", "--json", "--type", "tool_result")), &res); err != nil {
		t.Fatal(err)
	}
	hits := res.Hits
	if !res.Lexical || len(hits) == 0 || hits[0].LexicalRank != 1 || hits[0].Type != "tool_result" || !strings.Contains(hits[0].Text, "withRetry") || hits[0].Files[0] != "internal/upload/retry.go" {
		t.Errorf("search --json = %+v", hits)
	}
	// show prints the content byte for byte.
	var first struct {
		Content string `json:"content"`
	}
	line := strings.SplitN(sample, "\n", 2)[0]
	if err := json.Unmarshal([]byte(line), &first); err != nil {
		t.Fatal(err)
	}
	if got := e.ok("", "show", ids[0][:8]); got != first.Content {
		t.Errorf("show = %q, want %q", got, first.Content)
	}
	var st statsJSON
	if err := json.Unmarshal([]byte(e.ok("", "stats", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Entries != int64(len(ids)) || st.Sessions != 1 || st.Links != 5 || st.Encoding != "o200k_base" {
		t.Errorf("stats = %+v", st)
	}
	// Adding the same input again replays every msg_id and stores nothing new.
	code, again, errOut := e.run(sample, "add", "--json")
	if code != 0 || !strings.Contains(errOut, "0 new entries") {
		t.Fatalf("second add: exit %d, %s", code, errOut)
	}
	if !strings.Contains(again, `"replayed":true`) {
		t.Errorf("second add --json: %s", again)
	}
}

func TestCLI_AddMalformed(t *testing.T) {
	e := newEnv(t)
	in := `{"session":"s","role":"user","content":"first line is fine"}
{"session":"s","role":"user","content":""}
{"session":"s","role":"user","content":"ok"}
{"session":"s","role":"user","content":"x","tunr":3}
{"session":"s","role":"user",`
	code, _, errOut := e.run(in, "add")
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	for _, want := range []string{"nothing was stored", "line 2: field content: is empty", "line 4: field tunr: unknown field", "line 5: invalid JSON"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	// Nothing was written: the store may exist but holds no entry.
	code, out, _ := e.run("", "stats", "--json")
	if code == 0 && !strings.Contains(out, `"entries": 0`) {
		t.Errorf("a malformed input wrote entries:\n%s", out)
	}
}

func TestCLI_ExitCodes(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"version"}, 0},
		{[]string{"models"}, 0},
		{[]string{"nonsense"}, 2},
		{[]string{"search"}, 2},
		{[]string{"search", "x", "--bogus-flag"}, 2},
		{[]string{"search", "x", "--type", "gossip"}, 2},
		{[]string{"search", "x", "--since", "last tuesday"}, 2},
		{[]string{"show"}, 2},
		{[]string{"stats", "extra"}, 2},
		{[]string{"search", "x"}, 1}, // no store yet
		{[]string{"add", "/no/such/file.jsonl"}, 1},
		{[]string{"--log-level", "loud", "version"}, 1},
		// A group given what is not one of its commands.
		{[]string{"window", "statsu"}, 2},
		{[]string{"bench", "nonsense"}, 2},
		{[]string{"window"}, 0},
		// Flag values a command cannot mean.
		{[]string{"audit", "--limit", "0"}, 2},
		{[]string{"show", "x.go", "--version", "-1"}, 2},
		{[]string{"show", "x.go:10-5"}, 2},
		{[]string{"intent", "declare", "rename", "--path", "x", "--ttl", "1000h"}, 2},
		{[]string{"index", "--workers", "-1", "--yes"}, 2},
		{[]string{"index", "--workers", "100000000", "--yes"}, 2},
		{[]string{"watch", "--workers", "257", "--yes"}, 2},
		{[]string{"index", "--exclude", "[", "--yes"}, 2},
		{[]string{"add", "--batch-size", "-1", "/no/such/file.jsonl"}, 2},
		{[]string{"proxy", "--max-body", "-1"}, 2},
		{[]string{"proxy", "--addr", "bogus"}, 2},
		{[]string{"serve", "--addr", "bogus"}, 2},
		{[]string{"search", "x", "--since", "2030-01-01", "--until", "2020-01-01"}, 2},
		{[]string{"failure", "add", "--approach", "a", "--reason", "b", "--outcome", "bogus"}, 2},
		// Commands that only read make no store.
		{[]string{"migrate", "--check"}, 0},
		{[]string{"pattern", "list"}, 1},
		{[]string{"briefing", "--session", "s1"}, 1},
		{[]string{"events"}, 1},
		{[]string{"agents"}, 1},
		{[]string{"session", "show", "--session", "s1"}, 1},
		{[]string{"window", "open", "--session", "s1", "--agent", "a", "--model", "no-such-model"}, 2},
		// A role for the model APIs' windows that names no policy (these
		// open the store first).
		{[]string{"proxy", "--role", "no-such-role"}, 2},
		{[]string{"serve", "--proxy-role", "no-such-role", "--addr", "127.0.0.1:0"}, 2},
	} {
		if code, _, errOut := e.run("", tc.args...); code != tc.code {
			t.Errorf("engram %s: exit %d, want %d\n%s", strings.Join(tc.args, " "), code, tc.code, errOut)
		}
	}
	// A value that does not parse is said in words, not in strconv's.
	for _, c := range [][]string{{"index", "--workers", "abc"}, {"index", "--max-file-size", "1e6"}, {"index", "--workers", "99999999999999999999"}} {
		code, _, errOut := e.run("", c...)
		if code != 2 || strings.Contains(errOut, "strconv") || !strings.Contains(errOut, c[2]) {
			t.Errorf("engram %s: exit %d, %q", strings.Join(c, " "), code, errOut)
		}
	}
	// A flag's value its operation refuses, in a command that takes all
	// its input from its command line, once there is a store.
	e.ok("", "add", filepath.Join("..", "..", "examples", "session.jsonl"))
	for _, args := range [][]string{
		{"pattern", "list", "--limit", "-1"},
		{"briefing", "--session", "s1", "--tier", "huge"},
		{"window", "snapshots", "--session", "s1", "--limit", "-1"},
		{"window", "context", "--session", "s1", "--format", "yaml"},
		{"window", "assemble", "--session", "s1", "--format", "yaml"},
		{"window", "assemble", "--session", "s1", "--retrieval", "sometimes"},
		{"window", "assemble", "--session", "s1", "--retrieval", "on", "--no-retrieval"},
		{"window", "assemble", "--session", "s1", "--briefing-file", "b.md", "--no-briefing"},
		{"show", "x.go:3-"},
		{"show", "x.go:1-99999999999999999999"},
	} {
		if code, _, errOut := e.run("", args...); code != 2 {
			t.Errorf("engram %s: exit %d, want 2\n%s", strings.Join(args, " "), code, errOut)
		}
	}
	if out := e.ok("", "migrate", "--check", "--json"); !strings.Contains(out, `"writes": `) || !strings.Contains(out, `"created": true`) {
		t.Errorf("migrate --check --json: %s", out)
	}
	if code, out, errOut := e.run("", "window", "statsu"); !strings.Contains(errOut, `unknown command "statsu" for "engram window"; did you mean status?`) || out != "" {
		t.Errorf("window statsu: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestCLI_StoreTooNew(t *testing.T) {
	e := newEnv(t)
	e.ok(`{"session":"s","role":"user","content":"hi"}`, "add")
	var st statsJSON
	if err := json.Unmarshal([]byte(e.ok("", "stats", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	// A newer engram would have bumped the schema version.
	db, err := sql.Open("sqlite", st.Store)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	code, _, errOut := e.run("", "search", "hi")
	if code != 1 || !strings.Contains(errOut, "newer engram") || !strings.Contains(errOut, "upgrade engram") {
		t.Errorf("exit %d, stderr %s", code, errOut)
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

func TestCLI_Tokens(t *testing.T) {
	e := newEnv(t)
	if got := e.ok("hello world\n", "tokens"); got != "3\n" {
		t.Errorf("tokens = %q, want 3", got)
	}
	// "\t\r\n\t\r\n" is one token in cl100k_base, where the library we take
	// the vocabulary from counts two.
	if got := e.ok("x\t\r\n\t\r\nZ", "tokens", "--model", "gpt-4"); got != "3\n" {
		t.Errorf("tokens --model gpt-4 = %q, want 3", got)
	}
	if code, _, _ := e.run("x", "tokens", "--model", "no-such-model"); code != 2 {
		t.Errorf("unknown model: exit %d, want 2", code)
	}
	if code, _, _ := e.run("x", "tokens", "--encoding", "r50k_base"); code != 2 {
		t.Errorf("unknown encoding: exit %d, want 2", code)
	}
	var models []map[string]any
	if err := jsonUnmarshal(e.ok("", "models", "--json"), &models); err != nil || len(models) < 20 {
		t.Errorf("models --json: %d models, %v", len(models), err)
	}
}
