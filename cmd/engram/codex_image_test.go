package main

import (
	"bytes"
	"image"
	"image/png"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/engramhq/engram/internal/modelserver"
)

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

	img := image.NewNRGBA(image.Rect(0, 0, 600, 400))
	rand.New(rand.NewSource(1)).Read(img.Pix)
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(cx.Dir, "shot.png")
	if err := os.WriteFile(shot, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
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
