package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeShellBlocks are the README's shell code blocks, by the line each
// starts on.
func readmeShellBlocks(t *testing.T) map[int]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[int]string{}
	text := string(data)
	for _, m := range regexp.MustCompile("(?s)```(?:sh|bash|shell)\n(.*?)```").FindAllStringSubmatchIndex(text, -1) {
		blocks[strings.Count(text[:m[0]], "\n")+1] = text[m[2]:m[3]]
	}
	if len(blocks) == 0 {
		t.Fatal("the README has no shell blocks")
	}
	return blocks
}

// redirectRE finds a redirection of a command's output into a file.
var redirectRE = regexp.MustCompile(`(?:^|\s)>>?\s*("[^"]+"|\S+)`)

// TestREADME_SetupMakesDirectories checks every line of the README's
// shell blocks that writes a file into a directory (~/.codex/config.toml,
// .cursor/mcp.json): it starts with mkdir -p of that directory, or an
// earlier line of its block does, since the directory need not exist
// yet and the shell would refuse the line.
func TestREADME_SetupMakesDirectories(t *testing.T) {
	checked := 0
	for start, block := range readmeShellBlocks(t) {
		made := map[string]bool{}
		for i, line := range strings.Split(block, "\n") {
			line, _, _ = strings.Cut(line, " #")
			for _, cmd := range strings.Split(line, "&&") {
				if dir, ok := strings.CutPrefix(strings.TrimSpace(cmd), "mkdir -p "); ok {
					made[strings.TrimSpace(dir)] = true
				}
			}
			for _, m := range redirectRE.FindAllStringSubmatch(line, -1) {
				file := strings.Trim(m[1], `"`)
				if strings.HasPrefix(file, "&") || strings.HasPrefix(file, "/dev/") || !strings.Contains(file, "/") {
					continue // a descriptor, a device, or the current directory
				}
				checked++
				if dir := path.Dir(file); !made[dir] {
					t.Errorf("README.md:%d: %q writes into %s without mkdir -p %s first", start+1+i, strings.TrimSpace(line), dir, dir)
				}
			}
		}
	}
	if checked < 3 {
		t.Errorf("checked %d lines that write into a directory; the README has at least 3", checked)
	}
}

// TestREADME_RegisterMCP runs the README's lines that register engram's
// MCP server with each client, as they stand, in a new project and a new
// home directory: each writes its client's file, which holds engram's
// server.
func TestREADME_RegisterMCP(t *testing.T) {
	var lines string
	for _, block := range readmeShellBlocks(t) {
		if strings.Contains(block, "engram mcp --print-config cursor") {
			lines = block
		}
	}
	if lines == "" {
		t.Fatal("the README has no block registering engram with Cursor")
	}
	home, project := t.TempDir(), t.TempDir()
	run := exec.Command("bash", "-e", "-c", lines)
	run.Dir = project
	run.Env = []string{"HOME=" + home, "ENGRAM_DATA_DIR=" + t.TempDir(),
		"PATH=" + filepath.Dir(binary(t)) + string(filepath.ListSeparator) + os.Getenv("PATH")}
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("the README's lines:\n%s\n%v: %s", lines, err, out)
	}
	for _, f := range []string{filepath.Join(project, ".mcp.json"), filepath.Join(project, ".cursor", "mcp.json")} {
		var c struct {
			MCPServers map[string]struct{ Command string } `json:"mcpServers"`
		}
		data, err := os.ReadFile(f)
		if err != nil || json.Unmarshal(data, &c) != nil || c.MCPServers["engram"].Command == "" {
			t.Errorf("%s: %v: %s", f, err, data)
		}
	}
	if data, err := os.ReadFile(filepath.Join(home, ".codex", "config.toml")); err != nil || strings.Count(string(data), "\n[mcp_servers.engram]\ncommand = ") != 1 {
		t.Errorf("~/.codex/config.toml: %v: %s", err, data)
	}
}
