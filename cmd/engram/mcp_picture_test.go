package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	_ "image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/engramhq/engram/internal/api"
	"github.com/engramhq/engram/internal/harness"
	"github.com/engramhq/engram/internal/modelserver"
	"github.com/engramhq/engram/internal/pictest"
	"github.com/engramhq/engram/internal/window"
)

// TestClaudeCode_RetrievePicture runs the real Claude Code with engram's
// MCP server: a screenshot a browser agent's tool returned, stored in its
// window and evicted under a marker, is asked for by the model with
// mcp__engram__retrieve_context, and the next request the model receives
// carries it as an image block in the tool result, beside the text that
// names it.
//
// Claude Code 2.1.121 passes a picture of at most 500 KiB (512,000 bytes)
// and 2,000 pixels a side byte for byte. A wider or taller one it scales
// down to fit 2,000 × 2,000 (2,576 for claude-opus-4-7), and a file still
// over 500 KiB it sends as a JPEG of at most 500 KiB, so that what its
// model receives is never near the API's 5 MB or 8,000 pixels. It refuses
// none.
func TestClaudeCode_RetrievePicture(t *testing.T) {
	for _, tc := range []struct {
		name  string
		w, h  int
		model string // --model; "" is Claude Code's default, claude-sonnet-4-6
		// What the model receives: a picture of this media type and
		// size, the stored bytes or not.
		mediaType    string
		sentW, sentH int
		stored       bool
	}{
		{name: "Screenshot", w: 48, h: 32, mediaType: "image/png", sentW: 48, sentH: 32, stored: true},
		{name: "UnderHalfMB", w: 357, h: 358, mediaType: "image/png", sentW: 357, sentH: 358, stored: true}, // 511,990 bytes
		{name: "OverHalfMB", w: 358, h: 358, mediaType: "image/jpeg", sentW: 358, sentH: 358},               // 513,422 bytes
		{name: "Large", w: 2000, h: 700, mediaType: "image/jpeg", sentW: 2000, sentH: 700},                  // 5.6 MB, 7.5 MB of base64
		{name: "Wide", w: 2200, h: 600, mediaType: "image/jpeg", sentW: 1998, sentH: 545},
		{name: "Tall", w: 600, h: 2200, mediaType: "image/jpeg", sentW: 545, sentH: 1998},
		{name: "WideOpus", w: 2200, h: 600, model: "claude-opus-4-7", mediaType: "image/jpeg", sentW: 2200, sentH: 600},
		{name: "Long", w: 8100, h: 100, mediaType: "image/png", sentW: 1944, sentH: 24}, // over the API's 8,000 pixels
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := modelserver.Start(modelserver.Options{})
			defer srv.Close()
			cc := modelserver.NewClaudeCode(t, srv)
			dataDir := t.TempDir()
			env := []string{"HOME=" + cc.Home, "PATH=" + os.Getenv("PATH"), "ENGRAM_DATA_DIR=" + dataDir, "ENGRAM_PROJECT=" + cc.Dir}
			shot, marker := evictedScreenshot(t, env, cc.Dir, tc.w, tc.h)
			shot64 := base64.StdEncoding.EncodeToString(shot)

			mcpConfig := filepath.Join(t.TempDir(), "mcp.json")
			modelserver.WriteJSON(t, mcpConfig, mcpJSON{MCPServers: map[string]map[string]any{
				"engram": {"command": binary(t), "args": []string{"mcp"}, "env": map[string]string{"ENGRAM_DATA_DIR": dataDir, "ENGRAM_PROJECT": cc.Dir}},
			}})
			// What the tool result the model receives holds: its text and
			// its pictures.
			var text, model string
			type source struct {
				Type      string `json:"type"`
				MediaType string `json:"media_type"`
				Data      string `json:"data"`
			}
			var pictures []source
			srv.Add(
				// max_tokens as TestCodex_RetrievePicture's, for the same
				// pictures.
				modelserver.Call("mcp__engram__retrieve_context", map[string]any{"ref_id": marker, "max_tokens": 8000}),
				func(r *modelserver.Request) (modelserver.Response, error) {
					model = r.Params.Model
					u := r.Params.LastUser()
					if u == nil {
						return modelserver.Response{}, fmt.Errorf("request %d has no user message", r.Seq)
					}
					for _, b := range u.Content {
						if b.Type != "tool_result" {
							continue
						}
						var blocks []modelserver.Block
						if err := json.Unmarshal(b.Content, &blocks); err != nil {
							return modelserver.Response{}, fmt.Errorf("the tool result's content is not a list of blocks: %v: %.2000s", err, b.Content)
						}
						for _, c := range blocks {
							switch c.Type {
							case "text":
								text += c.Text
							case "image":
								var img struct{ Source source }
								if err := json.Unmarshal(c.Raw, &img); err != nil {
									return modelserver.Response{}, err
								}
								pictures = append(pictures, img.Source)
							}
						}
					}
					return modelserver.Response{Content: []modelserver.Block{modelserver.Text("It is the login page.")}}, nil
				},
			)
			args := []string{"--mcp-config", mcpConfig, "--allowedTools", "mcp__engram__retrieve_context"}
			if tc.model != "" {
				args = append(args, "--model", tc.model)
			}
			res := cc.Prompt(t, "What did the login page look like? "+marker, args...)
			if err := srv.Err(); err != nil {
				t.Fatal(err)
			}
			if res.Result != "It is the login page." {
				t.Errorf("Claude Code's result: %q", res.Result)
			}
			want := tc.model
			if want == "" {
				want = "claude-sonnet-4-6"
			}
			if model != want {
				t.Errorf("the request's model is %q, want %q", model, want)
			}

			// engram's text names the picture, as stored, and does not
			// carry its base64.
			placeholder := fmt.Sprintf("[image: image/png, %d×%d, %s of base64, sha256 ", tc.w, tc.h, window.SizeOf(len(shot64)))
			if !strings.Contains(text, "the quokka login page, as rendered") || !strings.Contains(text, placeholder) || strings.Contains(text, shot64[:200]) {
				t.Errorf("the tool result's text, want %q in it:\n%.3000s", placeholder, text)
			}
			if len(pictures) != 1 || !strings.Contains(text, "; picture 1, sent below]") {
				t.Fatalf("the tool result carries %d pictures, want 1; its text:\n%.3000s", len(pictures), text)
			}
			src := pictures[0]
			got, err := base64.StdEncoding.DecodeString(src.Data)
			if err != nil || src.Type != "base64" || src.MediaType != tc.mediaType {
				t.Fatalf("the picture: %s %s (%v), want base64 %s", src.Type, src.MediaType, err, tc.mediaType)
			}
			img, format, err := image.Decode(bytes.NewReader(got))
			if err != nil || "image/"+format != tc.mediaType || img.Bounds().Dx() != tc.sentW || img.Bounds().Dy() != tc.sentH {
				t.Fatalf("the picture sent is a %s of %v (%v), want a %s of %d×%d", format, img.Bounds().Size(), err, tc.mediaType, tc.sentW, tc.sentH)
			}
			if same := bytes.Equal(got, shot); same != tc.stored {
				t.Errorf("the picture sent is the stored PNG's %d bytes: %v, want %v", len(shot), same, tc.stored)
			}
			if !tc.stored && len(got) > 512000 {
				t.Errorf("the picture sent has %d bytes, over Claude Code's 500 KiB", len(got))
			}
		})
	}
}

// evictedScreenshot stores a browser agent's turns in the window of
// session shots in the project dir (the store env's ENGRAM_DATA_DIR
// names): a w × h screenshot of noise in a tool result, with the text
// "the quokka login page, as rendered", then pages of text until the
// window evicts it. It returns the PNG's bytes and the marker that
// replaced it.
func evictedScreenshot(t *testing.T, env []string, dir string, w, h int) (shot []byte, marker string) {
	t.Helper()
	win := []string{"--session", "shots", "--agent", "browser"}
	engramCLI(t, env, dir, append([]string{"window", "open", "--limit", "3000", "--output", "200", "--safety", "100"}, win...)...)

	// The browser agent's turns: a screenshot first, then pages of text
	// until the window evicts the screenshot.
	shot = pictest.NoisePNG(w, h)
	shot64 := base64.StdEncoding.EncodeToString(shot)
	filler := strings.Repeat("the form has a user name field and a password field. ", 40)
	for i := 0; marker == ""; i++ {
		if i == 10 {
			t.Fatal("the screenshot was not evicted in 10 turns")
		}
		result := fmt.Sprintf(`[{"type":"text","text":"step %d: %s"}]`, i, filler)
		if i == 0 {
			result = `[{"type":"text","text":"the quokka login page, as rendered"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + shot64 + `"}}]`
		}
		turn := fmt.Sprintf(`{"role":"assistant","content":[{"type":"tool_use","id":"call-%d","name":"screenshot","input":{"url":"http://localhost:8080/login"}}]}
{"role":"user","content":[{"type":"tool_result","tool_use_id":"call-%d","content":%s}]}
`, i, i, result)
		f := filepath.Join(t.TempDir(), "turn.jsonl")
		if err := os.WriteFile(f, []byte(turn), 0o644); err != nil {
			t.Fatal(err)
		}
		var out api.AppendOut
		if err := json.Unmarshal([]byte(engramCLI(t, env, dir, append([]string{"window", "append", "--format", "anthropic", "--json", "--file", f}, win...)...)), &out); err != nil {
			t.Fatal(err)
		}
		for _, r := range out.Evicted {
			if marker == "" && strings.Contains(engramCLI(t, env, dir, "window", "expand", r.ID), fmt.Sprintf("[image: image/png, %d×%d", w, h)) {
				marker = r.Marker
			}
		}
	}
	return shot, marker
}

// TestCodex_RetrievePicture is TestClaudeCode_RetrievePicture with the
// real Codex: engram's MCP server is in its config.toml, the model calls
// retrieve_context (mcp__engram) on the screenshot's marker, and the
// function_call_output Codex sends next holds engram's text and the
// picture as an input_image part, a data: URL with detail "high". Codex
// passes a picture of at most 2,048 pixels a side byte for byte, however
// many bytes it has; a wider or taller one it scales down to 2,048 on its
// longer side and sends as a new PNG.
func TestCodex_RetrievePicture(t *testing.T) {
	for _, tc := range []struct {
		name string
		w, h int
		// sentW × sentH is the picture the model receives: the stored
		// bytes when it is w × h.
		sentW, sentH int
	}{
		{"Screenshot", 48, 32, 48, 32},
		{"Large", 2000, 700, 2000, 700}, // 5.6 MB
		{"Wide", 2200, 600, 2048, 559},
		{"Tall", 600, 2200, 559, 2048},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := modelserver.Start(modelserver.Options{})
			defer srv.Close()
			cx := modelserver.NewCodex(t, srv)
			dataDir := t.TempDir()
			env := []string{"HOME=" + cx.Home, "PATH=" + os.Getenv("PATH"), "ENGRAM_DATA_DIR=" + dataDir, "ENGRAM_PROJECT=" + cx.Dir}
			shot, marker := evictedScreenshot(t, env, cx.Dir, tc.w, tc.h)
			shot64 := base64.StdEncoding.EncodeToString(shot)

			config := filepath.Join(cx.CodexHome, "config.toml")
			f, err := os.OpenFile(config, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(f, "\n[mcp_servers.engram]\ncommand = %q\nargs = [\"mcp\"]\nenv = { ENGRAM_DATA_DIR = %q, ENGRAM_PROJECT = %q }\n%s",
				binary(t), dataDir, cx.Dir, harness.CodexApproval)
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			// The parts of the tool output the model receives.
			var parts []modelserver.Part
			srv.Add(
				func(r *modelserver.Request) (modelserver.Response, error) {
					// Enough max_tokens for the largest picture (1,600) and
					// the text.
					call := modelserver.ToolUse("retrieve_context", map[string]any{"ref_id": marker, "max_tokens": 8000})
					call.Namespace = "mcp__engram"
					return modelserver.Response{Content: []modelserver.Block{call}}, nil
				},
				func(r *modelserver.Request) (modelserver.Response, error) {
					it, ok := r.Responses.LastOutput()
					if !ok {
						return modelserver.Response{}, fmt.Errorf("request %d carries no tool output", r.Seq)
					}
					var err error
					if parts, err = it.OutputParts(); err != nil {
						return modelserver.Response{}, fmt.Errorf("the tool output: %v: %.2000s", err, it.Output)
					}
					return modelserver.Response{Content: []modelserver.Block{modelserver.Text("It is the login page.")}}, nil
				},
			)
			res := cx.Exec(t, "What did the login page look like? "+marker)
			if err := srv.Err(); err != nil {
				t.Fatal(err)
			}
			if res.Message != "It is the login page." {
				t.Errorf("Codex's last message: %q", res.Message)
			}

			// Codex's "Wall time: …\nOutput:", engram's text, the picture.
			var types []string
			for _, p := range parts {
				types = append(types, p.Type)
			}
			if diff := cmp.Diff([]string{"input_text", "input_text", "input_image"}, types); diff != "" {
				t.Fatalf("the tool output's parts (-want +got):\n%s", diff)
			}
			if text := parts[1].Text; !strings.HasPrefix(parts[0].Text, "Wall time: ") ||
				!strings.Contains(text, "the quokka login page, as rendered") || !strings.Contains(text, fmt.Sprintf("[image: image/png, %d×%d", tc.w, tc.h)) ||
				!strings.Contains(text, "; picture 1, sent below]") || strings.Contains(text, shot64[:200]) {
				t.Errorf("the tool output's text:\n%s\n%.3000s", parts[0].Text, text)
			}
			img := parts[2]
			data, ok := strings.CutPrefix(img.ImageURL, "data:image/png;base64,")
			got, err := base64.StdEncoding.DecodeString(data)
			if !ok || err != nil || img.Detail != "high" {
				t.Fatalf("the picture: detail %q, %.60s… (%v)", img.Detail, img.ImageURL, err)
			}
			cfg, err := png.DecodeConfig(bytes.NewReader(got))
			if err != nil || cfg.Width != tc.sentW || cfg.Height != tc.sentH {
				t.Fatalf("the picture sent is %d×%d (%v), want %d×%d", cfg.Width, cfg.Height, err, tc.sentW, tc.sentH)
			}
			if same := bytes.Equal(got, shot); same != (tc.sentW == tc.w && tc.sentH == tc.h) {
				t.Errorf("the picture sent is the stored PNG's %d bytes: %v, want %v", len(shot), same, !same)
			}
		})
	}
}
