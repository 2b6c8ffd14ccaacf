package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/engramhq/engram/internal/harness"
)

// TestMCP_Stdio runs the built binary as an MCP server over stdio, as an
// agent harness does, and performs a session with the SDK's client:
// briefing, search, record, retrieve.
func TestMCP_Stdio(t *testing.T) {
	e := newEnv(t)
	e.ok(readExample(t), "add")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := e.command(ctx, "mcp", "--session", "s-mcp", "--agent", "claude-1", "--model", "claude-opus-4-5")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	c := mcp.NewClient(&mcp.Implementation{Name: "test-harness", Version: "v0"}, nil)
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr.String())
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 18 {
		t.Fatalf("tools: %d, %v", len(tools.Tools), err)
	}
	callText := func(name string, args map[string]any) string {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if res.IsError {
			t.Fatalf("%s: tool error %v", name, res.Content)
		}
		return res.Content[0].(*mcp.TextContent).Text
	}
	if got := callText("briefing", map[string]any{"tier": "micro"}); !strings.HasPrefix(got, "none:1/1") {
		t.Errorf("briefing: %q", got)
	}
	if got := callText("search", map[string]any{"query": "flaky retry backoff"}); !strings.Contains(got, "demo-flaky-test") {
		t.Errorf("search: %q", got)
	}
	if got := callText("record", map[string]any{"type": "note", "content": "the upload retry needs jitter"}); !strings.Contains(got, "recorded") {
		t.Errorf("record: %q", got)
	}
	if got := callText("retrieve_context", map[string]any{"query": "upload retry jitter"}); !strings.Contains(got, "needs jitter") {
		t.Errorf("retrieve_context: %q", got)
	}
	callText("record_insight", map[string]any{"insight": "jitter fixes the flaky upload test"})
	if err := cs.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if strings.Contains(stderr.String(), "panic") {
		t.Errorf("server stderr:\n%s", stderr.String())
	}
	// What the agent wrote is in the store, in its session.
	if out := e.ok("", "events", "-n", "5"); !strings.Contains(out, "insight_add") || !strings.Contains(out, "claude-1@s-mcp") {
		t.Errorf("events after the session:\n%s", out)
	}
}

func TestMCP_PrintConfig(t *testing.T) {
	e := newEnv(t)
	var claude struct {
		MCPServers map[string]struct {
			Type    string
			Command string
			Args    []string
			URL     string
			Headers map[string]string
		} `json:"mcpServers"`
	}
	// The test binary lives in a temporary directory, as go run's does:
	// with no engram on PATH, the command is engram, and how to install it
	// is said.
	for _, name := range []string{"claude-code", "claude"} {
		code, out, errOut := e.run("", "mcp", "--print-config", name)
		if code != 0 || jsonUnmarshal(out, &claude) != nil {
			t.Fatalf("%s: exit %d %s %s", name, code, out, errOut)
		}
		s := claude.MCPServers["engram"]
		if s.Type != "stdio" || s.Command != "engram" || !slices.Equal(s.Args, []string{"mcp", "--project", e.project, "--harness", "claude-code"}) {
			t.Errorf("%s config: %+v", name, claude)
		}
		if !strings.Contains(errOut, "go install ./cmd/engram") {
			t.Errorf("%s: no word on installing engram: %q", name, errOut)
		}
	}
	// An engram installed on PATH is named by its path, which lasts.
	bin := filepath.Join(e.project, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "engram"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	e.vars["PATH"] = "/nonexistent" + string(filepath.ListSeparator) + bin
	if !transient(filepath.Join(bin, "engram")) {
		t.Fatal("t.TempDir is not a temporary directory")
	}
	// One in a temporary directory is not taken for installed, and the
	// note says which it passed over (it said engram was not installed).
	code, out, errOut := e.run("", "mcp", "--print-config", "claude-code")
	if err := jsonUnmarshal(out, &claude); err != nil || code != 0 || claude.MCPServers["engram"].Command != "engram" ||
		!strings.Contains(errOut, "the engram found, "+filepath.Join(bin, "engram")+", is in a temporary directory") {
		t.Errorf("engram in a temporary directory: exit %d, %+v, %q", code, claude, errOut)
	}
	t.Setenv("TMPDIR", filepath.Join(e.project, "tmp")) // so that the fake install is not under it
	code, out, errOut = e.run("", "mcp", "--print-config", "claude-code")
	if err := jsonUnmarshal(out, &claude); err != nil || code != 0 || claude.MCPServers["engram"].Command != filepath.Join(bin, "engram") || errOut != "" {
		t.Errorf("installed engram: exit %d, %+v, %q", code, claude, errOut)
	}
	// Codex's snippet approves engram's tools, which codex exec cannot ask about,
	// and passes the server the variables that name engram's store
	// (TestCodex_MCPPrintConfig runs it).
	if out := e.ok("", "mcp", "--print-config", "codex"); !strings.Contains(out, "\n[mcp_servers.engram]\ncommand = ") ||
		!strings.Contains(out, "\ndefault_tools_approval_mode = \"approve\"\n") || !strings.Contains(out, "\nenv_vars = [\"ENGRAM_DATA_DIR\", ") {
		t.Errorf("codex config: %q", out)
	}
	if out := e.ok("", "mcp", "--print-config", "cursor"); !strings.Contains(out, `"mcpServers"`) {
		t.Errorf("cursor config: %q", out)
	}
	if code, _, errOut := e.run("", "mcp", "--print-config", "vim"); code != 2 || !strings.Contains(errOut, "claude-code") {
		t.Errorf("unknown client: exit %d, %q", code, errOut)
	}
	// The HTTP form names engram serve's endpoint with the server's token,
	// or the variable holding it.
	tok := strings.TrimSpace(e.ok("", "token"))
	code, out, errOut = e.run("", "mcp", "--print-config", "claude-code", "--http", "http://127.0.0.1:7411")
	if err := jsonUnmarshal(out, &claude); err != nil || code != 0 {
		t.Fatalf("http config: exit %d %s %s", code, out, errOut)
	}
	if s := claude.MCPServers["engram"]; s.Type != "http" || s.URL != "http://127.0.0.1:7411/mcp" || s.Headers["Authorization"] != "Bearer "+tok {
		t.Errorf("http config: %+v", s)
	}
	if !strings.Contains(errOut, "version control") {
		t.Errorf("no warning that the snippet holds the token: %q", errOut)
	}
	out = e.ok("", "mcp", "--print-config", "claude-code", "--http", "http://127.0.0.1:7411/mcp", "--token-env", "ENGRAM_TOKEN")
	if strings.Contains(out, tok) || !strings.Contains(out, "Bearer ${ENGRAM_TOKEN}") {
		t.Errorf("--token-env config: %s", out)
	}
	if out := e.ok("", "mcp", "--print-config", "codex", "--http", "http://127.0.0.1:7411"); !strings.Contains(out, `bearer_token_env_var = "ENGRAM_TOKEN"`) ||
		!strings.Contains(out, "\ndefault_tools_approval_mode = \"approve\"\n") || strings.Contains(out, tok) {
		t.Errorf("codex http config: %s", out)
	}
	if code, _, _ := e.run("", "mcp", "--print-config", "claude-code", "--http", "127.0.0.1:7411"); code != 2 {
		t.Errorf("a URL without a scheme: exit %d", code)
	}
}

// TestMCP_PrintConfigThenHooksInstall follows the README: the MCP server
// registered with --print-config first, the hooks installed later. The
// install must take the printed server for its own (installed, and
// nothing added beside it), not for one the user edited (Claude Code's
// .mcp.json) or a foreign table (Codex's config.toml), left in place with
// a server that does not follow the hooks' session.
func TestMCP_PrintConfigThenHooksInstall(t *testing.T) {
	e := newEnv(t)
	mcpJSON := filepath.Join(e.project, ".mcp.json")
	if err := os.WriteFile(mcpJSON, []byte(e.ok("", "mcp", "--print-config", "claude-code")), 0o644); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(e.vars["HOME"], ".codex", "config.toml")
	if err := os.MkdirAll(filepath.Dir(config), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(config, []byte("model = \"gpt-5-codex\"\n\n"+e.ok("", "mcp", "--print-config", "codex")), 0o644); err != nil {
		t.Fatal(err)
	}
	printed, err := os.ReadFile(mcpJSON)
	if err != nil {
		t.Fatal(err)
	}

	if out := e.ok("", "hooks", "install", "claude-code"); !strings.Contains(out, mcpJSON+": unchanged") || strings.Contains(out, "edited") {
		t.Errorf("install claude-code after --print-config:\n%s", out)
	}
	if b, _ := os.ReadFile(mcpJSON); string(b) != string(printed) {
		t.Errorf(".mcp.json changed by the install:\n%s", b)
	}
	if out := e.ok("", "hooks", "install", "codex", "--user"); !strings.Contains(out, config+": unchanged") || strings.Contains(out, "foreign") {
		t.Errorf("install codex --user after --print-config:\n%s", out)
	}
	if b, _ := os.ReadFile(config); strings.Count(string(b), "[mcp_servers.engram]") != 1 {
		t.Errorf("config.toml:\n%s", b)
	}

	var st hooksStatus
	if err := jsonUnmarshal(e.ok("", "hooks", "status", "--json"), &st); err != nil {
		t.Fatal(err)
	}
	servers := map[string]harness.State{}
	for _, f := range st.Files {
		for _, it := range f.Items {
			if it.Name == harness.MCPItem && it.State != harness.Absent {
				servers[string(f.Harness)+"/"+string(f.Scope)] = it.State
			}
		}
	}
	want := map[string]harness.State{"claude-code/project": harness.Present, "codex/user": harness.Present}
	if diff := cmp.Diff(want, servers); diff != "" {
		t.Errorf("MCP servers in hooks status (-want +got):\n%s", diff)
	}
}

// TestMCP_StdioBadInput sends the stdio server lines that are not JSON-RPC
// messages, an oversized one and unknown methods and tools: each gets a
// precise JSON-RPC error and the session goes on.
func TestMCP_StdioBadInput(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := e.command(ctx, "mcp", "--session", "raw")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewScanner(stdout)
	out.Buffer(make([]byte, 1<<20), 1<<20)
	send := func(lines ...string) {
		t.Helper()
		for _, l := range lines {
			if _, err := io.WriteString(stdin, l+"\n"); err != nil {
				t.Fatal(err)
			}
		}
	}
	next := func() map[string]any {
		t.Helper()
		if !out.Scan() {
			t.Fatalf("the server stopped answering: %v", out.Err())
		}
		var m map[string]any
		if err := json.Unmarshal(out.Bytes(), &m); err != nil {
			t.Fatalf("answer %q: %v", out.Text(), err)
		}
		return m
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`)
	if m := next(); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	// Each bad line, and the error it gets: a parse error, or an invalid
	// request, with the request's id where it has one that can be read.
	for _, tc := range []struct {
		line string
		code float64
		id   any
		want string
	}{
		{`this is not json`, -32700, nil, "not JSON"},
		{strings.Repeat("x", 17<<20), -32700, nil, "over 16777216 bytes"},
		{`42`, -32600, nil, "want an object"},
		{`{}`, -32600, nil, `"jsonrpc" must be "2.0"`},
		{`{"jsonrpc":"1.0","id":5,"method":"ping"}`, -32600, float64(5), `"jsonrpc" must be "2.0"`},
		{`{"id":"six","method":"ping"}`, -32600, "six", `"jsonrpc" must be "2.0"`},
		{`[{"jsonrpc":"2.0","id":20,"method":"ping"}]`, -32600, nil, "a batch"},
		{`[]`, -32600, nil, "a batch"},
		{`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, -32600, nil, "id must be a string or a number"},
		{`{"jsonrpc":"2.0","id":7,"method":12}`, -32600, float64(7), "method must be a name"},
		{`{"jsonrpc":"2.0","id":8}`, -32600, float64(8), "neither a request"},
		{`{"jsonrpc":"2.0","result":{}}`, -32600, nil, "must name the request"},
		{`{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"x"}}`, -32600, nil, "must name the request"},
		{`{"jsonrpc":"2.0","id":1e999,"method":"ping"}`, -32600, nil, "whole number"},
		{`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, -32600, nil, "whole number"},
	} {
		send(tc.line)
		m := next()
		e, _ := m["error"].(map[string]any)
		if e == nil || e["code"] != tc.code || m["id"] != tc.id || !strings.Contains(e["message"].(string), tc.want) {
			t.Errorf("bad line %.60s: %v, want error %v with %q, id %v", tc.line, m, tc.code, tc.want, tc.id)
		}
	}
	send(`{"jsonrpc":"2.0","id":2,"method":"no/such/method"}`)
	if m := next(); m["error"] == nil || m["id"] != float64(2) {
		t.Errorf("unknown method: %v", m)
	}
	send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"briefing","arguments":{"tier":"micro"}}}`)
	if m := next(); m["result"] == nil || m["id"] != float64(3) {
		t.Errorf("a tool call after the bad lines: %v", m)
	}
	if err := stdin.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("engram mcp after stdin closed: %v", err)
	}
}

// TestBenchTools counts engram's tool list in-process and, through
// --compare, that of the built binary's stdio server: the same 18 tools.
func TestBenchTools(t *testing.T) {
	e := newEnv(t)
	out := e.ok("", "bench", "tools", "--compare", binary(t)+" mcp --session bench")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("output:\n%s", out)
	}
	// SERVER TOOLS BYTES TOKENS PER-TOOL LARGEST, where SERVER and
	// LARGEST may hold spaces: count from the end.
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) < 7 || f[len(f)-6] != "18" {
			t.Errorf("row %q: want 18 tools", l)
		}
	}
	if strings.Fields(lines[1])[3] != strings.Fields(lines[2])[len(strings.Fields(lines[2]))-4] {
		t.Errorf("in-process and stdio lists differ in tokens:\n%s", out)
	}
}

// TestBenchToolResults makes the typical call of each tool against a small
// project with a recorded session: every call succeeds and has a size.
func TestBenchToolResults(t *testing.T) {
	e := newEnv(t)
	for path, content := range map[string]string{
		"retry.go":               "package p\n\n// Backoff waits longer after each failed attempt, with jitter.\nfunc Backoff(n int) int { return n * n }\n",
		"examples/session.jsonl": `{"session": "demo", "agent": "claude", "role": "user", "content": "why is the upload retry test flaky?"}` + "\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(e.project, path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(e.project, path), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := e.ok("", "bench", "tools", "--results", "--repo", e.project)
	rows := 0
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || !strings.Contains(l, ",") && !strings.HasPrefix(l, "record") && !strings.HasPrefix(l, "update") && !strings.HasPrefix(l, "declare") {
			continue
		}
		rows++
		if n, err := strconv.Atoi(f[len(f)-2]); err != nil || n <= 0 {
			t.Errorf("row %q: no text tokens", l)
		}
	}
	if rows != 18 {
		t.Errorf("%d result rows, want 18:\n%s", rows, out)
	}
}

func TestBenchServe(t *testing.T) {
	e := newEnv(t)
	out := e.ok("", "bench", "serve", "--messages", "300", "--clients", "4", "--duration", "300ms")
	rows := 0
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && (f[0] == "in-process" || f[0] == "http" || f[0] == "mcp") {
			rows++
			if f[3] != "0" {
				t.Errorf("errors in %q", l)
			}
		}
	}
	if rows != 6 {
		t.Errorf("output:\n%s", out)
	}
}

// TestBenchShed runs the load-shedding bench small: both phases answer,
// and with a few clients nothing is refused or times out. Each phase runs
// 3 s: a phase counts only the answers that come within it, and under
// -race on a loaded machine a phase of 300 ms once saw none.
func TestBenchShed(t *testing.T) {
	e := newEnv(t)
	out := e.ok("", "bench", "shed", "--messages", "300", "--clients", "3", "--duration", "3s")
	rows := 0
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 6 && (f[0] == "none" || f[0] == "engram") {
			rows++
			cols := strings.Split(l, "  ")
			var nums []string
			for _, c := range cols {
				if c = strings.TrimSpace(c); c != "" {
					nums = append(nums, c)
				}
			}
			if len(nums) < 5 || nums[2] != "0" || nums[3] != "0" || nums[1] == "0" {
				t.Errorf("row %q: want answers, no refusals or timeouts", l)
			}
		}
	}
	if rows != 2 {
		t.Errorf("output:\n%s", out)
	}
}

// TestMCP_StdioAnswersAtEndOfInput: requests piped in ahead of the end of
// input (printf ... | engram mcp) are all answered before the server
// exits; it answered the first alone, the end of input ending the session
// under the others.
func TestMCP_StdioAnswersAtEndOfInput(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := e.command(ctx, "mcp", "--session", "piped")
	cmd.Stdin = strings.NewReader(strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"piped","version":"0"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"record","arguments":{"type":"note","content":"piped in, then the end of input"}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"ping"}`,
	}, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("engram mcp: %v\n%s", err, out)
	}
	answered := map[float64]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var m struct {
			ID     float64         `json:"id"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil || m.Result == nil {
			t.Errorf("answer %.300q: %v", line, err)
			continue
		}
		answered[m.ID] = true
	}
	for id := range 4 {
		if !answered[float64(id+1)] {
			t.Errorf("request %d was not answered: %s", id+1, out)
		}
	}
}
