package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/modelserver"
)

// TestClaudeCode_ProxyMCPResult runs the real Claude Code through engram
// proxy with a small window and has the model read a stored note with
// engram's MCP tool retrieve_context. Claude Code sends an MCP tool's
// result as an array of content blocks (its built-in tools' as strings),
// which the window keeps raw. The proxy's windows take the default role,
// which keeps no digest: what a user sees of an old result there is the
// head and tail of one too large for the window. The result here is over
// half the window's room, so once it is no longer the turn's own the
// requests carry it clipped, beside its marker, and its head holds the
// note's first line, which names a path.
func TestClaudeCode_ProxyMCPResult(t *testing.T) {
	srv := modelserver.Start(modelserver.Options{})
	defer srv.Close()
	cc := modelserver.NewClaudeCode(t, srv)
	dataDir := t.TempDir()
	env := append(cc.Env, "ENGRAM_DATA_DIR="+dataDir, "ENGRAM_TOKEN=proxy-test-token")
	// The default role's policy clips a result over half the room, which
	// is what this test reads (tool_loop, the proxy's own, clips only what
	// overflows the budget).
	url := startProxyArgs(t, env, srv.URL(), "--window", "40000", "--role", "default", "--project", cc.Dir)
	throughProxy(cc, url, "proxy-test-token")
	cc.Env = append(cc.Env, "ENGRAM_DATA_DIR="+dataDir)
	mcpConfig := engramCLI(t, env, cc.Dir, "mcp", "--print-config", "claude-code", "--project", cc.Dir)
	if err := os.WriteFile(filepath.Join(cc.Dir, ".mcp.json"), []byte(mcpConfig), 0o644); err != nil {
		t.Fatal(err)
	}

	// A note stored before the session, so that its lines reach the
	// conversation only through the MCP tool's result.
	const line = "the session key is sealed in internal/quartz/keyring_flux.go:88 by sealKeyring"
	var note strings.Builder
	note.WriteString(line + "\n")
	for j := 0; note.Len() < 14000; j++ {
		fmt.Fprintf(&note, "ledger line %d: the quartermaster counts crates of tea and tallow for voyage %d\n", j, 7000+j)
	}
	rec, err := json.Marshal(map[string]any{"session": "notes", "agent": "me", "type": "note", "content": note.String()})
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(t.TempDir(), "note.jsonl")
	if err := os.WriteFile(in, append(rec, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	id := regexp.MustCompile(`[0-9a-f]{12,}`).FindString(engramCLI(t, env, cc.Dir, "add", in))
	if id == "" {
		t.Fatal("engram add printed no entry id")
	}

	// sent reports whether request r carries the line, and whether it
	// carries the MCP result whole, as Claude Code sent it.
	sent := func(r *modelserver.Request) (holds, whole bool) {
		var body struct {
			Messages []struct {
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Errorf("request %d: %v", r.Seq, err)
		}
		for _, m := range body.Messages {
			var blocks []map[string]any
			_ = json.Unmarshal(m.Content, &blocks)
			for _, b := range blocks {
				if b["type"] == "tool_result" && b["tool_use_id"] == "toolu_mdl000000000000001" {
					whole = true
				}
			}
			holds = holds || bytes.Contains(m.Content, []byte(line))
		}
		return holds, whole
	}
	type carried struct {
		seq          int
		holds, whole bool
	}
	var after []carried // after the result's turn: what each request carried
	steps := []modelserver.Step{
		modelserver.Call("mcp__engram__retrieve_context", map[string]any{"content_ids": []string{id}, "max_tokens": 4000}),
	}
	for k := range 4 {
		steps = append(steps, func(r *modelserver.Request) (modelserver.Response, error) {
			if k == 0 {
				if got := modelserver.ToolResult(t, r); !strings.Contains(got, line) {
					return modelserver.Response{}, fmt.Errorf("retrieve_context answered without the note's first line:\n%.500s", got)
				}
			} else {
				holds, whole := sent(r)
				after = append(after, carried{r.Seq, holds, whole})
			}
			return modelserver.Response{Content: []modelserver.Block{modelserver.ToolUse("Bash",
				map[string]any{"command": fmt.Sprintf("echo step %d", k), "description": "echo"})}}, nil
		})
	}
	steps = append(steps, modelserver.Say("Done."))
	srv.Add(steps...)
	out, err := cc.Run(t, "-p", "Read the note about the session key.", "--output-format", "json",
		"--allowedTools", "Bash,mcp__engram__retrieve_context")
	if serr := srv.Err(); serr != nil {
		t.Fatal(serr)
	}
	if err != nil {
		t.Fatal(err)
	}
	var res modelserver.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Result != "Done." {
		t.Fatalf("claude's result: %v: %s", err, out)
	}
	// Each request after the result's turn shows it clipped, not whole,
	// and its head holds the line.
	if len(after) != 3 {
		t.Fatalf("%d requests after the result's turn, want 3", len(after))
	}
	for _, a := range after {
		if a.whole || !a.holds {
			t.Errorf("request %d: the line shown %v, the result sent whole %v; want the result clipped, its head showing the line", a.seq, a.holds, a.whole)
		}
	}
}
