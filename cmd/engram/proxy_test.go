package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/modelserver"
	"github.com/engramhq/engram/internal/proxy"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// startProxy runs engram proxy to upstream and returns its URL.
func startProxy(t *testing.T, env []string, upstream string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, binary(t), "proxy", "--addr", addr, "--anthropic", upstream)
	cmd.Env = env
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
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
	for i, kv := range cc.Env {
		if strings.HasPrefix(kv, "ANTHROPIC_BASE_URL=") {
			cc.Env[i] = "ANTHROPIC_BASE_URL=" + url
		}
	}
	cc.Env = append(cc.Env, "ANTHROPIC_CUSTOM_HEADERS=X-Engram-Token: proxy-test-token")

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
	st := openDataStore(t, dataDir)
	eng, err := engine.New(st, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cat, err := tokens.NewCatalog()
	if err != nil {
		t.Fatal(err)
	}
	m := window.NewManager(eng, cat)
	_, held, _, err := m.Messages(t.Context(), store.WindowKey{SessionID: res.SessionID, AgentID: "claude-code"})
	if err != nil {
		t.Fatal(err)
	}
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
