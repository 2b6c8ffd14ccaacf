package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
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
)

// TestClaudeCode_RetrievePicture runs the real Claude Code with engram's
// MCP server: a screenshot a browser agent's tool returned, stored in its
// window and evicted under a marker, is asked for by the model with
// mcp__engram__retrieve_context, and the next request the model receives
// carries it as an image block in the tool result, the same bytes, beside
// the text that names it.
func TestClaudeCode_RetrievePicture(t *testing.T) {
	srv := modelserver.Start(modelserver.Options{})
	defer srv.Close()
	cc := modelserver.NewClaudeCode(t, srv)
	dataDir := t.TempDir()
	env := []string{"HOME=" + cc.Home, "PATH=" + os.Getenv("PATH"), "ENGRAM_DATA_DIR=" + dataDir, "ENGRAM_PROJECT=" + cc.Dir}
	shot, marker := evictedScreenshot(t, env, cc.Dir, 48, 32)
	shot64 := base64.StdEncoding.EncodeToString(shot)

	mcpConfig := filepath.Join(t.TempDir(), "mcp.json")
	modelserver.WriteJSON(t, mcpConfig, mcpJSON{MCPServers: map[string]map[string]any{
		"engram": {"command": binary(t), "args": []string{"mcp"}, "env": map[string]string{"ENGRAM_DATA_DIR": dataDir, "ENGRAM_PROJECT": cc.Dir}},
	}})
	// What the tool result the model receives holds: its text and its
	// pictures.
	var text string
	type source struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
	}
	var pictures []source
	srv.Add(
		modelserver.Call("mcp__engram__retrieve_context", map[string]any{"ref_id": marker}),
		func(r *modelserver.Request) (modelserver.Response, error) {
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
					return modelserver.Response{}, fmt.Errorf("the tool result's content is not a list of blocks: %v: %s", err, b.Content)
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
	res := cc.Prompt(t, "What did the login page look like? "+marker, "--mcp-config", mcpConfig, "--allowedTools", "mcp__engram__retrieve_context")
	if err := srv.Err(); err != nil {
		t.Fatal(err)
	}
	if res.Result != "It is the login page." {
		t.Errorf("Claude Code's result: %q", res.Result)
	}
	if len(pictures) != 1 {
		t.Fatalf("the tool result carries %d pictures, want 1; its text:\n%.2000s", len(pictures), text)
	}
	src := pictures[0]
	got, err := base64.StdEncoding.DecodeString(src.Data)
	if err != nil || src.Type != "base64" || src.MediaType != "image/png" || !bytes.Equal(got, shot) {
		t.Errorf("the picture: %s %s of %d bytes (%v), want the %d bytes of the PNG stored", src.Type, src.MediaType, len(got), err, len(shot))
	}
	if !strings.Contains(text, "the quokka login page, as rendered") || !strings.Contains(text, "[image: image/png, 48×32") ||
		!strings.Contains(text, "; picture 1, sent below]") || strings.Contains(text, shot64[:200]) {
		t.Errorf("the tool result's text:\n%.3000s", text)
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
