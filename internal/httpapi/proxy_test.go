package httpapi

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/modelserver"
	"github.com/engramhq/engram/internal/proxy"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

const vendorKey = "sk-vendor-key"

// proxied is a project's engine and windows with a proxy to up, as engram
// serve mounts them.
func proxied(t *testing.T, up *modelserver.Server) (*engine.Engine, *window.Manager, Options) {
	t.Helper()
	eng := newEngine(t)
	cat, err := tokens.NewCatalog()
	if err != nil {
		t.Fatal(err)
	}
	wm := window.NewManager(eng, cat)
	p, err := proxy.New(eng, wm, proxy.Options{Anthropic: up.URL(), OpenAI: up.URL(), Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	return eng, wm, Options{Token: tok, Windows: wm, Proxy: p, MaxBodyBytes: 4096}
}

// messages is a Messages request of one prompt.
func messages(text string) string {
	return fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":100,"system":"You are terse.","messages":[{"role":"user","content":%q}]}`, text)
}

// TestProxyRoutes serves the model APIs beside engram's own: the vendor's
// credential in Authorization goes upstream untouched and engram's token
// is taken from X-Engram-Token only; Host and Origin are checked as for
// every route; the body limit is the proxy's, not the API's; the
// conversation is stored in the window engram's API shows.
func TestProxyRoutes(t *testing.T) {
	up := modelserver.Start(modelserver.Options{APIKey: vendorKey,
		Main: []modelserver.Step{modelserver.Say("Hello there."), modelserver.Say("Chatted."), modelserver.Say("Long read.")}})
	defer up.Close()
	eng, wm, opts := proxied(t, up)
	srv := httptest.NewServer(Handler(eng, opts))
	defer srv.Close()

	anthropic := func(extra ...string) []string {
		return append([]string{"Content-Type", "application/json", "X-Api-Key", vendorKey, "Anthropic-Version", "2023-06-01",
			"X-Engram-Session", "s-proxy"}, extra...)
	}
	st, _, body := raw(t, "POST", srv.URL+"/v1/messages", messages("hi"), anthropic("X-Engram-Token", tok)...)
	if st != 200 || !strings.Contains(body, "Hello there.") {
		t.Fatalf("Messages through serve: %d %s", st, body)
	}
	// The vendor's key in Authorization, which engram's own API would
	// take for its token, goes upstream as it came.
	chat := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	st, _, body = raw(t, "POST", srv.URL+"/v1/chat/completions", chat,
		"Content-Type", "application/json", "Authorization", "Bearer "+vendorKey, "X-Engram-Token", tok)
	if st != 200 || !strings.Contains(body, "Chatted.") {
		t.Fatalf("Chat Completions through serve: %d %s", st, body)
	}
	// Over the API's body limit, under the proxy's.
	long := strings.Repeat("the ledger of voyage 7 ", 1000)
	if st, _, body = raw(t, "POST", srv.URL+"/v1/messages", messages(long), anthropic("X-Engram-Token", tok, "X-Engram-Session", "s-long")...); st != 200 {
		t.Fatalf("a body over the API's limit: %d %s", st, body)
	}
	if err := up.Err(); err != nil {
		t.Fatal(err)
	}
	reached := len(up.Requests())

	// The conversation is in its window, which engram's API shows.
	_, held, _, err := wm.Messages(t.Context(), store.WindowKey{SessionID: "s-proxy", AgentID: "proxy"})
	if err != nil || len(held) != 2 {
		t.Fatalf("the window: %d messages, %v; want the system prompt and the prompt", len(held), err)
	}
	if st, _, body := raw(t, "GET", srv.URL+"/v1/windows/s-proxy/proxy", "", withToken()...); st != 200 || !strings.Contains(body, `"messages":2`) {
		t.Errorf("engram's API on the window: %d %s", st, body)
	}

	for _, tc := range []struct {
		name   string
		hdr    []string
		status int
	}{
		{"no token", anthropic(), http.StatusUnauthorized},
		{"wrong token", anthropic("X-Engram-Token", "nope"), http.StatusUnauthorized},
		// engram's token where its own API takes it is not engram's here:
		// Authorization is the vendor's.
		{"the token as a bearer", anthropic("Authorization", "Bearer "+tok), http.StatusUnauthorized},
		{"a foreign host", anthropic("X-Engram-Token", tok, "Host", "evil.example.com"), http.StatusForbidden},
		{"a web page", anthropic("X-Engram-Token", tok, "Origin", "https://evil.example.com"), http.StatusForbidden},
		{"a page of the server's own origin", anthropic("X-Engram-Token", tok, "Origin", srv.URL), http.StatusForbidden},
	} {
		if st, _, body := raw(t, "POST", srv.URL+"/v1/messages", messages("again"), tc.hdr...); st != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, st, body, tc.status)
		}
	}
	if n := len(up.Requests()); n != reached {
		t.Errorf("%d refused requests reached the model", n-reached)
	}
	// engram's own routes answer as before: the API's token, its limit.
	if st, _, _ := raw(t, "GET", srv.URL+"/v1/search?q=ledger", "", "X-Engram-Token", tok); st != http.StatusUnauthorized {
		t.Errorf("engram's API with X-Engram-Token: %d, want 401", st)
	}
	if st, _, body := raw(t, "GET", srv.URL+"/v1/search?q=ledger", "", withToken()...); st != 200 {
		t.Errorf("engram's API: %d %s", st, body)
	}
	if st, _, _ := raw(t, "POST", srv.URL+"/v1/insights", `{"insight":"`+long+`"}`, withToken("Content-Type", "application/json")...); st != http.StatusRequestEntityTooLarge {
		t.Errorf("engram's API over its limit: %d, want 413", st)
	}
	if st, h, _ := raw(t, "GET", srv.URL+"/v1/messages", "", withToken()...); st != http.StatusMethodNotAllowed || h.Get("Allow") != "POST" {
		t.Errorf("GET /v1/messages: %d, Allow %q; want engram's 405, POST", st, h.Get("Allow"))
	}
}

// TestProxyRoutes_Projects serves each project's proxy under its prefix,
// storing into that project's store only.
func TestProxyRoutes_Projects(t *testing.T) {
	up := modelserver.Start(modelserver.Options{APIKey: vendorKey, Main: []modelserver.Step{modelserver.Say("For api.")}})
	defer up.Close()
	handlers := map[string]http.Handler{}
	windows := map[string]*window.Manager{}
	var opts Options
	for _, name := range []string{"api", "web"} {
		eng, wm, o := proxied(t, up)
		handlers[name], windows[name], opts = Handler(eng, o), wm, o
	}
	srv := httptest.NewServer(Projects(handlers, opts))
	defer srv.Close()
	hdr := []string{"Content-Type", "application/json", "X-Api-Key", vendorKey, "Anthropic-Version", "2023-06-01",
		"X-Engram-Session", "s-api", "X-Engram-Token", tok}
	if st, _, body := raw(t, "POST", srv.URL+"/v1/messages", messages("hi"), hdr...); st != http.StatusNotFound || !strings.Contains(body, "/p/NAME/") {
		t.Errorf("outside the projects: %d %s", st, body)
	}
	if st, _, body := raw(t, "POST", srv.URL+"/p/api/v1/messages", messages("hi"), hdr...); st != 200 || !strings.Contains(body, "For api.") {
		t.Fatalf("/p/api/v1/messages: %d %s", st, body)
	}
	key := store.WindowKey{SessionID: "s-api", AgentID: "proxy"}
	if _, held, _, err := windows["api"].Messages(t.Context(), key); err != nil || len(held) != 2 {
		t.Errorf("api's window: %d messages, %v", len(held), err)
	}
	if _, err := windows["web"].Status(t.Context(), key); err == nil {
		t.Error("web's store has api's window")
	}
	if got := up.Requests(); len(got) != 1 || got[0].Path != "/v1/messages" {
		t.Errorf("upstream requests: %+v", got)
	}
}
