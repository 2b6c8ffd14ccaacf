package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/api"
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
	win := []string{"--session", "shots", "--agent", "browser"}
	engramCLI(t, env, cc.Dir, append([]string{"window", "open", "--limit", "3000", "--output", "200", "--safety", "100"}, win...)...)

	// The browser agent's turns: a screenshot first, then pages of text
	// until the window evicts the screenshot.
	shot := pictest.NoisePNG(48, 32)
	shot64 := base64.StdEncoding.EncodeToString(shot)
	filler := strings.Repeat("the form has a user name field and a password field. ", 40)
	marker := ""
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
		if err := json.Unmarshal([]byte(engramCLI(t, env, cc.Dir, append([]string{"window", "append", "--format", "anthropic", "--json", "--file", f}, win...)...)), &out); err != nil {
			t.Fatal(err)
		}
		for _, r := range out.Evicted {
			if marker == "" && strings.Contains(engramCLI(t, env, cc.Dir, "window", "expand", r.ID), "[image: image/png, 48×32") {
				marker = r.Marker
			}
		}
	}

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
