package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/modelserver"
)

// refusedByProxy is how many requests the proxy at url refused for
// reason, as its /metrics says.
func refusedByProxy(t *testing.T, url, token, reason string) int {
	t.Helper()
	code, body := send(t, "GET", url+"/metrics", "", "X-Engram-Token", token)
	if code != 200 {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	n := 0
	prefix := fmt.Sprintf(`engram_proxy_refused_total{reason=%q} `, reason)
	for _, line := range strings.Split(body, "\n") {
		if s, ok := strings.CutPrefix(line, prefix); ok {
			if _, err := fmt.Sscan(s, &n); err != nil {
				t.Fatalf("/metrics: %q: %v", line, err)
			}
		}
	}
	return n
}

// TestClaudeCode_ProxyRefusal runs the real Claude Code through engram
// proxy with a wrong engram token: the proxy refuses its request with
// X-Should-Retry: false, and Claude Code, which retries a 401 up to ten
// times on its own, gives up at once and shows the proxy's message.
func TestClaudeCode_ProxyRefusal(t *testing.T) {
	srv := modelserver.Start(modelserver.Options{})
	defer srv.Close()
	cc := modelserver.NewClaudeCode(t, srv)
	const token = "proxy-refusal-token"
	env := []string{"HOME=" + cc.Home, "ENGRAM_DATA_DIR=" + t.TempDir(), "ENGRAM_TOKEN=" + token}
	url := startProxy(t, env, srv.URL())
	cc.Env = append(withoutVar(cc.Env, "ANTHROPIC_BASE_URL"), "ANTHROPIC_BASE_URL="+url,
		"ANTHROPIC_CUSTOM_HEADERS=X-Engram-Token: not-the-token")
	out, err := cc.Run(t, "-p", "Say hello.", "--output-format", "json")
	if err == nil {
		t.Errorf("claude succeeded through a proxy that refuses it: %s", out)
	}
	var res modelserver.Result
	if jerr := json.Unmarshal([]byte(out), &res); jerr != nil || !res.IsError ||
		!strings.Contains(res.Result, "engram's proxy needs its token in X-Engram-Token") {
		t.Errorf("claude's result (%v) does not show the proxy's refusal: %s\n%v", jerr, out, err)
	}
	if n := refusedByProxy(t, url, token, "token"); n != 1 {
		t.Errorf("the proxy refused %d requests; want 1, with no retry", n)
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("%d requests reached the model", n)
	}
}

// TestCodex_ProxyRefusal runs the real Codex CLI through engram proxy
// with a wrong engram token: the proxy refuses its request in OpenAI's
// error shape, which Codex reads, and Codex fails the turn with the
// proxy's message.
func TestCodex_ProxyRefusal(t *testing.T) {
	srv := modelserver.Start(modelserver.Options{})
	defer srv.Close()
	cx := modelserver.NewCodex(t, srv)
	const token = "proxy-refusal-token"
	env := []string{"HOME=" + cx.Home, "ENGRAM_DATA_DIR=" + t.TempDir(), "ENGRAM_TOKEN=" + token}
	url := startProxyArgs(t, env, srv.URL(), "--openai", srv.URL())
	// Codex's retries are off, as the test's configuration has them:
	// Codex 0.171 retries a 401 five times whatever X-Should-Retry says.
	pointCodexAt(t, cx, srv.URL(), url, `http_headers = { "X-Engram-Token" = "not-the-token" }`)
	out, err := cx.Run(t, "exec", "--json", "Say hello.")
	if err == nil {
		t.Errorf("codex succeeded through a proxy that refuses it: %s", out)
	}
	var failed string
	for _, line := range strings.Split(out, "\n") {
		var ev struct {
			Type  string `json:"type"`
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Type == "turn.failed" {
			failed = ev.Error.Message
		}
	}
	// Codex reads the message out of the error's JSON; a body it cannot
	// read it shows whole.
	if !strings.Contains(failed, "engram's proxy needs its token in X-Engram-Token") || strings.Contains(failed, `{"`) {
		t.Errorf("codex's failed turn does not show the proxy's refusal: %q\n%s\n%v", failed, out, err)
	}
	if n := refusedByProxy(t, url, token, "token"); n != 1 {
		t.Errorf("the proxy refused %d requests; want 1, with no retry", n)
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("%d requests reached the model", n)
	}
}

// pointCodexAt points the provider of cx's config.toml at proxy instead
// of the model server at model, with the provider's lines more after
// its base URL.
func pointCodexAt(t testing.TB, cx *modelserver.Codex, model, proxy, more string) {
	t.Helper()
	config := filepath.Join(cx.CodexHome, "config.toml")
	b, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	toml := strings.Replace(string(b), `base_url = "`+model+`/v1"`, `base_url = "`+proxy+`/v1"`+"\n"+more, 1)
	if toml == string(b) {
		t.Fatalf("no base_url to point at the proxy in\n%s", b)
	}
	if err := os.WriteFile(config, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
}
