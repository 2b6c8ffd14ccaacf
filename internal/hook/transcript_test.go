package hook_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/hook"
	"github.com/engramhq/engram/internal/store"
)

// line is a Claude Code transcript line.
func line(t *testing.T, typ, uuid string, content any, extra map[string]any) string {
	t.Helper()
	m := map[string]any{"type": typ, "uuid": uuid, "sessionId": "s-1", "timestamp": "2026-11-26T10:00:00.000Z",
		"isSidechain": false, "cwd": "/work/p", "version": "2.1.121"}
	if content != nil {
		role := typ
		m["message"] = map[string]any{"role": role, "content": content}
	}
	for k, v := range extra {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

func TestImport_Transcript(t *testing.T) {
	r := newRunner(t)
	ctx := t.Context()
	prompt := "list the files"
	// The hooks saw the prompt and the tool call first.
	if _, err := r.Run(ctx, payload(t, hook.UserPromptSubmit, map[string]any{"prompt": prompt})); err != nil {
		t.Fatal(err)
	}
	input := map[string]any{"command": "ls", "description": "list files"}
	if _, err := r.Run(ctx, payload(t, hook.PostToolUse, map[string]any{"tool_name": "Bash", "tool_use_id": "toolu_1",
		"tool_input": input, "tool_response": map[string]any{"stdout": "a.go\nb.go", "stderr": "", "interrupted": false}})); err != nil {
		t.Fatal(err)
	}
	briefing := hook.Mark("session", "Recent failures: none", 9500)
	transcript := line(t, "user", "u0", briefing, map[string]any{"isMeta": true}) +
		line(t, "user", "u1", prompt, nil) +
		line(t, "assistant", "a1", []any{map[string]any{"type": "text", "text": "I'll list them."}}, nil) +
		line(t, "assistant", "a2", []any{map[string]any{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": input}}, nil) +
		line(t, "user", "u2", []any{map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.go\nb.go"}}, nil) +
		"{\"type\": \"user\", \"uuid\": \"broken\n" +
		line(t, "file-history-snapshot", "", nil, map[string]any{"messageId": "m1", "snapshot": map[string]any{}}) +
		line(t, "a-type-from-a-newer-version", "x1", nil, map[string]any{"payload": 42}) +
		line(t, "assistant", "a3", []any{map[string]any{"type": "text", "text": "Two files: a.go and b.go."}}, nil) +
		line(t, "user", "u3", prompt, nil) // the same prompt again: a second prompt
	path := filepath.Join(t.TempDir(), "s-1.jsonl")
	if err := os.WriteFile(path, []byte(transcript), 0o600); err != nil {
		t.Fatal(err)
	}
	im := hook.Importer{Eng: r.Eng, Harness: hook.ClaudeCode}
	rep, err := im.Import(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	// Records: 2 prompts, 2 answers, the call, the result, the corrupt
	// line, the snapshot, the new type. New: all but the prompt and the
	// tool call and result the hooks stored.
	if rep.Records != 9 || rep.Stored != 6 || rep.Raw != 3 || rep.Corrupt != 1 || rep.Injected != 1 || rep.Lines != 10 {
		t.Errorf("import = %+v, want 9 records, 6 new, 3 raw (1 corrupt), 1 injection skipped, 10 lines", rep)
	}
	ents, err := r.Eng.Store().TurnRange(ctx, "s-1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var prompts, notes int
	for _, e := range ents {
		if strings.Contains(string(e.Content), "Recent failures") {
			t.Errorf("engram's own briefing was stored as %s", e.Type)
		}
		switch e.Type {
		case store.UserPrompt:
			prompts++
		case store.Note:
			notes++
		}
	}
	if prompts != 2 || notes != 3 {
		t.Errorf("stored %d prompts and %d raw notes, want 2 and 3", prompts, notes)
	}
	if _, err := r.Eng.Store().MsgEntry(ctx, "s-1", hook.PromptMsgID(prompt, 1)); err != nil {
		t.Errorf("the second prompt of the same text: %v", err)
	}

	// Again: nothing read, nothing stored.
	rep, err = im.Import(ctx, path)
	if err != nil || rep.Bytes != 0 || rep.Stored != 0 {
		t.Errorf("a second import = %+v, %v; want nothing read", rep, err)
	}
	// A line being written waits for its newline.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	next := line(t, "assistant", "a4", []any{map[string]any{"type": "text", "text": "Done."}}, nil)
	if _, err := f.WriteString(next[:20]); err != nil {
		t.Fatal(err)
	}
	rep, err = im.Import(ctx, path)
	if err != nil || rep.Bytes != 0 || rep.Lines != 0 {
		t.Errorf("import of a partial line = %+v, %v; want it left for later", rep, err)
	}
	if _, err := f.WriteString(next[20:]); err != nil {
		t.Fatal(err)
	}
	f.Close()
	rep, err = im.Import(ctx, path)
	if err != nil || rep.Lines != 1 || rep.Stored != 1 || rep.Bytes != int64(len(next)) {
		t.Errorf("import of the finished line = %+v, %v; want 1 line, 1 record", rep, err)
	}
	// The file replaced by another: read again from its start.
	if err := os.WriteFile(path, []byte(line(t, "user", "v1", "a new session in the same file", nil)), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err = im.Import(ctx, path)
	if err != nil || rep.Lines != 1 || rep.Stored != 1 {
		t.Errorf("import of a replaced file = %+v, %v", rep, err)
	}
}

func TestImport_CodexRollout(t *testing.T) {
	r := newRunner(t)
	ctx := t.Context()
	r.Harness = hook.Codex
	sid := "019a2d7a-41c4-78b1-b7cc-a45d62a89cd5"
	// The hook stored the prompt first.
	p := payload(t, hook.UserPromptSubmit, map[string]any{"prompt": "what is in main.go?"})
	p.SessionID = sid
	if _, err := r.Run(ctx, p); err != nil {
		t.Fatal(err)
	}
	lines := []string{
		`{"timestamp":"2026-11-26T10:00:00.000Z","type":"session_meta","payload":{"id":"` + sid + `","cwd":"/work/p","cli_version":"0.171.0"}}`,
		`{"timestamp":"2026-11-26T10:00:00.100Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>\n  <cwd>/work/p</cwd>\n</environment_context>"}]}}`,
		`{"timestamp":"2026-11-26T10:00:00.200Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"what is in main.go?"}]}}`,
		`{"timestamp":"2026-11-26T10:00:00.200Z","type":"event_msg","payload":{"type":"user_message","message":"what is in main.go?","kind":"plain"}}`,
		`{"timestamp":"2026-11-26T10:00:00.300Z","type":"turn_context","payload":{"cwd":"/work/p","model":"gpt-5-codex"}}`,
		`{"timestamp":"2026-11-26T10:00:01.000Z","type":"response_item","payload":{"type":"reasoning","summary":[{"type":"summary_text","text":"Reading the file"}],"encrypted_content":"gAAAA"}}`,
		`{"timestamp":"2026-11-26T10:00:01.100Z","type":"response_item","payload":{"type":"function_call","name":"shell","arguments":"{\"command\":[\"cat\",\"main.go\"]}","call_id":"call_1"}}`,
		`{"timestamp":"2026-11-26T10:00:01.200Z","type":"response_item","payload":{"type":"function_call_output","call_id":"call_1","output":"{\"output\":\"package main\\n\",\"metadata\":{\"exit_code\":0}}"}}`,
		`{"timestamp":"2026-11-26T10:00:02.000Z","type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"It declares package main."}]}}`,
		`not json at all`,
	}
	path := filepath.Join(t.TempDir(), "rollout-2026-11-26T10-00-00-"+sid+".jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	im := hook.Importer{Eng: r.Eng, Harness: hook.Codex}
	rep, err := im.Import(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	// session_meta, turn_context and the corrupt line raw; the
	// environment a harness note; the prompt (stored before), the
	// reasoning, the call, its output and the answer.
	if rep.Records != 9 || rep.Stored != 8 || rep.Raw != 3 || rep.Corrupt != 1 || len(rep.Sessions) != 1 || rep.Sessions[0] != sid {
		t.Errorf("import = %+v", rep)
	}
	call, err := r.Eng.Store().MsgEntry(ctx, sid, "call_1")
	if err != nil {
		t.Fatal(err)
	}
	ent, err := r.Eng.Entry(ctx, call)
	if err != nil || string(ent.Content) != `{"tool":"shell","input":{"command":["cat","main.go"]}}` {
		t.Errorf("the call is stored as %s (%v)", ent.Content, err)
	}
	if rep, err := im.Import(ctx, path); err != nil || rep.Stored != 0 {
		t.Errorf("a second import = %+v, %v", rep, err)
	}
}

// A sub-agent's stop imports its own transcript (Claude Code keeps it
// beside the session's), as the sub-agent's.
func TestRunner_SubagentStopImportsItsTranscript(t *testing.T) {
	r := newRunner(t)
	ctx := t.Context()
	sample, err := os.ReadFile("testdata/claude-code-2.1.121/transcripts/subagent-sidechain.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "agent-a635e2df1ea56c2de.jsonl")
	if err := os.WriteFile(path, sample, 0o600); err != nil {
		t.Fatal(err)
	}
	const session = "aef0bb67-83a0-401f-b51b-ca71e27e956a"
	p := payload(t, "SubagentStop", map[string]any{"agent_id": "a635e2df1ea56c2de", "agent_type": "general-purpose",
		"agent_transcript_path": path, "last_assistant_message": "done"})
	p.SessionID = session
	res, err := r.Run(ctx, p)
	if err != nil || res.Stored == 0 {
		t.Fatalf("SubagentStop: %+v, %v", res, err)
	}
	// Named by its line (no hook saw a sub-agent's task), found by its text.
	occ, err := r.Eng.Store().Occurrences(ctx, store.ID([]byte("Run echo sub-agent-ran and report.")))
	if err != nil || len(occ) != 1 || occ[0].AgentID != hook.AgentOf(hook.ClaudeCode, session, "a635e2df1ea56c2de") {
		t.Errorf("the sub-agent's prompt: %+v, %v", occ, err)
	}
}

// The hooks' records and the transcript's, from the real Claude Code
// 2.1.121: a file read and a command's output the hook stored are the
// transcript's records too (one record each, not two), and the
// transcript's every line is kept.
func TestImport_ClaudeCodeSamples(t *testing.T) {
	r := newRunner(t)
	ctx := t.Context()
	const dir = "testdata/claude-code-2.1.121/"
	for _, name := range []string{"post-tool-use-read.json", "post-tool-use-bash.json"} {
		data, err := os.ReadFile(dir + "hooks/" + name)
		if err != nil {
			t.Fatal(err)
		}
		p, err := hook.ParsePayload(data, hook.PostToolUse)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := r.Run(ctx, p); err != nil || res.Stored != 2 {
			t.Fatalf("%s: %+v, %v", name, res, err)
		}
	}
	data, err := os.ReadFile(dir + "transcripts/session-tools-compact.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "6f6fe473-07c4-42c5-8087-ddd2ffb878a6.jsonl")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	im := hook.Importer{Eng: r.Eng, Harness: hook.ClaudeCode}
	rep, err := im.Import(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Lines != strings.Count(string(data), "\n") || rep.Corrupt != 0 {
		t.Errorf("import = %+v; want every line read, none corrupt", rep)
	}
	const session = "6f6fe473-07c4-42c5-8087-ddd2ffb878a6"
	for _, id := range []string{"toolu_mdl000000000000002", "toolu_mdl000000000000005"} {
		if _, err := r.Eng.Store().MsgEntry(ctx, session, id+"/result~transcript"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the transcript's result of %s differs from the hook's (a second record: %v)", id, err)
		}
	}
	// The large output the model saw as a preview is kept as it saw it.
	if _, err := r.Eng.Store().MsgEntry(ctx, session, "toolu_mdl000000000000008/result"); err != nil {
		t.Errorf("the large output's preview: %v", err)
	}
}

// TestRunner_ToolResultAfterImport runs a PostToolUse hook for a call an
// import stored first: the transcript holds a preview of the large
// output, the hook the whole of it. Both are kept, and the hook's output
// is replaced by a marker to the whole.
func TestRunner_ToolResultAfterImport(t *testing.T) {
	r := newRunner(t)
	r.Opts.MaxToolTokens = 100
	ctx := t.Context()
	data, err := os.ReadFile("testdata/claude-code-2.1.121/transcripts/session-tools-compact.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	const session = "6f6fe473-07c4-42c5-8087-ddd2ffb878a6"
	path := filepath.Join(t.TempDir(), session+".jsonl")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	im := hook.Importer{Eng: r.Eng, Harness: hook.ClaudeCode}
	if _, err := im.Import(ctx, path); err != nil {
		t.Fatal(err)
	}
	preview, err := r.Eng.Store().MsgEntry(ctx, session, "toolu_mdl000000000000008/result")
	if err != nil {
		t.Fatal(err)
	}

	var whole strings.Builder
	for i := 1; i <= 8000; i++ {
		fmt.Fprintf(&whole, "%d\n", i)
	}
	p := payload(t, hook.PostToolUse, map[string]any{"session_id": session, "tool_name": "Bash",
		"tool_use_id":   "toolu_mdl000000000000008",
		"tool_input":    map[string]any{"command": "seq 1 8000", "description": "Big output"},
		"tool_response": map[string]any{"stdout": whole.String(), "stderr": "", "interrupted": false, "isImage": false}})
	res, err := r.Run(ctx, p)
	if err != nil {
		t.Fatalf("the hook after the import: %v", err)
	}
	if res.Stored != 1 || len(res.Refs) != 1 || len(res.ToolOutput) == 0 {
		t.Fatalf("the hook stored %d, made refs %v, output %d bytes; want its result stored and replaced by a marker",
			res.Stored, res.Refs, len(res.ToolOutput))
	}
	if got, err := r.Eng.Store().MsgEntry(ctx, session, "toolu_mdl000000000000008/result"); err != nil || got != preview {
		t.Errorf("the transcript's preview is now %s (%v), was %s", got, err, preview)
	}
	hooked, err := r.Eng.Store().MsgEntry(ctx, session, "toolu_mdl000000000000008/result~hook")
	if err != nil {
		t.Fatalf("the hook's whole output: %v", err)
	}
	ref, err := r.Eng.Store().Reference(ctx, res.Refs[0])
	if err != nil || len(ref.ContentIDs) != 1 || ref.ContentIDs[0] != hooked {
		t.Fatalf("the marker's reference %+v (%v) does not hold the hook's output %s", ref, err, hooked)
	}
	ent, err := r.Eng.Entry(ctx, hooked)
	if err != nil || !strings.Contains(string(ent.Content), "\n7999\n8000") {
		t.Errorf("the hook's output is not whole (%v)", err)
	}
	// The same hook again (a retry) stores nothing more.
	if res, err := r.Run(ctx, p); err != nil || res.Stored != 0 {
		t.Errorf("the hook again: stored %d, %v", res.Stored, err)
	}
}

// TestImport_CodexRollout_Real reads a rollout Codex 0.171.0 wrote
// (testdata/codex-0.171.0): a session with two commands, an MCP tool
// call, four auto-compactions and a resume, with a hook's marked context
// on SessionStart, UserPromptSubmit and PostToolUse.
func TestImport_CodexRollout_Real(t *testing.T) {
	r := newRunner(t)
	ctx := t.Context()
	r.Harness = hook.Codex
	paths, err := filepath.Glob(filepath.Join("testdata", "codex-0.171.0", "rollouts", "rollout-*.jsonl"))
	if err != nil || len(paths) != 1 {
		t.Fatalf("the sample rollout: %v, %v", paths, err)
	}
	const sid = "01a217e5-a3ec-7613-957d-3f824116f400"
	// The hooks stored the first prompt and the MCP call first, as they
	// saw them.
	p := payload(t, hook.UserPromptSubmit, map[string]any{"prompt": "run things"})
	p.SessionID = sid
	if _, err := r.Run(ctx, p); err != nil {
		t.Fatal(err)
	}
	hookPayload, err := os.ReadFile(filepath.Join("testdata", "codex-0.171.0", "hooks", "post-tool-use-mcp.json"))
	if err != nil {
		t.Fatal(err)
	}
	p, err = hook.ParsePayload(hookPayload, hook.PostToolUse)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Run(ctx, p); err != nil {
		t.Fatal(err)
	}

	im := hook.Importer{Eng: r.Eng, Harness: hook.Codex}
	rep, err := im.Import(ctx, paths[0])
	if err != nil {
		t.Fatal(err)
	}
	// 2 prompts, the environment and the skills (harness notes), 7
	// answers, 3 calls and 3 outputs, 4 compaction summaries, and 34 lines
	// kept raw (session_meta, turn_context, world_state,
	// token_usage_record, and the UI's events that are not echoes); 11 of
	// engram's contexts skipped; the echoes of items dropped.
	if rep.Records != 55 || rep.Raw != 34 || rep.Corrupt != 0 || rep.Injected != 11 || len(rep.Sessions) != 1 || rep.Sessions[0] != sid {
		t.Errorf("import = %+v; want 55 records, 34 raw, 11 injections skipped, session %s", rep, sid)
	}

	// Every prompt, call and output of the rollout is in the store, byte
	// for byte; engram's contexts are not.
	data, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	has := func(what string, content []byte) {
		t.Helper()
		if _, err := r.Eng.Store().Entries(ctx, []string{store.ID(content)}); err != nil {
			t.Errorf("%s is not in the store (%v): %.200q", what, err, content)
		}
	}
	var calls, outputs int
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var line struct {
			Type    string `json:"type"`
			Payload struct {
				Type      string `json:"type"`
				Role      string `json:"role"`
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
				Arguments string `json:"arguments"`
				Output    string `json:"output"`
				Content   []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"payload"`
		}
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatal(err)
		}
		if line.Type != "response_item" {
			continue
		}
		switch pl := line.Payload; pl.Type {
		case "function_call":
			name := pl.Name
			if pl.Namespace != "" {
				name = pl.Namespace + "__" + name
			}
			has("call "+name, hook.ToolCallContent(name, json.RawMessage(pl.Arguments)))
			calls++
		case "function_call_output":
			has("output", []byte(pl.Output))
			outputs++
		}
	}
	if calls != 3 || outputs != 3 {
		t.Errorf("checked %d calls and %d outputs, want 3 and 3", calls, outputs)
	}
	for _, prompt := range []string{"run things", "go on"} {
		has("prompt", []byte(prompt))
	}
	if _, err := r.Eng.Store().MsgEntry(ctx, sid, hook.PromptMsgID("go on", 0)); err != nil {
		t.Errorf("the resumed session's prompt is not named as the hook names it: %v", err)
	}
	ents, err := r.Eng.Store().TurnRange(ctx, sid, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.Contains(string(e.Content), "CTX-FROM-") && !strings.Contains(string(e.Content), `"type":"compacted"`) {
			t.Errorf("engram's own context was stored as %s: %.200q", e.Type, e.Content)
		}
	}
	// The MCP call the hook stored is the rollout's, under one name.
	id, err := r.Eng.Store().MsgEntry(ctx, sid, "call_mdl000000000000016")
	if err != nil {
		t.Fatal(err)
	}
	if ent, err := r.Eng.Entry(ctx, id); err != nil || !strings.HasPrefix(string(ent.Content), `{"tool":"mcp__engram__record",`) {
		t.Errorf("the MCP call is stored as %s (%v)", ent.Content, err)
	}
	if rep, err := im.Import(ctx, paths[0]); err != nil || rep.Stored != 0 || rep.Bytes != 0 {
		t.Errorf("a second import = %+v, %v", rep, err)
	}
}
