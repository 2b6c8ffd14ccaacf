package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/modelserver"
	"github.com/engramhq/engram/internal/proxy"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// startProxy runs engram proxy to upstream and returns its URL.
func startProxy(t testing.TB, env []string, upstream string) string {
	t.Helper()
	return startProxyWith(t, env, upstream, nil)
}

func startProxyWith(t testing.TB, env []string, upstream string, more []string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, binary(t), append([]string{"proxy", "--addr", addr, "--anthropic", upstream}, more...)...)
	cmd.Env = env
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Second
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "engram proxy on ") {
				ready <- sc.Text()
			} else {
				t.Log("proxy: " + sc.Text())
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("engram proxy did not start")
	}
	return "http://" + addr
}

// TestClaudeCode_Proxy runs the real Claude Code through engram proxy to
// the scripted model: every request reaches the model valid, and the
// session's window holds exactly the conversation Claude Code sent last,
// each message once, across a resumed run.
func TestClaudeCode_Proxy(t *testing.T) {
	srv := modelserver.Start(modelserver.Options{})
	defer srv.Close()
	cc := modelserver.NewClaudeCode(t, srv)
	dataDir := t.TempDir()
	env := append(cc.Env, "ENGRAM_DATA_DIR="+dataDir, "ENGRAM_TOKEN=proxy-test-token")
	url := startProxy(t, env, srv.URL())
	throughProxy(cc, url, "proxy-test-token")

	notes := filepath.Join(cc.Dir, "notes.txt")
	if err := os.WriteFile(notes, []byte("the secret word is PAPAYA\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv.Add(
		modelserver.Call("Read", map[string]any{"file_path": notes}),
		modelserver.Call("Bash", map[string]any{"command": "seq 1 50", "description": "count"}),
		modelserver.Say("PAPAYA, and I counted."),
	)
	res := cc.Prompt(t, "Read notes.txt and count.", "--allowedTools", "Read,Bash")
	srv.Add(modelserver.Say("Still PAPAYA."))
	cc.Prompt(t, "And now?", "--resume", res.SessionID)
	if err := srv.Err(); err != nil {
		t.Fatal(err)
	}
	main := srv.Requests(modelserver.KindMain)
	if len(main) != 4 {
		t.Fatalf("%d requests reached the model, want 4", len(main))
	}

	// The window is the last request's conversation, message for message.
	noSecondWindow(t, dataDir, res.SessionID) // --resume continues the conversation
	held := windowMessages(t, dataDir, res.SessionID)
	var last struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(main[len(main)-1].Body, &last); err != nil {
		t.Fatal(err)
	}
	if want := len(last.Messages) + 1; len(held) != want {
		t.Fatalf("the window holds %d messages; the last request sent %d and a system prompt", len(held), want-1)
	}
	// Equal but for what Claude Code moves between requests (its
	// cache_control breakpoints): the window keeps each message as first
	// sent.
	for i, raw := range last.Messages {
		sent, err := window.FromAnthropic(raw)
		if err != nil {
			t.Fatal(err)
		}
		got, err1 := proxy.MessageHash(held[i+1])
		want, err2 := proxy.MessageHash(sent)
		if err1 != nil || err2 != nil || got != want {
			b, _ := window.ToAnthropic(held[i+1])
			t.Errorf("message %d: the window holds\n%.300s\nthe request sent\n%.300s", i, b, raw)
		}
	}
}

// TestClaudeCode_ProxyLongSession runs the real Claude Code through engram
// proxy for 60 requests of file reads and commands with large outputs, a conversation far over its own
// compaction threshold (100,000-token window, 67,000 at which it compacts),
// with engram's window at 60,000 tokens (Claude Code's system prompt and
// tool schemas, about 26,000 of them, included) and at 38,000, whose room
// (about 2,700 tokens beside the system prompt) cannot hold the task and
// a file under its threshold together but by clipping the newest step
// (keepTask; before it, 60 of 61 requests lacked the task): every
// request reaches the model valid and within the window with the task's
// prompt, Claude Code never compacts, and at the end the model expands
// the first markers through engram's MCP tool and gets the first file's
// bytes back.
func TestClaudeCode_ProxyLongSession(t *testing.T) {
	for _, size := range []int{60000, 38000} {
		t.Run(strconv.Itoa(size), func(t *testing.T) { testClaudeCodeLongSession(t, size) })
	}
}

func testClaudeCodeLongSession(t *testing.T, size int) {
	srv := modelserver.Start(modelserver.Options{})
	defer srv.Close()
	cc := modelserver.NewClaudeCode(t, srv)
	dataDir := t.TempDir()
	env := append(cc.Env, "ENGRAM_DATA_DIR="+dataDir, "ENGRAM_TOKEN=proxy-test-token")
	url := startProxyArgs(t, env, srv.URL(), "--window", strconv.Itoa(size), "--project", cc.Dir)
	throughProxy(cc, url, "proxy-test-token")
	cc.Env = append(cc.Env, "ENGRAM_DATA_DIR="+dataDir,
		"CLAUDE_CODE_AUTO_COMPACT_WINDOW=100000")
	mcpConfig := engramCLI(t, env, cc.Dir, "mcp", "--print-config", "claude-code", "--project", cc.Dir)
	if err := os.WriteFile(filepath.Join(cc.Dir, ".mcp.json"), []byte(mcpConfig), 0o644); err != nil {
		t.Fatal(err)
	}

	const files = 59
	var steps []modelserver.Step
	var contents []string
	var commands []int // the steps that run a command instead, by the last number it prints
	for i := range files {
		if i%10 == 5 {
			// A command with a large output: 1,200 numbers.
			first := 100000 * (i + 1)
			steps = append(steps, modelserver.Call("Bash", map[string]any{"command": fmt.Sprintf("seq %d %d", first, first+1199), "description": "count"}))
			commands = append(commands, first+1199)
			contents = append(contents, "")
			continue
		}
		var b strings.Builder
		for j := 0; b.Len() < 7000; j++ {
			fmt.Fprintf(&b, "ledger %d line %d: the quartermaster counts crates of tea and tallow for voyage %d\n", i, j, i*1000+j)
		}
		p := filepath.Join(cc.Dir, fmt.Sprintf("ledger%02d.txt", i))
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		contents = append(contents, b.String())
		steps = append(steps, modelserver.Call("Read", map[string]any{"file_path": p}))
	}
	// At the end the model expands the first two markers (the first may
	// stand for the prompt alone, as Claude Code's first message is large;
	// in the small window, which joins its references to keep the task,
	// there may be only one) and finds the first file in what they give
	// back.
	steps = append(steps,
		func(r *modelserver.Request) (modelserver.Response, error) {
			var refs []string
			for _, m := range r.Params.Messages {
				for _, found := range ctxref.Find(m.Text()) {
					refs = append(refs, found.Marker.ID)
				}
			}
			if len(refs) == 0 {
				return modelserver.Response{}, fmt.Errorf("request %d carries no marker", r.Seq)
			}
			var calls []modelserver.Block
			for _, id := range refs[:min(2, len(refs))] {
				calls = append(calls, modelserver.ToolUse("mcp__engram__retrieve_context",
					map[string]any{"ref_id": id, "query": "ledger 0 line 5", "max_tokens": 1500}))
			}
			return modelserver.Response{Content: calls}, nil
		},
		func(r *modelserver.Request) (modelserver.Response, error) {
			var got []string
			for _, b := range r.Params.LastUser().Content {
				if b.Type == "tool_result" {
					got = append(got, b.ResultText())
				}
			}
			if len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), "ledger 0 line 5: the quartermaster") {
				return modelserver.Response{}, fmt.Errorf("the first markers' expansions (%d) lack the first file:\n%.1000s", len(got), strings.Join(got, "\n---\n"))
			}
			return modelserver.Response{Content: []modelserver.Block{modelserver.Text("Read them all.")}}, nil
		},
	)
	srv.Add(steps...)
	out, err := cc.Run(t, "-p", "Read the ledgers one by one.", "--output-format", "json", "--allowedTools", "Read,Bash,mcp__engram__retrieve_context")
	if serr := srv.Err(); serr != nil {
		t.Fatal(serr)
	}
	if err != nil {
		t.Fatal(err)
	}
	var res modelserver.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if res.Result != "Read them all." {
		t.Errorf("result = %q", res.Result)
	}
	if n := len(srv.Requests(modelserver.KindCompact)); n != 0 {
		t.Errorf("Claude Code compacted %d times", n)
	}
	main := srv.Requests(modelserver.KindMain)
	most := 0
	for _, r := range main {
		most = max(most, r.InputTokens)
	}
	if len(main) < 60 || most > size {
		t.Errorf("%d requests, the largest %d tokens; want at least 60, all within engram's window of %d (Claude Code compacts at 67,000)", len(main), most, size)
	}
	// The task stays in every request: the proxy's windows are tool
	// loops', which keep the newest turn's prompt as well as the newest
	// step, and some requests have had the steps before evicted. (Before
	// keepTask, a window whose room could not hold the prompt and the
	// newest step under its threshold let the prompt go: at 38,000 tokens
	// it went from the second request on. Smaller, with engram's MCP tools
	// beside Claude Code's, the room is less than the task's twice over,
	// and the task goes still.)
	virtualized := 0
	for _, r := range main {
		task := false
		for _, m := range r.Params.Messages {
			task = task || m.Role == "user" && strings.Contains(m.Text(), "Read the ledgers one by one.")
			if len(ctxref.Find(m.Text())) > 0 {
				virtualized++
			}
		}
		if !task {
			t.Errorf("request %d lacks the task's prompt", r.Seq)
		}
	}
	if virtualized == 0 {
		t.Error("no request upstream carries a marker: nothing was evicted")
	}
	// Every byte Claude Code sent is in the store: each file as the Read
	// tool gave it to the model (its lines numbered), in the window's
	// ledger (a block Claude Code marked with cache_control is kept whole,
	// as JSON).
	held := windowMessages(t, dataDir, res.SessionID)
	// One conversation, one window: Claude Code's in-place edits of its
	// history (old tool results cleared) never look like a prompt asked
	// again, which would start a window of its own.
	noSecondWindow(t, dataDir, res.SessionID)
	results := map[string]bool{}
	for _, m := range held {
		for _, b := range m.Blocks {
			if b.Type != window.BlockToolResult {
				continue
			}
			text := b.Text
			var raw struct {
				Content string `json:"content"`
			}
			if len(b.Raw) > 0 && json.Unmarshal(b.Raw, &raw) == nil {
				text = raw.Content
			}
			results[text] = true
		}
	}
	for _, last := range commands {
		found := false
		for r := range results {
			found = found || strings.HasSuffix(strings.TrimSpace(r), fmt.Sprintf("\n%d", last))
		}
		if !found {
			t.Errorf("the output of the command that counted to %d is not in the window's ledger", last)
		}
	}
	for i, content := range contents {
		if content == "" {
			continue // a command
		}
		lines := strings.Split(content, "\n")
		for j := range lines {
			lines[j] = fmt.Sprintf("%d\t%s", j+1, lines[j])
		}
		// Claude Code appends a reminder to some results (every tenth
		// here, about its TodoWrite tool), after the file's lines, the
		// last one's tab trimmed.
		found := false
		for r := range results {
			found = found || strings.HasPrefix(r, strings.TrimSuffix(strings.Join(lines, "\n"), "\t"))
		}
		if !found {
			t.Errorf("ledger %d as Claude Code sent it is not in the window's ledger", i)
		}
	}
	t.Logf("%d requests; the largest upstream %d tokens", len(main), most)

}

// windowMessages is the ledger of Claude Code's window of session in the
// store under dataDir.
func windowMessages(t *testing.T, dataDir, session string) []window.Message {
	t.Helper()
	return windowOf(t, dataDir, store.WindowKey{SessionID: session, AgentID: "claude-code"})
}

// noSecondWindow fails the test if the proxy started a second window for
// the session's conversation.
func noSecondWindow(t *testing.T, dataDir, session string, agent ...string) {
	t.Helper()
	st := openDataStore(t, dataDir)
	second := window.NextAgent(cmp.Or(append(agent, "claude-code")[0]))
	if _, err := st.Window(t.Context(), store.WindowKey{SessionID: session, AgentID: second}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the session has a second window (%v): the proxy took Claude Code's history for a conversation started over", err)
	}
}

// windowOf is the ledger of a window in the store under dataDir.
func windowOf(t *testing.T, dataDir string, key store.WindowKey) []window.Message {
	t.Helper()
	st := openDataStore(t, dataDir)
	eng, err := engine.New(st, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cat, err := tokens.NewCatalog()
	if err != nil {
		t.Fatal(err)
	}
	_, held, _, err := window.NewManager(eng, cat).Messages(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return held
}

// startProxyArgs is startProxy with more arguments.
// throughProxy points Claude Code at the engram proxy at url, with
// engram's token in the header Claude Code adds to every request.
func throughProxy(cc *modelserver.ClaudeCode, url, token string) {
	for i, kv := range cc.Env {
		if strings.HasPrefix(kv, "ANTHROPIC_BASE_URL=") {
			cc.Env[i] = "ANTHROPIC_BASE_URL=" + url
		}
	}
	cc.Env = append(cc.Env, "ANTHROPIC_CUSTOM_HEADERS=X-Engram-Token: "+token)
}

func startProxyArgs(t testing.TB, env []string, upstream string, args ...string) string {
	t.Helper()
	return startProxyWith(t, env, upstream, args)
}

// TestProxy_Metrics scrapes engram proxy's /metrics, which it serves in
// front of the paths it passes upstream, behind its own checks: the
// counters move with the requests, and a scrape without the token, from a
// web page or for a foreign host is refused.
func TestProxy_Metrics(t *testing.T) {
	srv := modelserver.Start(modelserver.Options{Main: []modelserver.Step{modelserver.Say("Counted.")}})
	defer srv.Close()
	const token = "metrics-token"
	env := []string{"HOME=" + t.TempDir(), "ENGRAM_DATA_DIR=" + t.TempDir(), "ENGRAM_TOKEN=" + token}
	url := startProxyArgs(t, env, srv.URL(), "--openai", srv.URL())
	do := func(method, path, body string, hdr ...string) (int, string) {
		t.Helper()
		return send(t, method, url+path, body, hdr...)
	}
	msg := `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"count me"}]}`
	anthropic := []string{"Content-Type", "application/json", "X-Api-Key", "sk-ant-test", "Anthropic-Version", "2023-06-01"}
	if code, body := do("POST", "/v1/messages", msg, append(anthropic, "X-Engram-Token", token)...); code != 200 || !strings.Contains(body, "Counted.") {
		t.Fatalf("a request: %d %s", code, body)
	}
	for range 2 {
		if code, _ := do("POST", "/v1/messages", msg, anthropic...); code != http.StatusUnauthorized {
			t.Fatalf("a request without the token: %d", code)
		}
	}
	for _, tc := range []struct {
		name   string
		hdr    []string
		status int
	}{
		{"no token", nil, http.StatusUnauthorized},
		{"a wrong token", []string{"Authorization", "Bearer nope"}, http.StatusUnauthorized},
		{"a web page", []string{"X-Engram-Token", token, "Origin", url}, http.StatusForbidden},
		{"a foreign host", []string{"X-Engram-Token", token, "Host", "evil.example.com"}, http.StatusForbidden},
	} {
		if code, body := do("GET", "/metrics", "", tc.hdr...); code != tc.status {
			t.Errorf("/metrics, %s: %d %s, want %d", tc.name, code, body, tc.status)
		}
	}
	// The token as the proxy takes it, or as Prometheus sends it.
	for _, hdr := range [][]string{{"X-Engram-Token", token}, {"Authorization", "Bearer " + token}} {
		code, body := do("GET", "/metrics", "", hdr...)
		if code != 200 {
			t.Fatalf("/metrics with %s: %d %s", hdr[0], code, body)
		}
		for _, want := range []string{
			`engram_proxy_refused_total{reason="token"} 2`,
			`engram_proxy_requests_total{route="messages"}`,
			`engram_proxy_layout_total{result="virtualized"}`,
			`engram_proxy_upstream_total{class="2xx"}`,
			`engram_proxy_answers_total{result="partial"}`,
			`engram_proxy_history_total{change="edit"}`,
			"engram_store_bytes",
		} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics with %s lacks %s:\n%s", hdr[0], want, grepLines(body, "engram_proxy_"))
			}
		}
	}
	// Other paths still go upstream: the model server's 404, not engram's.
	if code, body := do("GET", "/metrics/more", "", "X-Engram-Token", token); code != 404 || !strings.Contains(body, "not_found_error") {
		t.Errorf("/metrics/more: %d %s", code, body)
	}
}

// send sends body to url and returns the answer's status and body; hdr
// are header names and values in turn ("Host" sets the request's host).
func send(t *testing.T, method, url, body string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
