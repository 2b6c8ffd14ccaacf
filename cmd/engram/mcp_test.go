package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMCP_Stdio runs the built binary as an MCP server over stdio, as an
// agent harness does, and performs a session with the SDK's client:
// briefing, search, record, retrieve.
func TestMCP_Stdio(t *testing.T) {
	e := newEnv(t)
	e.ok(readExample(t), "add")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := e.command(ctx, "mcp", "--session", "s-mcp", "--agent", "claude-1", "--model", "claude-opus-4-5")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	c := mcp.NewClient(&mcp.Implementation{Name: "test-harness", Version: "v0"}, nil)
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr.String())
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 17 {
		t.Fatalf("tools: %d, %v", len(tools.Tools), err)
	}
	callText := func(name string, args map[string]any) string {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if res.IsError {
			t.Fatalf("%s: tool error %v", name, res.Content)
		}
		return res.Content[0].(*mcp.TextContent).Text
	}
	if got := callText("briefing", map[string]any{"tier": "micro"}); !strings.HasPrefix(got, "none:1/1") {
		t.Errorf("briefing: %q", got)
	}
	if got := callText("search", map[string]any{"query": "flaky retry backoff"}); !strings.Contains(got, "demo-flaky-test") {
		t.Errorf("search: %q", got)
	}
	if got := callText("record", map[string]any{"type": "note", "content": "the upload retry needs jitter"}); !strings.Contains(got, "recorded") {
		t.Errorf("record: %q", got)
	}
	if got := callText("retrieve_context", map[string]any{"query": "upload retry jitter"}); !strings.Contains(got, "needs jitter") {
		t.Errorf("retrieve_context: %q", got)
	}
	callText("record_insight", map[string]any{"insight": "jitter fixes the flaky upload test"})
	if err := cs.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if strings.Contains(stderr.String(), "panic") {
		t.Errorf("server stderr:\n%s", stderr.String())
	}
	// What the agent wrote is in the store, in its session.
	if out := e.ok("", "events", "-n", "5"); !strings.Contains(out, "insight_add") || !strings.Contains(out, "claude-1@s-mcp") {
		t.Errorf("events after the session:\n%s", out)
	}
}

func TestMCP_PrintConfig(t *testing.T) {
	e := newEnv(t)
	var claude struct {
		MCPServers map[string]struct {
			Type    string
			Command string
			Args    []string
		} `json:"mcpServers"`
	}
	if err := jsonUnmarshal(e.ok("", "mcp", "--print-config", "claude"), &claude); err != nil {
		t.Fatal(err)
	}
	s := claude.MCPServers["engram"]
	if s.Type != "stdio" || s.Command == "" || len(s.Args) != 3 || s.Args[0] != "mcp" || s.Args[2] != e.project {
		t.Errorf("claude config: %+v", claude)
	}
	if out := e.ok("", "mcp", "--print-config", "codex"); !strings.HasPrefix(out, "[mcp_servers.engram]\ncommand = ") {
		t.Errorf("codex config: %q", out)
	}
	if out := e.ok("", "mcp", "--print-config", "cursor"); !strings.Contains(out, `"mcpServers"`) {
		t.Errorf("cursor config: %q", out)
	}
	if code, _, errOut := e.run("", "mcp", "--print-config", "vim"); code != 2 || !strings.Contains(errOut, "claude, codex, cursor") {
		t.Errorf("unknown client: exit %d, %q", code, errOut)
	}
}
