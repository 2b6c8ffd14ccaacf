package harness

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// testEnv is a temporary home and project.
type testEnv struct {
	home, project string
}

func newTestEnv(t *testing.T) testEnv {
	t.Helper()
	root := t.TempDir()
	e := testEnv{home: filepath.Join(root, "home"), project: filepath.Join(root, "my project")}
	for _, d := range []string{e.home, e.project} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

const bin = "/opt/engram/bin/engram"

func (e testEnv) opts(h Harness, s Scope) Options {
	stamp := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	return Options{Harness: h, Scope: s, Project: e.project, Home: e.home, Command: bin,
		Now: func() time.Time { stamp = stamp.Add(time.Second); return stamp }}
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// states returns each file's items as "event=state", by file base name.
func states(rep Report) map[string][]string {
	m := map[string][]string{}
	for _, f := range rep.Files {
		for _, it := range f.Items {
			m[filepath.Base(f.Path)] = append(m[filepath.Base(f.Path)], it.Name+"="+string(it.State))
		}
	}
	return m
}

// backups lists the backups in dir.
func backups(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.engram-backup-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func all(state State) []string {
	var s []string
	for _, e := range Events {
		s = append(s, e+"="+string(state))
	}
	return s
}

func TestHarness_InstallClaudeCodeProjectFresh(t *testing.T) {
	e := newTestEnv(t)
	rep, err := Install(e.opts(ClaudeCode, ProjectScope))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"settings.json": all(Added), ".mcp.json": {"mcp:engram=added"}}
	if diff := cmp.Diff(want, states(rep)); diff != "" {
		t.Errorf("install (-want +got):\n%s", diff)
	}
	q := "'" + e.project + "'" // the directory has a space
	wantSettings := `{
  "hooks": {
    "SessionStart": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "/opt/engram/bin/engram hook claude-code SessionStart --project ` + q + `",
            "timeout": 30
          }
        ]
      }
    ],
    "UserPromptSubmit": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "/opt/engram/bin/engram hook claude-code UserPromptSubmit --project ` + q + `",
            "timeout": 30
          }
        ]
      }
    ],
    "PostToolUse": [
      {
        "matcher": "*",
        "hooks": [
          {
            "type": "command",
            "command": "/opt/engram/bin/engram hook claude-code PostToolUse --project ` + q + `",
            "timeout": 30
          }
        ]
      }
    ],
    "PreCompact": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "/opt/engram/bin/engram hook claude-code PreCompact --project ` + q + `",
            "timeout": 30
          }
        ]
      }
    ],
    "Stop": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "/opt/engram/bin/engram hook claude-code Stop --project ` + q + `",
            "timeout": 30
          }
        ]
      }
    ]
  }
}
`
	if diff := cmp.Diff(wantSettings, readFile(t, filepath.Join(e.project, ".claude", "settings.json"))); diff != "" {
		t.Errorf("settings.json (-want +got):\n%s", diff)
	}
	wantMCP := `{
  "mcpServers": {
    "engram": {
      "type": "stdio",
      "command": "/opt/engram/bin/engram",
      "args": [
        "mcp",
        "--project",
        "` + e.project + `"
      ]
    }
  }
}
`
	if diff := cmp.Diff(wantMCP, readFile(t, filepath.Join(e.project, ".mcp.json"))); diff != "" {
		t.Errorf(".mcp.json (-want +got):\n%s", diff)
	}
	if b := append(backups(t, e.project), backups(t, filepath.Join(e.project, ".claude"))...); len(b) != 0 {
		t.Errorf("backups of files that did not exist: %v", b)
	}

	// A second install changes nothing.
	rep, err = Install(e.opts(ClaudeCode, ProjectScope))
	if err != nil || rep.Changed() {
		t.Fatalf("second install: changed %v, %v", rep.Changed(), err)
	}
	if diff := cmp.Diff(map[string][]string{"settings.json": all(Present), ".mcp.json": {"mcp:engram=installed"}}, states(rep)); diff != "" {
		t.Errorf("second install (-want +got):\n%s", diff)
	}

	// Uninstall deletes the files it created.
	if _, err := Uninstall(e.opts(ClaudeCode, ProjectScope)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(e.project, ".claude", "settings.json"), filepath.Join(e.project, ".mcp.json")} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after uninstall: %v", p, err)
		}
	}
}

// userSettings is a settings file with the user's own hooks, one in the
// same event as engram's, in Claude Code's layout.
const userSettings = `{
  "permissions": {
    "allow": [
      "Bash(go test:*)"
    ]
  },
  "model": "opus",
  "hooks": {
    "PostToolUse": [
      {
        "matcher": "Edit|Write",
        "hooks": [
          {
            "type": "command",
            "command": "gofmt -w \"$FILE\" <&- && echo done",
            "timeout": 5
          }
        ]
      }
    ],
    "Notification": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "notify-send claude"
          }
        ]
      }
    ]
  },
  "zz": 1.50
}
`

func TestHarness_InstallMergesAndUninstallRestores(t *testing.T) {
	for _, tc := range []struct {
		name     string
		settings string
		mode     os.FileMode
	}{
		{"TwoSpaces", userSettings, 0o644},
		{"FourSpaces", strings.ReplaceAll(userSettings, "  ", "    "), 0o600},
		{"Tabs", strings.ReplaceAll(userSettings, "  ", "\t"), 0o640},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t)
			path := filepath.Join(e.project, ".claude", "settings.json")
			writeFile(t, path, tc.settings, tc.mode)
			mcp := filepath.Join(e.project, ".mcp.json")
			writeFile(t, mcp, "{\"mcpServers\":{\"other\":{\"command\":\"x\"}}}", 0o644)
			rep, err := Install(e.opts(ClaudeCode, ProjectScope))
			if err != nil {
				t.Fatal(err)
			}
			got := readFile(t, path)
			// The user's keys keep their order, their hook its place
			// before engram's in the same event, numbers their text.
			if i, j, k := strings.Index(got, `"permissions"`), strings.Index(got, `"model"`), strings.Index(got, `"zz": 1.50`); i < 0 || i >= j || j >= k {
				t.Errorf("key order lost:\n%s", got)
			}
			if i, j := strings.Index(got, "gofmt"), strings.Index(got, "hook claude-code PostToolUse"); i < 0 || i >= j {
				t.Errorf("user's PostToolUse hook not first:\n%s", got)
			}
			if !strings.Contains(got, `<&- && echo done`) {
				t.Errorf("HTML characters escaped:\n%s", got)
			}
			indent := strings.SplitN(tc.settings, "\n", 3)[1]
			indent = indent[:len(indent)-len(strings.TrimLeft(indent, " \t"))]
			if !strings.Contains(got, "\n"+indent+`"hooks": {`+"\n"+indent+indent+`"PostToolUse"`) {
				t.Errorf("indentation %q not kept:\n%s", indent, got)
			}
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != tc.mode {
				t.Errorf("mode %v, want %v (%v)", fi.Mode().Perm(), tc.mode, err)
			}
			// Each changed file was backed up as it was.
			for _, f := range rep.Files {
				if f.Backup == "" {
					t.Errorf("%s: no backup", f.Path)
					continue
				}
				want := tc.settings
				if f.Path == mcp {
					want = "{\"mcpServers\":{\"other\":{\"command\":\"x\"}}}"
				}
				if got := readFile(t, f.Backup); got != want {
					t.Errorf("backup %s:\n%s", f.Backup, got)
				}
			}
			// Compact stays compact.
			if got, want := readFile(t, mcp), `{"mcpServers":{"other":{"command":"x"},"engram":{"type":"stdio","command":"/opt/engram/bin/engram","args":["mcp","--project","`+e.project+`"]}}}`; got != want {
				t.Errorf(".mcp.json:\n%s\nwant\n%s", got, want)
			}
			// Install again: no change, no new backup.
			rep2, err := Install(e.opts(ClaudeCode, ProjectScope))
			if err != nil || rep2.Changed() {
				t.Fatalf("second install: %v %v", rep2.Changed(), err)
			}
			if n := len(backups(t, filepath.Dir(path))); n != 1 {
				t.Errorf("%d backups after two installs", n)
			}
			// Uninstall gives the file back byte for byte.
			rep3, err := Uninstall(e.opts(ClaudeCode, ProjectScope))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(map[string][]string{"settings.json": all(Removed), ".mcp.json": {"mcp:engram=removed"}}, states(rep3)); diff != "" {
				t.Errorf("uninstall (-want +got):\n%s", diff)
			}
			if got := readFile(t, path); got != tc.settings {
				t.Errorf("after uninstall:\n%s\nwant\n%s", got, tc.settings)
			}
			if got := readFile(t, mcp); got != `{"mcpServers":{"other":{"command":"x"}}}` {
				t.Errorf(".mcp.json after uninstall: %s", got)
			}
		})
	}
}

func TestHarness_InstallRefusesBadFiles(t *testing.T) {
	for _, tc := range []struct {
		name, file, content, want string
		h                         Harness
	}{
		{"LineComment", ".claude/settings.json", "{\n  // mine\n  \"model\": \"opus\"\n}\n", "settings.json:2:3: has a comment", ClaudeCode},
		{"BlockComment", ".mcp.json", "{\"a\": 1 /* x */}", ".mcp.json:1:9: has a comment", ClaudeCode},
		{"TrailingComma", ".claude/settings.json", "{\n  \"a\": 1,\n}\n", "settings.json:3:1: invalid JSON", ClaudeCode},
		{"Truncated", ".mcp.json", "{\n  \"mcpServers\": {", ".mcp.json:2:18: invalid JSON: unexpected end", ClaudeCode},
		{"TwoValues", ".mcp.json", "{}\n{}", ".mcp.json:2:1: invalid JSON", ClaudeCode},
		{"NotObject", ".mcp.json", "[]", ".mcp.json:1:1: is not a JSON object", ClaudeCode},
		{"HooksNotObject", ".claude/settings.json", `{"hooks": []}`, `"hooks" is not an object`, ClaudeCode},
		{"InvalidTOML", ".codex/config.toml", "# mine\n[mcp_servers.x]\ncommand = \n", "config.toml:3:", Codex},
		{"CodexHooksComment", ".codex/hooks.json", "// x\n{}", "hooks.json:1:1: has a comment", Codex},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t)
			path := filepath.Join(e.project, tc.file)
			writeFile(t, path, tc.content, 0o644)
			_, err := Install(e.opts(tc.h, ProjectScope))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			// Nothing was written: not the bad file, nor the good one.
			if got := readFile(t, path); got != tc.content {
				t.Errorf("bad file changed: %q", got)
			}
			n := 0
			_ = filepath.Walk(e.project, func(p string, fi os.FileInfo, err error) error {
				if err == nil && !fi.IsDir() {
					n++
				}
				return nil
			})
			if n != 1 {
				t.Errorf("%d files in the project, want the bad one alone", n)
			}
			// Status reports the file, without failing.
			rep, err := Status(e.opts(tc.h, ProjectScope))
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, f := range rep.Files {
				found = found || strings.Contains(f.Err, tc.want)
			}
			if !found {
				t.Errorf("status: %+v", rep.Files)
			}
		})
	}
}

func TestHarness_UninstallEditedEntriesStay(t *testing.T) {
	e := newTestEnv(t)
	o := e.opts(ClaudeCode, ProjectScope)
	if _, err := Install(o); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.project, ".claude", "settings.json")
	// The user raises Stop's timeout and adds a handler of their own to
	// engram's SessionStart group.
	s := readFile(t, path)
	s = strings.Replace(s, "Stop --project '"+e.project+"'\",\n            \"timeout\": 30", "Stop --project '"+e.project+"'\",\n            \"timeout\": 90", 1)
	s = strings.Replace(s, `"hooks": [`+"\n          {", `"hooks": [`+"\n          {\"type\": \"command\", \"command\": \"date\"},\n          {", 1)
	writeFile(t, path, s, 0o644)
	mcp := filepath.Join(e.project, ".mcp.json")
	writeFile(t, mcp, strings.Replace(readFile(t, mcp), `"mcp",`, `"mcp", "--agent", "me",`, 1), 0o644)

	rep, err := Install(o)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"settings.json": {"SessionStart=edited", "UserPromptSubmit=installed", "PostToolUse=installed", "PreCompact=installed", "Stop=edited"},
		".mcp.json":     {"mcp:engram=edited"},
	}
	if diff := cmp.Diff(want, states(rep)); diff != "" || rep.Changed() {
		t.Errorf("install over edited entries, changed %v (-want +got):\n%s", rep.Changed(), diff)
	}
	rep, err = Uninstall(o)
	if err != nil {
		t.Fatal(err)
	}
	want = map[string][]string{
		"settings.json": {"SessionStart=edited", "UserPromptSubmit=removed", "PostToolUse=removed", "PreCompact=removed", "Stop=edited"},
		".mcp.json":     {"mcp:engram=edited"},
	}
	if diff := cmp.Diff(want, states(rep)); diff != "" {
		t.Errorf("uninstall (-want +got):\n%s", diff)
	}
	for _, f := range rep.Files {
		for _, it := range f.Items {
			if it.State == Edited && !strings.Contains(it.Note, "by hand") {
				t.Errorf("%s %s: note %q", f.Path, it.Name, it.Note)
			}
		}
	}
	got := readFile(t, path)
	if !strings.Contains(got, `"timeout": 90`) || !strings.Contains(got, `"date"`) || strings.Contains(got, "PreCompact") {
		t.Errorf("after uninstall:\n%s", got)
	}
}

func TestHarness_InstallMovedBinaryIsUpdated(t *testing.T) {
	e := newTestEnv(t)
	o := e.opts(Codex, UserScope)
	o.Command = "/old/engram"
	if _, err := Install(o); err != nil {
		t.Fatal(err)
	}
	o.Command = bin
	rep, err := Install(o)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]string{"hooks.json": all(Updated), "config.toml": {"mcp:engram=updated"}}, states(rep)); diff != "" {
		t.Errorf("reinstall (-want +got):\n%s", diff)
	}
	for _, f := range []string{"hooks.json", "config.toml"} {
		if got := readFile(t, filepath.Join(e.home, ".codex", f)); strings.Contains(got, "/old/") || strings.Count(got, bin) == 0 {
			t.Errorf("%s:\n%s", f, got)
		}
	}
}

func TestHarness_InstallClaudeCodeUser(t *testing.T) {
	for _, configDir := range []string{"", "cfg"} {
		t.Run("ConfigDir="+configDir, func(t *testing.T) {
			e := newTestEnv(t)
			o := e.opts(ClaudeCode, UserScope)
			dir, state := filepath.Join(e.home, ".claude"), filepath.Join(e.home, ".claude.json")
			if configDir != "" {
				o.ClaudeConfigDir = filepath.Join(e.home, configDir)
				dir, state = o.ClaudeConfigDir, filepath.Join(o.ClaudeConfigDir, ".claude.json")
			}
			// Claude Code's own state file, private.
			own := "{\n  \"numStartups\": 3,\n  \"projects\": {\n    \"/x\": {\n      \"mcpServers\": {}\n    }\n  }\n}\n"
			writeFile(t, state, own, 0o600)
			if _, err := Install(o); err != nil {
				t.Fatal(err)
			}
			got := readFile(t, state)
			if !strings.HasPrefix(got, "{\n  \"numStartups\": 3,\n  \"projects\": {") || !strings.Contains(got, "\"args\": [\n        \"mcp\"\n      ]") {
				t.Errorf(".claude.json:\n%s", got)
			}
			if fi, err := os.Stat(state); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf(".claude.json mode: %v %v", fi.Mode(), err)
			}
			b := backups(t, filepath.Dir(state))
			if len(b) != 1 {
				t.Fatalf("backups %v", b)
			}
			if fi, err := os.Stat(b[0]); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("backup mode: %v %v", fi.Mode(), err)
			}
			// User-scope hooks name no project.
			if s := readFile(t, filepath.Join(dir, "settings.json")); !strings.Contains(s, `"/opt/engram/bin/engram hook claude-code Stop"`) {
				t.Errorf("settings.json:\n%s", s)
			}
			if _, err := Uninstall(o); err != nil {
				t.Fatal(err)
			}
			if got := readFile(t, state); got != own {
				t.Errorf(".claude.json after uninstall:\n%s", got)
			}
		})
	}
}

// userCodexConfig is a Codex config.toml with comments and a trailing
// line without a newline.
const userCodexConfig = `# my codex config
model = "gpt-5.5"   # the best

[mcp_servers.docs]
command = "npx"
args = ["-y", "docs-mcp"]  # keep

[projects."/work/p"]
trust_level = "trusted"`

func TestHarness_InstallCodexTOML(t *testing.T) {
	e := newTestEnv(t)
	o := e.opts(Codex, UserScope)
	path := filepath.Join(e.home, ".codex", "config.toml")
	writeFile(t, path, userCodexConfig, 0o600)
	o.MCPArgs = []string{"--agent", `co"dex`}
	rep, err := Install(o)
	if err != nil {
		t.Fatal(err)
	}
	want := userCodexConfig + "\n" + tomlBegin + `
[mcp_servers.engram]
command = "/opt/engram/bin/engram"
args = ["mcp", "--agent", "co\"dex"]
env_vars = ["ENGRAM_DATA_DIR", "ENGRAM_CONFIG", "ENGRAM_STORE", "ENGRAM_LOG_LEVEL"]
default_tools_approval_mode = "approve"
` + tomlEnd + "\n"
	if diff := cmp.Diff(want, readFile(t, path)); diff != "" {
		t.Errorf("config.toml (-want +got):\n%s", diff)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode())
	}
	c, err := parseTOML(path, []byte(readFile(t, path)))
	if err != nil || c.MCPServers["engram"].Args[2] != `co"dex` || c.MCPServers["docs"].Command != "npx" {
		t.Errorf("parsed: %+v %v", c, err)
	}
	for _, n := range rep.Notes {
		if strings.Contains(n, "trusted project") {
			t.Errorf("user scope with a project note: %q", n)
		}
	}
	if len(rep.Notes) == 0 || !strings.Contains(rep.Notes[0], "Hooks need review") {
		t.Errorf("notes: %q", rep.Notes)
	}
	if rep, err := Install(o); err != nil || rep.Changed() {
		t.Errorf("second install: %v %v", rep.Changed(), err)
	}
	// The user adds a table after engram's block; uninstall takes out
	// the block alone.
	after := "\n[projects.\"/x\"]\ntrust_level = \"trusted\"\n"
	writeFile(t, path, readFile(t, path)+after, 0o600)
	if rep, err := Install(o); err != nil || rep.Changed() {
		t.Errorf("install after the user's edit: %v %v", rep.Changed(), err)
	}
	if _, err := Uninstall(o); err != nil {
		t.Fatal(err)
	}
	// Only the final newline the block needed stays.
	if got := readFile(t, path); got != userCodexConfig+"\n"+after {
		t.Errorf("after uninstall:\n%q", got)
	}
}

func TestHarness_InstallCodexForeignAndEdited(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		want         State
	}{
		{"OwnEngram", "[mcp_servers.engram]\ncommand = \"engram\"\n", Foreign},
		{"EditedBlock", tomlBegin + "\n[mcp_servers.engram]\ncommand = \"/opt/engram/bin/engram\"\nargs = [\"mcp\"]\nenv = { A = \"1\" }\n" + tomlEnd + "\n", Edited},
		{"NoEndMarker", tomlBegin + "\n", Edited},
		{"InlineTable", "mcp_servers = { docs = { command = \"x\" } }\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t)
			o := e.opts(Codex, UserScope)
			path := filepath.Join(e.home, ".codex", "config.toml")
			writeFile(t, path, tc.config, 0o644)
			for _, f := range []func(Options) (Report, error){Install, Uninstall} {
				rep, err := f(o)
				if tc.want == "" {
					if err == nil || !strings.Contains(err.Error(), "add it by hand") {
						t.Fatalf("error %v", err)
					}
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if got := rep.Files[1].Items[0].State; got != tc.want {
					t.Errorf("state %s, want %s", got, tc.want)
				}
				if got := readFile(t, path); got != tc.config {
					t.Errorf("config changed:\n%s", got)
				}
			}
		})
	}
}

func TestHarness_InstallCodexProjectNotes(t *testing.T) {
	e := newTestEnv(t)
	writeFile(t, filepath.Join(e.home, ".codex", "config.toml"), "[features]\nhooks = false\n", 0o600)
	rep, err := Install(e.opts(Codex, ProjectScope))
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(rep.Notes, "\n")
	for _, want := range []string{"Hooks need review", "[features] hooks = false", "only in a trusted project"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	if s := readFile(t, filepath.Join(e.project, ".codex", "hooks.json")); !strings.Contains(s, `hook codex PreCompact --project '`+e.project+`'`) {
		t.Errorf("hooks.json:\n%s", s)
	}
	if strings.Contains(readFile(t, filepath.Join(e.project, ".codex", "hooks.json")), "matcher") {
		t.Error("Codex hooks with a matcher")
	}
}

func TestHarness_InstallDryRun(t *testing.T) {
	e := newTestEnv(t)
	path := filepath.Join(e.project, ".claude", "settings.json")
	writeFile(t, path, userSettings, 0o644)
	o := e.opts(ClaudeCode, ProjectScope)
	o.DryRun = true
	rep, err := Install(o)
	if err != nil || !rep.Changed() || !rep.Files[1].Created {
		t.Fatalf("dry run: %+v %v", rep, err)
	}
	if readFile(t, path) != userSettings || len(backups(t, filepath.Dir(path))) != 0 {
		t.Error("dry run wrote")
	}
	if _, err := os.Stat(filepath.Join(e.project, ".mcp.json")); err == nil {
		t.Error("dry run created .mcp.json")
	}
}

func TestHarness_InstallThroughSymlink(t *testing.T) {
	e := newTestEnv(t)
	real := filepath.Join(e.home, "dotfiles", "settings.json")
	writeFile(t, real, "{}\n", 0o644)
	link := filepath.Join(e.home, ".claude", "settings.json")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(e.opts(ClaudeCode, UserScope)); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("symlink replaced: %v %v", fi.Mode(), err)
	}
	if !strings.Contains(readFile(t, real), "hook claude-code") {
		t.Error("target not written")
	}
}

func TestHarness_Status(t *testing.T) {
	e := newTestEnv(t)
	o := e.opts(ClaudeCode, ProjectScope)
	rep, err := Status(o)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]string{"settings.json": all(Absent), ".mcp.json": {"mcp:engram=absent"}}, states(rep)); diff != "" {
		t.Errorf("status before (-want +got):\n%s", diff)
	}
	if _, err := Install(o); err != nil {
		t.Fatal(err)
	}
	o.Command = "/elsewhere/engram"
	rep, err = Status(o)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]string{"settings.json": all(Present), ".mcp.json": {"mcp:engram=installed"}}, states(rep)); diff != "" {
		t.Errorf("status after (-want +got):\n%s", diff)
	}
	if rep.Files[0].Items[0].Note != "runs "+bin {
		t.Errorf("note %q", rep.Files[0].Items[0].Note)
	}
}

func TestHarness_OptionsValidate(t *testing.T) {
	for _, o := range []Options{
		{Harness: "cursor", Scope: ProjectScope, Project: "/p", Command: "engram"},
		{Harness: ClaudeCode, Scope: "team", Project: "/p", Command: "engram"},
		{Harness: ClaudeCode, Scope: ProjectScope, Project: "rel", Command: "engram"},
		{Harness: ClaudeCode, Scope: UserScope, Command: "engram"},
		{Harness: ClaudeCode, Scope: ProjectScope, Project: "/p"},
	} {
		if _, err := Install(o); err == nil {
			t.Errorf("Install(%+v): no error", o)
		}
	}
}

// MCPConfig is the entry Install writes, for every harness and scope: a
// fresh install from the snippet alone leaves the file as Install would,
// and Status knows the snippet's entry as installed.
func TestHarness_MCPConfig(t *testing.T) {
	for _, h := range Harnesses {
		for _, s := range Scopes {
			t.Run(string(h)+"/"+string(s), func(t *testing.T) {
				e := newTestEnv(t)
				o := e.opts(h, s)
				o.MCPArgs = []string{"--harness", string(h)}
				got, err := o.MCPConfig()
				if err != nil {
					t.Fatal(err)
				}
				files, err := o.files()
				if err != nil {
					t.Fatal(err)
				}
				mcpFile := files[1].path
				if _, err := Install(o); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(readFile(t, mcpFile), got); diff != "" {
					t.Errorf("MCPConfig() is not what Install wrote to %s (-installed +snippet):\n%s", mcpFile, diff)
				}
				// The snippet put in place by hand is engram's entry.
				writeFile(t, mcpFile, got, 0o600)
				rep, err := Status(o)
				if err != nil {
					t.Fatal(err)
				}
				if it := rep.Files[1].Items[0]; it.Name != MCPItem || it.State != Present {
					t.Errorf("Status of the snippet: %+v, want %s %s", it, MCPItem, Present)
				}
			})
		}
	}
	// It needs no home; it does need a harness, a command and, for a
	// project, an absolute directory.
	if _, err := (Options{Harness: Codex, Scope: UserScope, Command: bin}).MCPConfig(); err != nil {
		t.Errorf("MCPConfig without a home: %v", err)
	}
	for _, o := range []Options{
		{Harness: "cursor", Scope: ProjectScope, Project: "/p", Command: bin},
		{Harness: ClaudeCode, Scope: ProjectScope, Project: "rel", Command: bin},
		{Harness: Codex, Scope: UserScope},
	} {
		if _, err := o.MCPConfig(); err == nil {
			t.Errorf("MCPConfig(%+v): no error", o)
		}
	}
}

func TestHarness_ShellRoundTrip(t *testing.T) {
	args := []string{"/a b/engram", "hook", "it's", `"q"`, "$HOME", "", "plain-1.2_x"}
	got, ok := shellSplit(shellJoin(args))
	if !ok {
		t.Fatal("split failed")
	}
	if diff := cmp.Diff(args, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	got, _ = shellSplit(`a\ b "c \"d\"" 'e'f`)
	if diff := cmp.Diff([]string{"a b", `c "d"`, "ef"}, got); diff != "" {
		t.Errorf("split (-want +got):\n%s", diff)
	}
}

func FuzzJSON_RoundTrip(f *testing.F) {
	f.Add([]byte(userSettings))
	f.Add([]byte(`{"a":[1,2e3,-0.5,{"b":null,"b":true}],"c":"\u00e9<>&"}`))
	f.Add([]byte("{\n\t\"x\": {}\n}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		o, err := parseJSON("f.json", data)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) || se.Line < 1 || se.Col < 1 {
				t.Fatalf("error %v", err)
			}
			return
		}
		if !json.Valid(data) && len(strings.TrimSpace(string(data))) > 0 {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		out := encodeJSON(o, styleOf(data))
		o2, err := parseJSON("f.json", out)
		if err != nil {
			t.Fatalf("re-parse of %q: %v", out, err)
		}
		if !equalJSON(o, o2) {
			t.Fatalf("round trip of %q changed it: %q", data, out)
		}
	})
}
