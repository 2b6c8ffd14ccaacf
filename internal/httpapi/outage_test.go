package httpapi

import (
	"context"
	"database/sql"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/metrics"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/postgres"
	"github.com/engramhq/engram/internal/store/postgres/pgtest"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
)

// outageServer serves st, with its metrics, on a server of two projects
// (the other one's store always up) and returns the project's URL and
// the server's.
func outageServer(t *testing.T, st store.Store) (project, server string) {
	t.Helper()
	handlers := map[string]http.Handler{}
	for name, s := range map[string]store.Store{"api": st, "web": sqlitetest.Open(t, sqlite.Options{})} {
		eng, err := engine.New(s, engine.Options{Embed: engine.EmbedOptions{Provider: "none"}})
		if err != nil {
			t.Fatal(err)
		}
		handlers[name] = Handler(eng, Options{TrustLoopback: true, Metrics: metrics.New(eng)})
	}
	srv := httptest.NewServer(Projects(handlers, Options{TrustLoopback: true}))
	t.Cleanup(srv.Close)
	return srv.URL + "/p/api", srv.URL
}

// until asks for u until it answers status, and returns that answer's
// Retry-After and body. The store's health is asked at most once a
// second, so a change shows within about that.
func until(t *testing.T, u string, status int) (string, string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, body := get(t, http.DefaultClient, u)
		if resp.StatusCode == status {
			return resp.Header.Get("Retry-After"), body
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: still HTTP %d %s, want %d", u, resp.StatusCode, body, status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestStoreOutage takes a project's PostgreSQL server away and brings it
// back: health, the API, MCP tools and the metrics say the store is
// unavailable (503, Retry-After, a tool error, engram_store_up 0) rather
// than ok or a 500, never where the database is, and recover with it.
func TestStoreOutage(t *testing.T) {
	relay, u := pgtest.NewRelay(t, pgtest.Database(t))
	st, err := postgres.Open(context.Background(), u, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	project, server := outageServer(t, st)

	checkUp := func() {
		t.Helper()
		until(t, project+"/healthz", 200)
		until(t, server+"/healthz", 200)
		if resp, body := get(t, http.DefaultClient, project+"/v1/status"); resp.StatusCode != 200 {
			t.Errorf("status with the store up: HTTP %d %s", resp.StatusCode, body)
		}
		if _, body := get(t, http.DefaultClient, project+"/metrics"); !strings.Contains(body, "\nengram_store_up 1\n") || !strings.Contains(body, "engram_store_chunks") {
			t.Errorf("metrics with the store up: no engram_store_up 1 and store figures:\n%.2000s", body)
		}
	}
	checkUp()

	relay.Down()
	if ra, body := until(t, project+"/healthz", 503); ra == "" || !strings.Contains(body, `"store":"unavailable"`) {
		t.Errorf("project health with the store down: Retry-After %q, %s", ra, body)
	}
	// The server still serves its other project: degraded, naming api.
	if resp, body := get(t, http.DefaultClient, server+"/healthz"); resp.StatusCode != 200 ||
		!strings.Contains(body, `"status":"degraded"`) || !strings.Contains(body, `"unavailable":["api"]`) {
		t.Errorf("server health with a project's store down: HTTP %d %s; want 200, degraded, naming api", resp.StatusCode, body)
	}
	if resp, body := get(t, http.DefaultClient, server+"/p/web/healthz"); resp.StatusCode != 200 {
		t.Errorf("the other project's health: HTTP %d %s", resp.StatusCode, body)
	}
	for _, path := range []string{"/v1/status", "/v1/sessions", "/v1/search?q=timeout"} {
		resp, body := get(t, http.DefaultClient, project+path)
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, `"store_unavailable"`) {
			t.Errorf("GET %s with the store down: HTTP %d, Retry-After %q, %s; want 503 store_unavailable", path, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
		if strings.Contains(body, relayHost(u)) {
			t.Errorf("GET %s: the answer names the database's address: %s", path, body)
		}
	}
	// An agent over MCP is told to retry, and not where the database is.
	cs, err := connect(t, project, map[string]string{"X-Engram-Session": "s1", "X-Engram-Agent": "a1"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.Close() }()
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"search", map[string]any{"query": "timeout"}},
		{"record_insight", map[string]any{"insight": "The pool retries three times", "category": "database.connections"}},
	} {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
		if err != nil {
			t.Fatalf("%s: %v", c.tool, err)
		}
		text := toolText(res)
		if !res.IsError || !strings.Contains(text, "store is unavailable") || strings.Contains(text, relayHost(u)) || strings.Contains(text, "engram_test_") {
			t.Errorf("tool %s with the store down: error %v, %q; want a tool error saying to retry, naming no address", c.tool, res.IsError, text)
		}
	}
	if _, body := get(t, http.DefaultClient, project+"/metrics"); !strings.Contains(body, "\nengram_store_up 0\n") || strings.Contains(body, "engram_store_chunks") {
		t.Errorf("metrics with the store down: want engram_store_up 0 and no store figures:\n%.2000s", body)
	}

	relay.Up()
	checkUp()
}

func toolText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func relayHost(u string) string {
	_, rest, _ := strings.Cut(u, "@")
	host, _, _ := strings.Cut(rest, "/")
	return host
}

// TestStoreBusy holds an SQLite store's write lock from another
// connection for longer than the store waits: a write is answered 503
// with Retry-After, not 500, and goes through once the lock is let go.
func TestStoreBusy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "engram.db")
	st := sqlitetest.OpenPath(t, path, sqlite.Options{RetryTimeout: 300 * time.Millisecond, BusyTimeout: 50 * time.Millisecond})
	project, _ := outageServer(t, st)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	post := func() (int, http.Header, string) {
		return raw(t, http.MethodPost, project+"/v1/patterns", `{"category":"database.connections","pattern":"Retry the connection with backoff"}`,
			"Content-Type", "application/json", "X-Engram-Session", "s1", "X-Engram-Agent", "a1")
	}
	code, hdr, body := post()
	if code != 503 || hdr.Get("Retry-After") == "" || !strings.Contains(body, `"store_unavailable"`) {
		t.Errorf("a write with the store locked: HTTP %d, Retry-After %q, %s; want 503 store_unavailable", code, hdr.Get("Retry-After"), body)
	}
	if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if code, _, body := post(); code != 201 {
		t.Errorf("the write once the lock is let go: HTTP %d %s", code, body)
	}
}
