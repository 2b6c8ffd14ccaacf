package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/harness"
)

func TestHooks_InstallStatusUninstall(t *testing.T) {
	e := newEnv(t)
	home := e.vars["HOME"]
	settings := filepath.Join(e.project, ".claude", "settings.json")
	mine := "{\n  \"hooks\": {\n    \"Stop\": [\n      {\n        \"hooks\": [\n          {\n            \"type\": \"command\",\n            \"command\": \"say done\"\n          }\n        ]\n      }\n    ]\n  }\n}\n"
	if err := os.MkdirAll(filepath.Dir(settings), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(settings, []byte(mine), 0o644); err != nil {
		t.Fatal(err)
	}

	out := e.ok("", "hooks", "install", "claude-code", "--dry-run")
	if !strings.Contains(out, settings+": would be updated") || !strings.Contains(out, ".mcp.json: would be created") {
		t.Errorf("dry run:\n%s", out)
	}
	if b, _ := os.ReadFile(settings); string(b) != mine {
		t.Fatal("dry run wrote")
	}

	out = e.ok("", "hooks", "install", "claude")
	if !strings.Contains(out, "backup "+settings+".engram-backup-") || !strings.Contains(out, "PostToolUse       added") {
		t.Errorf("install:\n%s", out)
	}
	b, _ := os.ReadFile(settings)
	if !strings.Contains(string(b), `"say done"`) || !strings.Contains(string(b), "engram hook claude-code PostToolUse --project "+e.project) {
		t.Errorf("settings.json:\n%s", b)
	}
	if out := e.ok("", "hooks", "install", "claude-code"); strings.Contains(out, "added") || strings.Contains(out, "backup") {
		t.Errorf("second install:\n%s", out)
	}

	// Codex at user scope, in the temporary home.
	e.ok("", "hooks", "install", "codex", "--user")
	if _, err := os.Stat(filepath.Join(home, ".codex", "hooks.json")); err != nil {
		t.Error(err)
	}

	var st hooksStatus
	code, out, errOut := e.run("", "hooks", "status", "--json")
	if code != 0 || jsonUnmarshal(out, &st) != nil {
		t.Fatalf("status: %d %s %s", code, out, errOut)
	}
	installed := map[string]int{}
	for _, f := range st.Files {
		for _, it := range f.Items {
			if it.State == harness.Present {
				installed[string(f.Harness)+"/"+string(f.Scope)]++
			}
		}
	}
	if installed["claude-code/project"] != 6 || installed["codex/user"] != 6 || len(installed) != 2 {
		t.Errorf("installed: %v", installed)
	}
	if len(st.Runs) != 0 || !strings.HasSuffix(st.RunsFile, harness.RunsFile) {
		t.Errorf("runs before any: %+v in %s", st.Runs, st.RunsFile)
	}

	// What the hook runner records, status shows.
	dir := filepath.Dir(st.RunsFile)
	if err := harness.RecordRun(dir, "claude-code", "SessionStart", 12*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	if err := harness.RecordRun(dir, "claude-code", "SessionStart", 3*time.Millisecond, errors.New("store is busy\nretry")); err != nil {
		t.Fatal(err)
	}
	out = e.ok("", "hooks", "status")
	for _, want := range []string{
		"claude-code  project  " + settings + "  SessionStart",
		"codex        user",
		"not installed",
		"claude-code  SessionStart  2     1",
		"store is busy retry",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}

	// Installing Claude Code's hooks at the other scope too is flagged.
	if out := e.ok("", "hooks", "install", "claude-code", "--user"); !strings.Contains(out, "also installed at project scope") {
		t.Errorf("install at both scopes:\n%s", out)
	}

	// Uninstall without a harness: both, at project scope; the user's
	// hook stays, byte for byte.
	out = e.ok("", "hooks", "uninstall")
	if !strings.Contains(out, "Stop              removed") || !strings.Contains(out, "deleted") {
		t.Errorf("uninstall:\n%s", out)
	}
	if b, _ := os.ReadFile(settings); string(b) != mine {
		t.Errorf("settings.json after uninstall:\n%s", b)
	}
	if _, err := os.Stat(filepath.Join(e.project, ".mcp.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf(".mcp.json after uninstall: %v", err)
	}
	e.ok("", "hooks", "uninstall", "codex", "--user")
	e.ok("", "hooks", "uninstall", "claude-code", "--user")
	for _, p := range []string{filepath.Join(home, ".codex", "hooks.json"), filepath.Join(home, ".claude.json")} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after uninstall: %v", p, err)
		}
	}
}

func TestHooks_Errors(t *testing.T) {
	e := newEnv(t)
	mcp := filepath.Join(e.project, ".mcp.json")
	if err := os.WriteFile(mcp, []byte("{\n  // engram\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := e.run("", "hooks", "install", "claude-code")
	if code != 1 || !strings.Contains(errOut, mcp+":2:3: has a comment") {
		t.Errorf("commented .mcp.json: exit %d\n%s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(e.project, ".claude")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("settings written beside a refused file: %v", err)
	}
	// Status names the file and goes on.
	if out := e.ok("", "hooks", "status"); !strings.Contains(out, "unreadable: "+mcp+":2:3") {
		t.Errorf("status:\n%s", out)
	}
	for _, args := range [][]string{
		{"hooks", "install", "cursor"},
		{"hooks", "install"},
		{"hooks", "uninstall", "claude-code", "codex"},
		{"hooks", "status", "x"},
	} {
		if code, _, errOut := e.run("", args...); code != 2 {
			t.Errorf("%v: exit %d\n%s", args, code, errOut)
		}
	}
}
