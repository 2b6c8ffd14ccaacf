package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"

	"github.com/engramhq/engram/internal/modelserver"
)

// evalShell evaluates script in bash, as eval "$(...)" does, with env
// alone, and returns the values of vars after it, one a line.
func evalShell(t *testing.T, script string, env []string, vars ...string) []string {
	t.Helper()
	var refs []string
	for _, v := range vars {
		refs = append(refs, `"$`+v+`"`)
	}
	cmd := exec.Command("bash", "-c", `set -e; eval "$1"; printf '%s\n' `+strings.Join(refs, " "), "bash", script)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("bash: %v\n%s\nof:\n%s", err, stderr, script)
	}
	return strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
}

// mcpJSON is a file of mcpServers: .mcp.json, what claude --mcp-config
// takes.
type mcpJSON struct {
	MCPServers map[string]map[string]any `json:"mcpServers"`
}

// TestProxy_PrintConfigClaudeCode evaluates what --print-config
// claude-code prints in a shell: Claude Code's variables name the proxy
// and carry engram's token, which the text itself does not hold, and the
// MCP configuration is the server engram hooks install claude-code
// writes.
func TestProxy_PrintConfigClaudeCode(t *testing.T) {
	e := newEnv(t)
	out := e.ok("", "proxy", "--print-config", "claude-code", "--addr", "127.0.0.1:7999")
	// The token file is made as engram proxy would make it.
	tok, err := os.ReadFile(filepath.Join(e.vars["ENGRAM_DATA_DIR"], "serve.token"))
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tok))
	if strings.Contains(out, token) {
		t.Errorf("the printed configuration holds the token:\n%s", out)
	}
	got := evalShell(t, out, nil, "ANTHROPIC_BASE_URL", "ANTHROPIC_CUSTOM_HEADERS", "ENGRAM_MCP_CONFIG")
	want := []string{"http://127.0.0.1:7999", "X-Engram-Token: " + token}
	if diff := cmp.Diff(want, got[:2]); diff != "" {
		t.Errorf("Claude Code's variables (-want +got):\n%s\nfrom:\n%s", diff, out)
	}
	var printed mcpJSON
	if err := json.Unmarshal([]byte(got[2]), &printed); err != nil {
		t.Fatalf("ENGRAM_MCP_CONFIG is not JSON: %v: %q", err, got[2])
	}
	e.ok("", "hooks", "install", "claude-code")
	var installed mcpJSON
	b, err := os.ReadFile(filepath.Join(e.project, ".mcp.json"))
	if err != nil || json.Unmarshal(b, &installed) != nil {
		t.Fatalf("engram hooks install's .mcp.json: %v: %s", err, b)
	}
	if diff := cmp.Diff(installed, printed); diff != "" {
		t.Errorf("the printed MCP configuration is not what engram hooks install writes (-installed +printed):\n%s", diff)
	}
	if !strings.Contains(out, `eval "$(engram proxy --print-config claude-code --addr 127.0.0.1:7999)"`) {
		t.Errorf("no hint of how to use it:\n%s", out)
	}

	// With ENGRAM_TOKEN set, which engram proxy reads first, the header
	// takes it from there.
	e.vars["ENGRAM_TOKEN"] = "token-from-env"
	out = e.ok("", "proxy", "--print-config", "claude", "--addr", "localhost:7412")
	got = evalShell(t, out, []string{"ENGRAM_TOKEN=token-from-env"}, "ANTHROPIC_BASE_URL", "ANTHROPIC_CUSTOM_HEADERS")
	if diff := cmp.Diff([]string{"http://localhost:7412", "X-Engram-Token: token-from-env"}, got); diff != "" || strings.Contains(out, "token-from-env") {
		t.Errorf("with ENGRAM_TOKEN (-want +got):\n%s\nfrom:\n%s", diff, out)
	}
}

// codexConfig is what the test reads of a Codex config.toml.
type codexConfig struct {
	ModelProvider  string `toml:"model_provider"`
	ModelProviders map[string]struct {
		Name           string            `toml:"name"`
		BaseURL        string            `toml:"base_url"`
		WireAPI        string            `toml:"wire_api"`
		EnvKey         string            `toml:"env_key"`
		EnvHTTPHeaders map[string]string `toml:"env_http_headers"`
	} `toml:"model_providers"`
	MCPServers map[string]map[string]any `toml:"mcp_servers"`
}

// TestProxy_PrintConfigCodex parses what --print-config codex prints: a
// model provider for the proxy's Responses API that sends engram's token
// from $ENGRAM_TOKEN, selected, and the MCP server engram hooks install
// codex --user writes; the hint's export sets the token.
func TestProxy_PrintConfigCodex(t *testing.T) {
	e := newEnv(t)
	// A wildcard address is reached on loopback.
	out := e.ok("", "proxy", "--print-config", "codex", "--addr", "[::]:7999")
	var got codexConfig
	md, err := toml.Decode(out, &got)
	if err != nil {
		t.Fatalf("not TOML: %v\n%s", err, out)
	}
	if un := md.Undecoded(); len(un) > 0 {
		t.Errorf("keys the test does not know: %v", un)
	}
	p := got.ModelProviders["engram"]
	if got.ModelProvider != "engram" || p.BaseURL != "http://127.0.0.1:7999/v1" || p.WireAPI != "responses" || p.EnvKey != "OPENAI_API_KEY" ||
		p.Name == "" || !cmp.Equal(p.EnvHTTPHeaders, map[string]string{"X-Engram-Token": "ENGRAM_TOKEN"}) {
		t.Errorf("the provider: model_provider %q, %+v", got.ModelProvider, p)
	}
	// The hint's line that saves the profile works in a home without
	// ~/.codex yet, and saves what was printed.
	var save string
	for _, line := range strings.Split(out, "\n") {
		if s, ok := strings.CutPrefix(line, "#   "); ok && strings.Contains(s, "> ") && strings.HasSuffix(s, `/engram.config.toml"`) {
			save = s
		}
	}
	if !strings.HasPrefix(save, "mkdir -p ") {
		t.Errorf("the hint's line that saves the profile: %q; want it to make the directory first", save)
	}
	cmd := exec.Command("bash", "-e", "-c", save)
	cmd.Env = []string{"HOME=" + e.vars["HOME"], "ENGRAM_DATA_DIR=" + e.vars["ENGRAM_DATA_DIR"], "ENGRAM_PROJECT=" + e.project,
		"PATH=" + filepath.Dir(binary(t)) + string(filepath.ListSeparator) + os.Getenv("PATH")}
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s: %v: %s", save, err, msg)
	} else if saved, err := os.ReadFile(filepath.Join(e.vars["HOME"], ".codex", "engram.config.toml")); err != nil || string(saved) != out {
		t.Errorf("%s saved %v:\n%s\nwant\n%s", save, err, saved, out)
	}
	e.ok("", "hooks", "install", "codex", "--user")
	var installed codexConfig
	if _, err := toml.DecodeFile(filepath.Join(e.vars["HOME"], ".codex", "config.toml"), &installed); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(installed.MCPServers, got.MCPServers); diff != "" {
		t.Errorf("the printed MCP server is not what engram hooks install codex --user writes (-installed +printed):\n%s", diff)
	}
	// The hint's export line sets the token engram proxy requires.
	var export string
	for _, line := range strings.Split(out, "\n") {
		if s, ok := strings.CutPrefix(line, "#   export ENGRAM_TOKEN="); ok {
			export = "export ENGRAM_TOKEN=" + s
		}
	}
	tok, err := os.ReadFile(filepath.Join(e.vars["ENGRAM_DATA_DIR"], "serve.token"))
	if err != nil {
		t.Fatal(err)
	}
	if export == "" || strings.Contains(out, strings.TrimSpace(string(tok))) {
		t.Fatalf("no export line, or the token itself:\n%s", out)
	}
	if v := evalShell(t, export, nil, "ENGRAM_TOKEN"); v[0] != strings.TrimSpace(string(tok)) {
		t.Errorf("%s sets ENGRAM_TOKEN to %q", export, v[0])
	}
}

// TestProxy_PrintConfigBadInput: an unknown harness or an address that is
// not host:port is a usage error that says what is expected.
func TestProxy_PrintConfigBadInput(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ args []string }{
		{[]string{"--print-config", "vim"}},
		{[]string{"--print-config", "cursor"}},
		{[]string{"--print-config", "codex", "--addr", "7412"}},
		{[]string{"--print-config", "codex", "--addr", "127.0.0.1:0"}},
		{[]string{"--print-config", "claude-code", "--addr", "127.0.0.1:7412\nrm -rf ~"}},
		{[]string{"--print-config", "claude-code", "--addr", "evil\nhost:7412"}},
	} {
		code, out, errOut := e.run("", append([]string{"proxy"}, tc.args...)...)
		if code != 2 || out != "" || !strings.Contains(errOut, "claude-code") && !strings.Contains(errOut, "host:port") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", tc.args, code, out, errOut)
		}
	}
}

// withoutVar returns env without the variable name.
func withoutVar(env []string, name string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// TestClaudeCode_ProxyPrintConfig runs the real Claude Code as
// --print-config claude-code's hint says, from a shell that evaluated
// it: the requests reach the model through engram proxy with Claude
// Code's key intact and without engram's token, the conversation is
// stored, and engram's MCP server from $ENGRAM_MCP_CONFIG answers the
// model's call.
func TestClaudeCode_ProxyPrintConfig(t *testing.T) {
	srv := modelserver.Start(modelserver.Options{APIKey: "sk-ant-vendor-key"})
	defer srv.Close()
	cc := modelserver.NewClaudeCode(t, srv)
	dataDir := t.TempDir()
	// The printed MCP server runs engram from PATH: the test's binary.
	path := "PATH=" + filepath.Dir(binary(t)) + string(filepath.ListSeparator) + os.Getenv("PATH")
	env := []string{"HOME=" + cc.Home, path, "ENGRAM_DATA_DIR=" + dataDir}
	// The proxy stores into the project whose MCP server the configuration
	// names.
	url := startProxyArgs(t, env, srv.URL(), "--project", cc.Dir)
	cfg := engramCLI(t, env, cc.Dir, "proxy", "--print-config", "claude-code", "--addr", strings.TrimPrefix(url, "http://"))

	srv.Add(
		modelserver.Call("mcp__engram__record", map[string]any{"type": "note", "content": "the proxy's configuration works"}),
		func(r *modelserver.Request) (modelserver.Response, error) {
			if got := modelserver.ToolResult(t, r); !recordedNew.MatchString(got) {
				return modelserver.Response{}, fmt.Errorf("engram's record tool answered %q", got)
			}
			return modelserver.Response{Content: []modelserver.Block{modelserver.Text("Noted.")}}, nil
		},
	)
	run := exec.Command("bash", "-c", `eval "$1" && exec "$2" -p 'Note that it works.' --output-format json `+
		`--mcp-config "$ENGRAM_MCP_CONFIG" --allowedTools mcp__engram__record`, "bash", cfg, cc.Bin)
	run.Dir = cc.Dir
	run.Env = append(withoutVar(withoutVar(cc.Env, "ANTHROPIC_BASE_URL"), "ANTHROPIC_API_KEY"),
		"ANTHROPIC_API_KEY=sk-ant-vendor-key", "ENGRAM_DATA_DIR="+dataDir)
	run.Env = append(withoutVar(run.Env, "PATH"), path)
	var stderr strings.Builder
	run.Stderr = &stderr
	out, err := run.Output()
	if serr := srv.Err(); serr != nil {
		t.Fatal(serr)
	}
	if err != nil {
		t.Fatalf("claude: %v\n%s\n%s", err, out, stderr.String())
	}
	var res modelserver.Result
	if err := json.Unmarshal(out, &res); err != nil || res.Result != "Noted." {
		t.Fatalf("claude's result: %v: %s", err, out)
	}
	main := srv.Requests(modelserver.KindMain)
	if len(main) != 2 {
		t.Fatalf("%d requests reached the model, want 2", len(main))
	}
	for _, r := range srv.Requests() {
		if r.Header.Get("X-Engram-Token") != "" {
			t.Errorf("request %d %s carried engram's token upstream", r.Seq, r.Path)
		}
	}
	if held := windowMessages(t, dataDir, res.SessionID); len(held) < 3 {
		t.Errorf("the window holds %d messages, want the system prompt and the conversation", len(held))
	}
}

// TestCodex_ProxyPrintConfig runs the real Codex CLI with what
// --print-config codex prints, saved as the profile its hint names, and
// the token its hint exports: the requests reach the model through engram
// proxy with Codex's key intact and without engram's token, and engram's
// MCP server from the profile answers the model's call.
func TestCodex_ProxyPrintConfig(t *testing.T) {
	srv := modelserver.Start(modelserver.Options{APIKey: "sk-openai-vendor-key"})
	defer srv.Close()
	cx := modelserver.NewCodex(t, srv)
	dataDir := t.TempDir()
	path := "PATH=" + filepath.Dir(binary(t)) + string(filepath.ListSeparator) + os.Getenv("PATH")
	env := []string{"HOME=" + cx.Home, path, "ENGRAM_DATA_DIR=" + dataDir}
	url := startProxyArgs(t, env, srv.URL(), "--openai", srv.URL(), "--project", cx.Dir)
	cfg := engramCLI(t, env, cx.Dir, "proxy", "--print-config", "codex", "--addr", strings.TrimPrefix(url, "http://"))
	if err := os.WriteFile(filepath.Join(cx.CodexHome, "engram.config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var export string
	for _, line := range strings.Split(cfg, "\n") {
		if s, ok := strings.CutPrefix(line, "#   export ENGRAM_TOKEN="); ok {
			export = "export ENGRAM_TOKEN=" + s
		}
	}
	token := evalShell(t, export, nil, "ENGRAM_TOKEN")[0]

	srv.Add(
		func(r *modelserver.Request) (modelserver.Response, error) {
			call := modelserver.ToolUse("record", map[string]any{"type": "note", "content": "the proxy's configuration works"})
			call.Namespace = "mcp__engram"
			return modelserver.Response{Content: []modelserver.Block{call}}, nil
		},
		func(r *modelserver.Request) (modelserver.Response, error) {
			if got, err := lastOutput(r); err != nil || !recordedNew.MatchString(got) {
				return modelserver.Response{}, fmt.Errorf("engram's record tool answered %q (%v)", got, err)
			}
			return modelserver.Response{Content: []modelserver.Block{modelserver.Text("Noted.")}}, nil
		},
	)
	cx.Env = append(withoutVar(cx.Env, "PATH"), path, "OPENAI_API_KEY=sk-openai-vendor-key", "ENGRAM_TOKEN="+token, "ENGRAM_DATA_DIR="+dataDir)
	res := cx.Exec(t, "Note that it works.", "--profile", "engram")
	if err := srv.Err(); err != nil {
		t.Fatal(err)
	}
	if res.Message != "Noted." {
		t.Errorf("Codex's answer: %q", res.Message)
	}
	reqs := srv.Requests(modelserver.KindMain)
	if len(reqs) != 2 {
		t.Fatalf("%d requests reached the model, want 2", len(reqs))
	}
	for _, r := range srv.Requests() {
		if r.Header.Get("X-Engram-Token") != "" {
			t.Errorf("request %d %s carried engram's token upstream", r.Seq, r.Path)
		}
	}
}
