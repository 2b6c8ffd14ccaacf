package hook_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/hook"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/unpriv"
)

// TestImport_BadRecords: a record engram cannot store does not hold back
// the rest of the transcript. A tool's result whose call's line was
// corrupt (kept raw) is stored without its parent; a record over the
// content limit is left out; both are reported with their line; an image
// block is kept as the line holds it. Before, the whole batch failed, and
// every import after it, and the hooks' imports of the session too.
func TestImport_BadRecords(t *testing.T) {
	ctx := t.Context()
	opts := engine.Options{MaxContentBytes: 2000}
	eng, err := engine.New(sqlitetest.Open(t, sqlite.Options{}), opts)
	if err != nil {
		t.Fatal(err)
	}
	call := line(t, "assistant", "a1", []any{map[string]any{"type": "tool_use", "id": "toolu_9", "name": "Bash", "input": map[string]any{"command": "ls"}}}, nil)
	image := map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgoAAAANSUhEUg"}}
	transcript := line(t, "user", "u1", "list the files", nil) +
		call[:len(call)-10] + "\n" + // cut: kept raw
		line(t, "user", "u2", []any{map[string]any{"type": "tool_result", "tool_use_id": "toolu_9", "content": "a.go\nb.go"}}, nil) +
		line(t, "assistant", "a2", []any{map[string]any{"type": "text", "text": strings.Repeat("too long ", 300)}}, nil) +
		line(t, "user", "u3", []any{map[string]any{"type": "text", "text": "what is in this screenshot?"}, image}, nil) +
		line(t, "assistant", "a3", []any{map[string]any{"type": "text", "text": "The answer after them all."}}, nil)
	path := filepath.Join(t.TempDir(), "s-1.jsonl")
	if err := os.WriteFile(path, []byte(transcript), 0o600); err != nil {
		t.Fatal(err)
	}
	im := hook.Importer{Eng: eng, Harness: hook.ClaudeCode}
	rep, err := im.Import(ctx, path)
	if err != nil {
		t.Fatalf("Import: %v", err)
	}
	if rep.Skipped != 1 || rep.Corrupt != 1 || len(rep.Problems) != 2 {
		t.Fatalf("report %+v, want one record skipped, one line corrupt, two problems", rep)
	}
	if p := rep.Problems[0]; p.Line != 3 || !strings.Contains(p.Err, "without its parent") {
		t.Errorf("first problem %v, want line 3 stored without its parent", p)
	}
	if p := rep.Problems[1]; p.Line != 4 || !strings.Contains(p.Err, "ingest.max_content_bytes") {
		t.Errorf("second problem %v, want line 4 over the limit", p)
	}
	got, err := eng.Store().TurnRange(ctx, "s-1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, e := range got {
		texts = append(texts, string(e.Content))
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{"list the files", "a.go\nb.go", `"data":"iVBORw0KGgoAAAANSUhEUg"`, "The answer after them all."} {
		if !strings.Contains(all, want) {
			t.Errorf("%q is not stored; stored:\n%s", want, all)
		}
	}
	again, err := im.Import(ctx, path)
	if err != nil || again.Stored != 0 || again.Records != 0 {
		t.Errorf("importing again: %+v, %v", again, err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	// What a hook's import of the session does with the same file.
	res, err := (&hook.Runner{Eng: eng, Harness: hook.ClaudeCode}).Run(ctx, payload(t, hook.Stop, map[string]any{"transcript_path": path}))
	if err != nil {
		t.Fatalf("Stop hook: %v (%+v)", err, res)
	}
}

// TestImport_UnreadableFiles: a transcript that cannot be read (a broken
// symlink, a FIFO) is reported and the rest imported. Before, the first
// stopped the import and nothing after it was read; a FIFO hung it.
func TestImport_UnreadableFiles(t *testing.T) {
	ctx := t.Context()
	r := newRunner(t)
	dir := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a.jsonl", line(t, "user", "u1", "the first session's prompt", map[string]any{"sessionId": "sa"}))
	write("z.jsonl", line(t, "user", "u1", "the last session's prompt", map[string]any{"sessionId": "sz"}))
	// A session's sub-agent, kept beside it: imported after it.
	write("m/subagents/agent-x.jsonl", line(t, "user", "x1", "the sub-agent's task", map[string]any{"sessionId": "m", "isSidechain": true,
		"agentId": "x", "timestamp": "2026-11-26T10:01:00.000Z"}))
	write("m.jsonl", line(t, "user", "m1", "the main prompt", map[string]any{"sessionId": "m"}))
	if err := os.Symlink(filepath.Join(dir, "gone"), filepath.Join(dir, "b.jsonl")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "c.jsonl"), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var rep hook.ImportReport
	var err error
	go func() {
		defer close(done)
		rep, err = (&hook.Importer{Eng: r.Eng, Harness: hook.ClaudeCode}).Import(ctx, dir)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the import still runs after 30 s: the FIFO holds it")
	}
	if err != nil {
		t.Fatalf("Import: %v", err)
	}
	if rep.Failed != 2 || rep.Stored != 4 || len(rep.Problems) != 2 {
		t.Fatalf("report %+v, want 2 failed and 4 records stored", rep)
	}
	for i, name := range []string{"b.jsonl", "c.jsonl"} {
		if p := rep.Problems[i]; filepath.Base(p.Path) != name {
			t.Errorf("problem %d: %v, want %s", i, p, name)
		}
	}
	got, err := r.Eng.Store().TurnRange(ctx, "m", 0, 0)
	if err != nil || len(got) != 2 || got[0].Type != store.UserPrompt || string(got[0].Content) != "the main prompt" {
		t.Errorf("session m: %+v, %v; want its main prompt first", got, err)
	}
}

// TestImport_SmallFileReplaced: a transcript shorter than the bytes that
// identify a file, replaced by another, is read again from its start.
// Before, the new file was read from the old one's length, mid-line.
func TestImport_SmallFileReplaced(t *testing.T) {
	ctx := t.Context()
	r := newRunner(t)
	path := filepath.Join(t.TempDir(), "s-1.jsonl")
	im := hook.Importer{Eng: r.Eng, Harness: hook.ClaudeCode}
	if err := os.WriteFile(path, []byte(line(t, "user", "u1", "first", nil)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := im.Import(ctx, path); err != nil {
		t.Fatal(err)
	}
	replaced := line(t, "user", "v1", "a different first prompt, replaced", nil) + line(t, "user", "v2", "and a second", nil)
	if err := os.WriteFile(path, []byte(replaced), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := im.Import(ctx, path)
	if err != nil || rep.Corrupt != 0 || rep.Stored != 2 {
		t.Errorf("after the file was replaced: %+v, %v; want both prompts stored", rep, err)
	}
	// A file that only grew is read on from where it stopped.
	if err := os.WriteFile(path, []byte(replaced+line(t, "user", "v3", "a third", nil)), 0o600); err != nil {
		t.Fatal(err)
	}
	if rep, err := im.Import(ctx, path); err != nil || rep.Lines != 1 || rep.Stored != 1 {
		t.Errorf("after it grew: %+v, %v; want its one new line", rep, err)
	}
}

// TestImport_SameTaskTwoSubagents: two sub-agents given the same task, in
// transcripts of their own, are two prompts. Before, both were named the
// session's first prompt of that text (prompt ids count per file), and
// the second was taken for stored already.
func TestImport_SameTaskTwoSubagents(t *testing.T) {
	ctx := t.Context()
	r := newRunner(t)
	dir := t.TempDir()
	for i, agent := range []string{"aaa", "bbb"} {
		p := filepath.Join(dir, "m", "subagents", "agent-"+agent+".jsonl")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		l := line(t, "user", "x"+agent, "Find where the config is parsed.", map[string]any{"sessionId": "m", "isSidechain": true,
			"agentId": agent, "timestamp": "2026-11-26T10:0" + string(rune('1'+i)) + ":00.000Z"})
		if err := os.WriteFile(p, []byte(l), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := (&hook.Importer{Eng: r.Eng, Harness: hook.ClaudeCode}).Import(ctx, dir)
	if err != nil || rep.Stored != 2 {
		t.Fatalf("report %+v, %v; want both prompts stored", rep, err)
	}
	occ, err := r.Eng.Store().Occurrences(ctx, store.ID([]byte("Find where the config is parsed.")))
	if err != nil || len(occ) != 2 || occ[0].AgentID == occ[1].AgentID {
		t.Errorf("the task's occurrences: %+v, %v; want one per sub-agent", occ, err)
	}
}

// TestImport_Oddities: a byte order mark before the first line does not
// make it corrupt; a file of another harness's lines says so.
func TestImport_Oddities(t *testing.T) {
	ctx := t.Context()
	r := newRunner(t)
	dir := t.TempDir()
	bom := filepath.Join(dir, "bom.jsonl")
	if err := os.WriteFile(bom, []byte("\xef\xbb\xbf"+line(t, "user", "u1", "a prompt after a BOM", nil)), 0o600); err != nil {
		t.Fatal(err)
	}
	im := hook.Importer{Eng: r.Eng, Harness: hook.ClaudeCode}
	if rep, err := im.Import(ctx, bom); err != nil || rep.Corrupt != 0 || rep.Stored != 1 {
		t.Errorf("a file with a BOM: %+v, %v", rep, err)
	}
	codex := filepath.Join(dir, "rollout.jsonl")
	lines := `{"timestamp":"2026-11-26T10:00:00.000Z","type":"session_meta","payload":{"id":"x"}}
{"timestamp":"2026-11-26T10:00:01.000Z","type":"response_item","payload":{"type":"message","role":"user","content":[]}}
{"timestamp":"2026-11-26T10:00:02.000Z","type":"event_msg","payload":{"type":"user_message","message":"hi"}}
`
	if err := os.WriteFile(codex, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := im.Import(ctx, codex)
	if err != nil || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0].Err, "engram import codex") {
		t.Errorf("a Codex rollout imported as Claude Code's: %+v, %v", rep, err)
	}
}

// TestImport_StoreFailsOnARecord: a store that fails on one record (a
// full disk) stops the import there, to be read again by the next one;
// only a record engram refuses is left out. Before, the failure was taken
// for the record's, the record left out, and the file read on past it:
// the next import never saw it again.
func TestImport_StoreFailsOnARecord(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "engram.db")
	eng, err := engine.New(sqlitetest.OpenPath(t, path, sqlite.Options{}), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TRIGGER full_disk BEFORE INSERT ON entries
		WHEN instr(NEW.content, 'the unlucky one') > 0 BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END`); err != nil {
		t.Fatal(err)
	}
	transcript := filepath.Join(t.TempDir(), "s-1.jsonl")
	if err := os.WriteFile(transcript, []byte(line(t, "user", "u1", "a first prompt", nil)+
		line(t, "user", "u2", "the unlucky one", nil)+line(t, "user", "u3", "a last prompt", nil)), 0o600); err != nil {
		t.Fatal(err)
	}
	im := hook.Importer{Eng: eng, Harness: hook.ClaudeCode}
	if rep, err := im.Import(ctx, transcript); err == nil {
		t.Fatalf("the import went on past the store's failure: %+v", rep)
	}
	if _, err := db.ExecContext(ctx, `DROP TRIGGER full_disk`); err != nil {
		t.Fatal(err)
	}
	rep, err := im.Import(ctx, transcript)
	if err != nil || rep.Stored != 3 || rep.Skipped != 0 {
		t.Errorf("once the disk has room: %+v, %v; want all three stored", rep, err)
	}
}

// TestImport_UnreadableDirectory: a directory that cannot be read, named
// itself or met below, is reported and the rest imported. Before, a
// directory named that could not be read stopped the import.
func TestImport_UnreadableDirectory(t *testing.T) {
	if !unpriv.Rerun(t) {
		return
	}
	ctx := t.Context()
	r := newRunner(t)
	dir := t.TempDir()
	for _, d := range []string{"bad", "ok", "ok/inner"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "ok", "s.jsonl"), []byte(line(t, "user", "u1", "a prompt", nil)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"bad", "ok/inner"} {
		if err := os.Chmod(filepath.Join(dir, d), 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(filepath.Join(dir, d), 0o755) })
	}
	im := hook.Importer{Eng: r.Eng, Harness: hook.ClaudeCode}
	var rep hook.ImportReport
	for _, d := range []string{"bad", "ok"} {
		got, err := im.Import(ctx, filepath.Join(dir, d))
		if err != nil {
			t.Fatalf("Import %s: %v", d, err)
		}
		rep.Add(got)
	}
	if rep.Failed != 2 || rep.Stored != 1 || len(rep.Problems) != 2 {
		t.Errorf("report %+v, want the two directories failed and the prompt stored", rep)
	}
}
