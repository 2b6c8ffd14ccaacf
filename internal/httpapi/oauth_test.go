package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/engramhq/engram/internal/modelserver"
)

// TestOAuthRegistrationRefused: an OAuth client's registration (RFC
// 7591) at /register, of a server of one project or of several, is
// refused with an RFC 7591 error whose description names the fix, with
// or without a credential, and registers nothing; the discovery
// documents are not served, so that none claims an authorization
// server. A 401 says why in its WWW-Authenticate (RFC 6750) when a
// credential was sent, and nothing when none was.
func TestOAuthRegistrationRefused(t *testing.T) {
	one := httptest.NewServer(Handler(newEngine(t), Options{Token: tok}))
	defer one.Close()
	several := httptest.NewServer(Projects(map[string]http.Handler{"api": Handler(newEngine(t), Options{Token: tok})}, Options{Token: tok}))
	defer several.Close()
	body := `{"client_name":"Claude Code (engram)","redirect_uris":["http://localhost:3118/callback"],"grant_types":["authorization_code","refresh_token"],"response_types":["code"],"token_endpoint_auth_method":"none"}`
	for _, url := range []string{one.URL, several.URL} {
		for _, hdr := range [][]string{nil, {"Authorization", "Bearer wrong"}, withToken()} {
			st, h, b := raw(t, "POST", url+"/register", body, append([]string{"Content-Type", "application/json"}, hdr...)...)
			var out map[string]string
			if err := json.Unmarshal([]byte(b), &out); err != nil || st != http.StatusBadRequest || out["error"] != "registration_not_supported" ||
				out["error_description"] != registerRefusal || h.Get("Cache-Control") != "no-store" || h.Get("Content-Type") != "application/json" {
				t.Errorf("POST %s/register %v: HTTP %d %v %s", url, hdr, st, h, b)
			}
			if len(out) != 2 || !strings.Contains(out["error_description"], "engram token prints the server's token") {
				t.Errorf("the refusal: %s", b)
			}
		}
		for _, path := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp",
			"/.well-known/oauth-authorization-server", "/.well-known/openid-configuration", "/authorize?response_type=code", "/token"} {
			if st, _, b := raw(t, "GET", url+path, ""); st != http.StatusNotFound {
				t.Errorf("GET %s%s: HTTP %d %s", url, path, st, b)
			}
		}
	}
	if st, h, _ := raw(t, "GET", one.URL+"/register", ""); st != http.StatusMethodNotAllowed || h.Get("Allow") != "POST" {
		t.Errorf("GET /register: HTTP %d, Allow %q", st, h.Get("Allow"))
	}

	for _, tc := range []struct {
		name, auth, want string
	}{
		{"none", "", `Bearer realm="engram"`},
		{"wrong token", "Bearer wrong", `Bearer realm="engram", error="invalid_token", error_description="wrong token: engram token prints the server's token; an agent sends the key it was registered with"`},
		{"unknown key", "Bearer engram_ak_forged", `Bearer realm="engram", error="invalid_token", error_description="unknown agent key: engram token prints the server's token; an agent sends the key it was registered with"`},
		{"basic", "Basic dXNlcjpwYXNz", `Bearer realm="engram", error="invalid_request", error_description="not a bearer token: engram token prints the server's token; an agent sends the key it was registered with"`},
	} {
		var hdr []string
		if tc.auth != "" {
			hdr = []string{"Authorization", tc.auth}
		}
		st, h, b := raw(t, "POST", one.URL+"/mcp", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}`, append(hdr, "Content-Type", "application/json")...)
		if st != http.StatusUnauthorized || h.Get("WWW-Authenticate") != tc.want {
			t.Errorf("%s: HTTP %d, WWW-Authenticate %q, want %q; %s", tc.name, st, h.Get("WWW-Authenticate"), tc.want, b)
		}
	}
}

// recorder records the method, path and status of each request a
// handler answers.
type recorder struct {
	next http.Handler
	mu   sync.Mutex
	seen []string
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
	rc.next.ServeHTTP(sw, r)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.seen = append(rc.seen, fmt.Sprintf("%s %s %d", r.Method, r.URL.Path, sw.code))
}

func (rc *recorder) requests() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.seen...)
}

// TestClaudeCodeWrongToken runs the real Claude Code with engram's MCP
// endpoint configured (.mcp.json) with a wrong token. On the 401 it
// looks for an OAuth authorization server and, finding no metadata,
// registers a client at /register: refused, it reports the server
// failed (not "needs authentication", whose Authenticate would start an
// OAuth sign-in) and logs engram's description of the fault and its fix
// as the failure. No request but the refused ones gets past the token.
// With the token engram token prints, it connects.
func TestClaudeCodeWrongToken(t *testing.T) {
	ms := modelserver.Start(modelserver.Options{})
	defer ms.Close()
	cc := modelserver.NewClaudeCode(t, ms)
	rec := &recorder{next: Handler(newEngine(t), Options{Token: tok})}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	configure := func(token string) {
		modelserver.WriteJSON(t, filepath.Join(cc.Dir, ".mcp.json"), map[string]any{"mcpServers": map[string]any{
			"engram": map[string]any{"type": "http", "url": srv.URL + "/mcp", "headers": map[string]string{"Authorization": "Bearer " + token}}}})
	}

	configure("wrong")
	debug := filepath.Join(t.TempDir(), "claude.log")
	out, err := cc.Run(t, "--debug-file", debug, "mcp", "list")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "engram: "+srv.URL+"/mcp (HTTP) - ✗ Failed to connect") {
		t.Errorf("claude mcp list:\n%s", out)
	}
	log, err := os.ReadFile(debug)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), `MCP server "engram" Connection failed: `+registerRefusal) {
		var lines []string
		for _, l := range strings.Split(string(log), "\n") {
			if strings.Contains(l, `MCP server "engram"`) {
				lines = append(lines, l)
			}
		}
		t.Errorf("Claude Code's log does not give engram's refusal as the failure:\n%s", strings.Join(lines, "\n"))
	}
	seen := rec.requests()
	registered := false
	for _, s := range seen {
		registered = registered || s == "POST /register 400"
		if !strings.HasSuffix(s, " 401") && !strings.HasSuffix(s, " 404") && s != "POST /register 400" {
			t.Errorf("a request with the wrong token was answered: %s", s)
		}
	}
	if !registered {
		t.Errorf("Claude Code did not ask to register (the requests: %q): is the test's premise still true?", seen)
	}

	configure(tok)
	if out, err := cc.Run(t, "mcp", "list"); err != nil || !strings.Contains(out, "engram: "+srv.URL+"/mcp (HTTP) - ✓ Connected") {
		t.Errorf("claude mcp list with the token: %v\n%s", err, out)
	}
}

// TestCodexWrongToken runs the real Codex with engram's MCP endpoint
// configured with a wrong token (bearer_token_env_var, as engram mcp
// --print-config codex --http prints it). Codex asks no OAuth metadata:
// it fails the server on the 401 and prints its WWW-Authenticate, which
// says the token is wrong and that engram token prints the right one.
func TestCodexWrongToken(t *testing.T) {
	ms := modelserver.Start(modelserver.Options{Main: []modelserver.Step{modelserver.Say("Done.")}})
	defer ms.Close()
	cx := modelserver.NewCodex(t, ms)
	rec := &recorder{next: Handler(newEngine(t), Options{Token: tok})}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	cfg := filepath.Join(cx.CodexHome, "config.toml")
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b = fmt.Appendf(b, "\n[mcp_servers.engram]\nurl = %q\nbearer_token_env_var = \"ENGRAM_TOKEN\"\n", srv.URL+"/mcp")
	if err := os.WriteFile(cfg, b, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), modelserver.CodexTimeout)
	defer cancel()
	run := exec.CommandContext(ctx, cx.Bin, "exec", "--json", "Say done.")
	run.Dir, run.Env = cx.Dir, append(cx.Env, "ENGRAM_TOKEN=wrong")
	var stderr strings.Builder
	run.Stderr = &stderr
	out, err := run.Output()
	if err != nil {
		t.Fatalf("codex exec: %v\n%s\n%s", err, out, stderr.String())
	}
	want := `error_description=\"wrong token: engram token prints the server's token`
	if !strings.Contains(stderr.String(), want) {
		t.Errorf("Codex's output does not say the token is wrong (%s):\n%s\n%s", want, out, stderr.String())
	}
	for _, s := range rec.requests() {
		if s != "POST /mcp 401" {
			t.Errorf("Codex asked %s", s)
		}
	}
}
