package httpapi

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
)

func newEngine(t testing.TB) *engine.Engine {
	t.Helper()
	st := sqlitetest.Open(t, sqlite.Options{})
	eng, err := engine.New(st, engine.Options{Embed: engine.EmbedOptions{Provider: "none"}})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// headers adds headers to every request of a client.
type headers struct {
	h    map[string]string
	next http.RoundTripper
}

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.h {
		r.Header.Set(k, v)
	}
	return h.next.RoundTrip(r)
}

func connect(t *testing.T, url string, hdr map[string]string) (*mcp.ClientSession, error) {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	return c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url + "/mcp",
		HTTPClient: &http.Client{Transport: headers{hdr, http.DefaultTransport}}, MaxRetries: -1}, nil)
}

func TestMCPOverHTTP(t *testing.T) {
	var logs bytes.Buffer
	srv := httptest.NewServer(Handler(newEngine(t), Options{Token: "secret-token",
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}))
	defer srv.Close()
	ctx := context.Background()

	cs, err := connect(t, srv.URL, map[string]string{"Authorization": "Bearer secret-token", "X-Engram-Session": "s-http", "X-Engram-Agent": "a-http"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.Close() }()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 18 {
		t.Fatalf("tools: %v, %v", tools, err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "record_insight", Arguments: map[string]any{"insight": "streamable HTTP works"}})
	if err != nil || res.IsError {
		t.Fatalf("record_insight: %+v, %v", res, err)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "briefing", Arguments: map[string]any{"tier": "full"}})
	if err != nil || res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "briefing s-http") {
		t.Fatalf("briefing: %+v, %v", res, err)
	}

	// A wrong or missing token gets 401, logged without the token.
	for name, h := range map[string]map[string]string{"missing": nil, "wrong": {"Authorization": "Bearer guess"}} {
		if _, err := connect(t, srv.URL, h); err == nil {
			t.Errorf("%s token: connected", name)
		}
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/mcp", strings.NewReader(`{}`))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s token: HTTP %d", name, resp.StatusCode)
		}
	}
	if strings.Contains(logs.String(), "guess") || strings.Contains(logs.String(), "secret-token") || !strings.Contains(logs.String(), "wrong token") {
		t.Errorf("logs:\n%s", logs.String())
	}
	// An oversized MCP request is refused with 413.
	big, _ := http.NewRequest(http.MethodPost, srv.URL+"/mcp", strings.NewReader(strings.Repeat("x", MaxBodyBytes+1)))
	big.Header.Set("Authorization", "Bearer secret-token")
	big.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(big); err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized MCP request: %v, %v", resp, err)
	} else {
		_ = resp.Body.Close()
	}
	// Health needs no token.
	resp, err := http.Get(srv.URL + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v, %v", resp, err)
	}
	_ = resp.Body.Close()
}

// TestTrustLoopback: with TrustLoopback, a loopback caller without a
// token is let in; a wrong token is still refused.
func TestTrustLoopback(t *testing.T) {
	srv := httptest.NewServer(Handler(newEngine(t), Options{Token: "tok", TrustLoopback: true}))
	defer srv.Close()
	cs, err := connect(t, srv.URL, nil)
	if err != nil {
		t.Fatalf("no token on loopback: %v", err)
	}
	_ = cs.Close()
	if _, err := connect(t, srv.URL, map[string]string{"Authorization": "Bearer nope"}); err == nil {
		t.Error("a wrong token on loopback was let in")
	}
}

func TestLoadToken(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sub", "serve.token")
	tok, err := LoadToken(file)
	if err != nil || len(tok) != 64 {
		t.Fatalf("new token %q: %v", tok, err)
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v, %v", fi.Mode().Perm(), err)
	}
	if again, err := LoadToken(file); err != nil || again != tok {
		t.Errorf("second load: %q, %v", again, err)
	}
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadToken(file); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("readable token file: %v", err)
	}
	for addr, want := range map[string]bool{"127.0.0.1:7411": true, "localhost:1": true, "[::1]:80": true, "0.0.0.0:7411": false, ":7411": false, "10.0.0.5:80": false} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v", addr, got)
		}
	}
}

// TestMCPOverHTTP_ConnectionsWithoutSession: two MCP connections that name
// no session (no X-Engram-Session header, no session parameter) get a
// session each, though their clients bear the same name, so that two
// agents' state does not mix in one session.
func TestMCPOverHTTP_ConnectionsWithoutSession(t *testing.T) {
	eng := newEngine(t)
	srv := httptest.NewServer(Handler(eng, Options{Token: "secret-token"}))
	defer srv.Close()
	ctx := context.Background()

	tasks := []string{"the first agent's task", "the second agent's task"}
	for i, task := range tasks {
		cs, err := connect(t, srv.URL, map[string]string{"Authorization": "Bearer secret-token"})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cs.Close() }()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "update_resume", Arguments: map[string]any{"task": task}})
		if err != nil || res.IsError {
			t.Fatalf("connection %d: update_resume: %+v, %v", i, res, err)
		}
	}
	arc, err := eng.Archive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	agents, err := arc.Agents(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(agents) != 2 || agents[0].SessionID == agents[1].SessionID {
		t.Fatalf("two connections without a session: agents %+v, want two in two sessions", agents)
	}
	seen := map[string]bool{}
	for _, a := range agents {
		rd, err := arc.ReadSession(ctx, a.SessionID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if rd.Resume == nil || rd.Resume.Agent != a.ID || len(rd.Agents) != 1 {
			t.Errorf("session %s: resume %+v, agents %+v; want only %s's", a.SessionID, rd.Resume, rd.Agents, a.ID)
			continue
		}
		if !strings.HasPrefix(a.SessionID, "test-") {
			t.Errorf("session %s: want it named after the client, test", a.SessionID)
		}
		seen[rd.Resume.Task] = true
	}
	if !seen[tasks[0]] || !seen[tasks[1]] {
		t.Errorf("the sessions' tasks %v, want both of %q", seen, tasks)
	}
}
