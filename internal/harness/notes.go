package harness

import (
	"fmt"
	"os"
	"path/filepath"
)

// notes says what the harness needs besides its files for engram's
// entries to take effect, as read from the report and the harness's
// configuration.
func (o Options) notes(op op, rep Report) []string {
	if op == opUninstall {
		return nil
	}
	wrote := func(kind string) bool {
		for _, f := range rep.Files {
			for _, it := range f.Items {
				isMCP := it.Name == MCPItem
				if (kind == "mcp") == isMCP && (it.State == Added || it.State == Updated || (op == opStatus && it.State == Present)) {
					return true
				}
			}
		}
		return false
	}
	var notes []string
	switch o.Harness {
	case ClaudeCode:
		if o.Scope == ProjectScope && op == opInstall && wrote("mcp") {
			notes = append(notes, "Claude Code asks once whether to use the servers of a project's .mcp.json: approve engram then (or list it in enabledMcpjsonServers of .claude/settings.local.json)")
		}
	case Codex:
		if !wrote("hooks") {
			break
		}
		if op == opInstall {
			notes = append(notes, `Codex runs a new or changed hook only once you trust it: it says "Hooks need review" when it starts; choose to trust them (codex exec runs untrusted hooks only with --dangerously-bypass-hook-trust)`)
		}
		user := filepath.Join(o.codexHome(), "config.toml")
		files := []string{user}
		if o.Scope == ProjectScope {
			files = append(files, filepath.Join(o.Project, ".codex", "config.toml"))
		}
		for _, path := range files {
			data, err := os.ReadFile(path)
			if err != nil {
				continue
			}
			c, err := parseTOML(path, data)
			if err != nil {
				continue
			}
			for _, key := range []string{"hooks", "codex_hooks"} {
				if v, ok := c.Features[key].(bool); ok && !v {
					notes = append(notes, fmt.Sprintf("%s turns Codex's hooks off ([features] %s = false): engram's hooks will not run", path, key))
				}
			}
			if path == user && o.Scope == ProjectScope && c.Projects[o.Project].TrustLevel != "trusted" {
				notes = append(notes, fmt.Sprintf("Codex reads %s only in a trusted project: trust it when Codex asks, or set [projects.%s] trust_level = \"trusted\" in %s",
					filepath.Join(o.Project, ".codex"), tomlString(o.Project), user))
			}
		}
		if _, err := os.Stat(user); err != nil && o.Scope == ProjectScope {
			notes = append(notes, fmt.Sprintf("Codex reads %s only in a trusted project: trust it when Codex asks", filepath.Join(o.Project, ".codex")))
		}
	}
	return notes
}
