package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/engramhq/engram/internal/modelserver"
	"github.com/engramhq/engram/internal/pictest"
)

// imageData finds the base64 of a picture in a request's body.
var imageData = regexp.MustCompile(`"type":"image","source":\{"type":"base64",[^}]*?"data":"([A-Za-z0-9+/=]{200})`)

// TestClaudeCode_ProxyImage runs the real Claude Code through engram
// proxy, its model reading a picture with the Read tool and then running
// two commands: the picture Claude Code sends in the Read's result stays
// in every request after it, and the window counts it as Anthropic
// would, not as the text of its base64 (which put a marker in its place
// from the next request on).
func TestClaudeCode_ProxyImage(t *testing.T) {
	srv := modelserver.Start(modelserver.Options{})
	defer srv.Close()
	cc := modelserver.NewClaudeCode(t, srv)
	dataDir := t.TempDir()
	env := append(cc.Env, "ENGRAM_DATA_DIR="+dataDir, "ENGRAM_TOKEN=proxy-test-token")
	url := startProxyArgs(t, env, srv.URL(), "--window", "60000")
	throughProxy(cc, url, "proxy-test-token")

	shot := filepath.Join(cc.Dir, "shot.png")
	writeNoisePNG(t, shot)
	srv.Add(
		modelserver.Call("Read", map[string]any{"file_path": shot}),
		modelserver.Call("Bash", map[string]any{"command": "echo one", "description": "one"}),
		modelserver.Call("Bash", map[string]any{"command": "echo two", "description": "two"}),
		modelserver.Say("The picture is noise."),
	)
	res := cc.Prompt(t, "What is in shot.png? Then run two commands.", "--allowedTools", "Read,Bash")
	if err := srv.Err(); err != nil {
		t.Fatal(err)
	}
	main := srv.Requests(modelserver.KindMain)
	if len(main) != 4 {
		t.Fatalf("%d requests reached the model, want 4", len(main))
	}
	m := imageData.FindSubmatch(main[1].Body)
	if m == nil {
		t.Fatalf("the request after the Read carries no picture: %.400s", main[1].Body)
	}
	for i, r := range main[2:] {
		if !bytes.Contains(r.Body, m[1]) {
			t.Errorf("request %d upstream has lost the picture", i+2)
		}
	}
	n := 0
	for _, m := range windowMessages(t, dataDir, res.SessionID) {
		n += m.Tokens
	}
	t.Logf("the window holds %d tokens", n)
}

// inputImage finds the base64 of a picture in a Responses request's body.
var inputImage = regexp.MustCompile(`"type":"input_image","image_url":"data:image/[a-z]+;base64,([A-Za-z0-9+/=]{200})`)

// TestCodex_ProxyImage runs the real Codex CLI through engram proxy with
// a picture attached to its prompt (codex exec --image), its model then
// running two commands: the picture stays in every request, the window
// counting it as OpenAI would, not as the text of its base64.
func TestCodex_ProxyImage(t *testing.T) {
	srv := modelserver.Start(modelserver.Options{})
	defer srv.Close()
	cx := modelserver.NewCodex(t, srv)
	dataDir := t.TempDir()
	env := append(cx.Env, "ENGRAM_DATA_DIR="+dataDir, "ENGRAM_TOKEN=proxy-test-token")
	url := startProxyWith(t, env, srv.URL(), []string{"--openai", srv.URL(), "--window", "40000"})
	pointCodexAt(t, cx, srv.URL(), url, `http_headers = { "X-Engram-Token" = "proxy-test-token" }`)

	shot := filepath.Join(cx.Dir, "shot.png")
	writeNoisePNG(t, shot)
	srv.Add(
		modelserver.Call("exec_command", map[string]any{"cmd": "echo one"}),
		modelserver.Call("exec_command", map[string]any{"cmd": "echo two"}),
		modelserver.Say("The picture is noise."),
	)
	res := cx.Exec(t, "What is in the picture? Then run two commands.", "--image="+shot, "--dangerously-bypass-approvals-and-sandbox")
	if err := srv.Err(); err != nil {
		t.Fatal(err)
	}
	if res.Message != "The picture is noise." {
		t.Errorf("Codex's last message: %q", res.Message)
	}
	main := srv.Requests(modelserver.KindMain)
	if len(main) != 3 {
		t.Fatalf("%d requests reached the model, want 3", len(main))
	}
	m := inputImage.FindSubmatch(main[0].Body)
	if m == nil {
		t.Fatalf("the first request carries no picture: %.600s", main[0].Body)
	}
	for i, r := range main[1:] {
		if !bytes.Contains(r.Body, m[1]) {
			t.Errorf("request %d upstream has lost the picture", i+1)
		}
	}
}

// writeNoisePNG writes a 600 × 400 picture of noise to path: 940 KB that
// PNG cannot compress.
func writeNoisePNG(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, pictest.NoisePNG(600, 400), 0o644); err != nil {
		t.Fatal(err)
	}
}
