package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImport_Problems: engram import lists what it could not read or
// store, with the file and line, imports the rest, and exits 1 when a
// file could not be read; a default directory that does not exist says
// nothing was imported, not to run the import again.
func TestImport_Problems(t *testing.T) {
	e := newEnv(t)
	dir := filepath.Join(e.vars["HOME"], ".claude", "projects", "-p")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	good := `{"type":"user","uuid":"u1","sessionId":"s1","timestamp":"2026-11-26T10:00:00Z","message":{"role":"user","content":"list the files"}}` + "\n" +
		`{"type":"user","uuid":"u2","sessionId":"s1","timestamp":"2026-11-26T10:00:01Z","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_gone","content":"a.go"}]}}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "s1.jsonl"), []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(dir, "broken.jsonl")); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := e.run("", "import", "claude-code")
	if code != 1 || !strings.Contains(out, "2 records (2 new)") {
		t.Errorf("exit %d, stdout %q", code, out)
	}
	for _, want := range []string{"broken.jsonl: no such file or directory", "s1.jsonl:2: stored without its parent",
		"1 files or directories could not be read (the rest was imported)"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr does not say %q:\n%s", want, errOut)
		}
	}
	code, _, errOut = e.run("", "import", "codex")
	if code != 1 || !strings.Contains(errOut, "sessions does not exist") || !strings.Contains(errOut, "nothing was imported") ||
		strings.Contains(errOut, "run the import again") {
		t.Errorf("import codex without ~/.codex: exit %d\n%s", code, errOut)
	}
}

// TestImport_NoTranscripts: engram import of a harness that has kept no
// transcripts here (its default directory does not exist) says where it
// looked and what moves it, and makes no store.
func TestImport_NoTranscripts(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ harness, dir, moves string }{
		{"codex", filepath.Join(e.vars["HOME"], ".codex", "sessions"), "$CODEX_HOME"},
		{"claude-code", filepath.Join(e.vars["HOME"], ".claude", "projects"), "$CLAUDE_CONFIG_DIR"},
	} {
		code, _, errOut := e.run("", "import", c.harness)
		if code != 1 || !strings.Contains(errOut, "nothing was imported: "+c.dir+" does not exist") || !strings.Contains(errOut, c.moves) {
			t.Errorf("import %s with no transcripts: exit %d, %q", c.harness, code, errOut)
		}
	}
	if _, err := os.Stat(filepath.Join(e.vars["ENGRAM_DATA_DIR"], "projects")); !os.IsNotExist(err) {
		t.Errorf("an import of nothing made a store: %v", err)
	}
}
