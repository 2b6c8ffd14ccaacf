package hook_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/hook"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
)

func newRunner(t *testing.T) *hook.Runner {
	t.Helper()
	st := sqlitetest.Open(t, sqlite.Options{})
	opts := engine.Options{}
	opts.Retrieve.Deadline = time.Minute
	eng, err := engine.New(st, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &hook.Runner{Eng: eng, Harness: hook.ClaudeCode}
}

func payload(t *testing.T, event string, fields map[string]any) hook.Payload {
	t.Helper()
	m := map[string]any{"session_id": "s-1", "hook_event_name": event, "cwd": "/work/p", "transcript_path": ""}
	for k, v := range fields {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	p, err := hook.ParsePayload(b, event)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParsePayload_BadInput(t *testing.T) {
	for _, tc := range []struct{ name, in, event, want string }{
		{"empty", "", hook.Stop, "empty"},
		{"blank", "  \n", hook.Stop, "empty"},
		{"truncated", `{"session_id": "s", "hook_event_na`, hook.Stop, "truncated"},
		{"not JSON", `session_id=s`, hook.Stop, "invalid JSON"},
		{"other event", `{"session_id": "s", "hook_event_name": "Stop"}`, hook.PreCompact, "is for Stop, not PreCompact"},
		{"no session", `{"hook_event_name": "Stop"}`, hook.Stop, "no session_id"},
		{"no prompt", `{"session_id": "s"}`, hook.UserPromptSubmit, "no prompt"},
		{"no tool", `{"session_id": "s", "tool_response": "x"}`, hook.PostToolUse, "no tool_name, tool_use_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := hook.ReadPayload(strings.NewReader(tc.in), tc.event)
			var pe *hook.PayloadError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ReadPayload(%q) = %v, want a PayloadError saying %q", tc.in, err, tc.want)
			}
		})
	}
	// A newer harness's fields are ignored, and the input is kept.
	in := `{"session_id": "s", "hook_event_name": "Stop", "brand_new_field": {"x": [1, 2]}, "stop_hook_active": true}`
	p, err := hook.ReadPayload(strings.NewReader(in), hook.Stop)
	if err != nil || !p.StopHookActive || string(p.Raw) != in {
		t.Errorf("ReadPayload(newer harness) = %+v, %v", p, err)
	}
}

func TestMark_FitsTheHarnessLimit(t *testing.T) {
	long := strings.Repeat("é line of briefing\n", 2000)
	got := hook.Mark("session", long, 9500)
	if len(got) > 9500 || !strings.HasPrefix(got, `<engram-context kind="session">`) || !strings.HasSuffix(got, "</engram-context>") {
		t.Errorf("Mark: %d bytes, starts %q, ends %q", len(got), got[:40], got[len(got)-20:])
	}
	if !json.Valid([]byte(fmt.Sprintf("%q", got))) || strings.ToValidUTF8(got, "?") != got {
		t.Error("Mark cut a character")
	}
	if hook.Mark("x", "  \n", 100) != "" {
		t.Error("Mark of nothing is not empty")
	}
}

// A session through the hooks: start, a prompt with a pre-fetch, a tool
// whose large output is replaced by a marker that expands exactly, a
// compaction whose turns come back as markers, and a stop that leaves a
// resume point the next session is told.
func TestRunner_Session(t *testing.T) {
	r := newRunner(t)
	ctx := t.Context()
	eng := r.Eng

	// Shared memory from an earlier session.
	arc, err := eng.Archive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, err := arc.Register(ctx, archive.AgentSpec{ID: "old", SessionID: "s-0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.RecordFailure(ctx, archive.Failure{Category: "testing.flaky", Approach: "raising the upload retry timeout",
		Reason: "the retry loop ignored the context deadline", Resolution: &archive.Resolution{Approach: "pass ctx to backoff.Wait", Outcome: "success"}}); err != nil {
		t.Fatal(err)
	}
	// Code the pre-fetch can find.
	code := "package upload\n\n// RetryUpload retries an upload with exponential backoff until the deadline.\nfunc RetryUpload(ctx context.Context) error {\n\treturn backoffWait(ctx)\n}\n"
	if _, err := eng.Add(ctx, []engine.Record{{Type: store.CodeFile, Content: []byte(code), Files: []string{"internal/upload/retry.go"}}}); err != nil {
		t.Fatal(err)
	}

	res, err := r.Run(ctx, payload(t, hook.SessionStart, map[string]any{"source": "startup", "model": "claude-sonnet-4-5"}))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Context, "retry loop ignored the context deadline") || !strings.HasPrefix(res.Context, "<engram-context") {
		t.Errorf("SessionStart context does not carry the failure, marked:\n%s", res.Context)
	}
	out := res.Output(hook.SessionStart)
	var decoded struct {
		HookSpecificOutput struct {
			HookEventName     string `json:"hookEventName"`
			AdditionalContext string `json:"additionalContext"`
		} `json:"hookSpecificOutput"`
	}
	if err := json.Unmarshal(out, &decoded); err != nil || decoded.HookSpecificOutput.HookEventName != hook.SessionStart ||
		decoded.HookSpecificOutput.AdditionalContext != res.Context {
		t.Errorf("Output = %s (%v)", out, err)
	}
	agents, err := arc.Agents(ctx, "s-1")
	if err != nil || len(agents) != 1 || agents[0].ID != "claude-code@s-1" {
		t.Errorf("agents of s-1 = %+v, %v", agents, err)
	}

	prompt := "why does RetryUpload give up before the deadline with exponential backoff?"
	res, err = r.Run(ctx, payload(t, hook.UserPromptSubmit, map[string]any{"prompt": prompt}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Stored != 1 {
		t.Errorf("UserPromptSubmit stored %d records, want 1", res.Stored)
	}
	if !strings.Contains(res.Context, "internal/upload/retry.go") {
		t.Errorf("UserPromptSubmit injected no pre-fetch of retry.go: %q (notes %v)", res.Context, res.Notes)
	}
	if strings.Contains(res.Context, "give up before the deadline") {
		t.Errorf("the pre-fetch repeats the prompt it was made for:\n%s", res.Context)
	}
	if id, err := eng.Store().MsgEntry(ctx, "s-1", hook.PromptMsgID(prompt, 0)); err != nil || id != store.ID([]byte(prompt)) {
		t.Errorf("the prompt is not stored as its first of its text: %q, %v", id, err)
	}

	// A command whose output Claude Code cut and persisted.
	dir := t.TempDir()
	var full strings.Builder
	for i := range 6000 {
		fmt.Fprintf(&full, "=== RUN   TestUpload/case_%04d\n--- PASS: TestUpload/case_%04d (0.00s)\n", i, i)
	}
	persisted := filepath.Join(dir, "out.txt")
	if err := os.WriteFile(persisted, []byte(full.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	resp := map[string]any{"stdout": full.String()[:30000], "stderr": "exit status 1", "interrupted": false, "isImage": false,
		"persistedOutputPath": persisted, "persistedOutputSize": full.Len()}
	res, err = r.Run(ctx, payload(t, hook.PostToolUse, map[string]any{"tool_name": "Bash", "tool_use_id": "toolu_01A",
		"tool_input": map[string]any{"command": "go test ./internal/upload -v", "description": "run the tests"}, "tool_response": resp}))
	if err != nil {
		t.Fatal(err)
	}
	whole := full.String() + "exit status 1"
	id, err := eng.Store().MsgEntry(ctx, "s-1", "toolu_01A/result")
	if err != nil {
		t.Fatal(err)
	}
	ent, err := eng.Entry(ctx, id)
	if err != nil || string(ent.Content) != whole {
		t.Fatalf("the stored result is %d bytes, want the persisted output and stderr, %d bytes (%v)", len(ent.Content), len(whole), err)
	}
	var replaced struct {
		Stdout      string `json:"stdout"`
		Stderr      string `json:"stderr"`
		Interrupted *bool  `json:"interrupted"`
	}
	if err := json.Unmarshal(res.ToolOutput, &replaced); err != nil || replaced.Interrupted == nil {
		t.Fatalf("updatedToolOutput is not in Bash's shape: %s (%v)", res.ToolOutput, err)
	}
	if n := eng.Encoding().Count(replaced.Stdout); n > 1300 {
		t.Errorf("the replaced output is %d tokens, want about the 1,000 kept and a marker", n)
	}
	if !strings.HasPrefix(replaced.Stdout, "=== RUN   TestUpload/case_0000\n") || !strings.HasSuffix(replaced.Stdout, "exit status 1") {
		t.Errorf("the replaced output does not keep the head and the tail:\n%.300s\n…\n%s", replaced.Stdout, replaced.Stdout[len(replaced.Stdout)-200:])
	}
	found := ctxref.Find(replaced.Stdout)
	if len(found) != 1 || len(res.Refs) != 1 || found[0].Marker.ID != res.Refs[0] {
		t.Fatalf("the replaced output holds markers %+v, refs %v", found, res.Refs)
	}
	ref, err := eng.Store().Reference(ctx, res.Refs[0])
	if err != nil || len(ref.ContentIDs) != 1 || ref.ContentIDs[0] != id {
		t.Errorf("the marker's reference = %+v, %v; want the stored result %s", ref, err, id)
	}

	// A small result is left alone.
	res, err = r.Run(ctx, payload(t, hook.PostToolUse, map[string]any{"tool_name": "Read", "tool_use_id": "toolu_01B",
		"tool_input":    map[string]any{"file_path": "/work/p/internal/upload/retry.go"},
		"tool_response": map[string]any{"type": "text", "file": map[string]any{"filePath": "/work/p/internal/upload/retry.go", "content": code, "numLines": 7}}}))
	if err != nil || res.ToolOutput != nil || res.Stored != 2 {
		t.Errorf("a small Read: %+v, %v", res, err)
	}

	// PreCompact with no transcript still records the reference.
	res, err = r.Run(ctx, payload(t, hook.PreCompact, map[string]any{"trigger": "manual"}))
	if err != nil || len(res.Refs) != 1 {
		t.Fatalf("PreCompact: %+v, %v", res, err)
	}
	cmp, err := eng.Store().Reference(ctx, res.Refs[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(cmp.ContentIDs) != 5 || cmp.TurnFrom != 1 || cmp.TurnTo != 1 {
		t.Errorf("the compaction reference = %+v, want the 5 records of turn 1", cmp)
	}
	res, err = r.Run(ctx, payload(t, hook.SessionStart, map[string]any{"source": "compact"}))
	if err != nil {
		t.Fatal(err)
	}
	if m := ctxref.Find(res.Context); len(m) != 1 || m[0].Marker.ID != cmp.ID {
		t.Errorf("SessionStart after a compaction lists markers %+v, want %s:\n%s", m, cmp.ID, res.Context)
	}

	res, err = r.Run(ctx, payload(t, hook.Stop, map[string]any{"last_assistant_message": "The retry loop now passes ctx to backoffWait."}))
	if err != nil {
		t.Fatal(err)
	}
	sr, err := arc.ReadSession(ctx, "s-1", 0)
	if err != nil || sr.Resume == nil || !strings.Contains(sr.Resume.Task, "RetryUpload") || !strings.Contains(sr.Resume.Current, "passes ctx") {
		t.Fatalf("resume after Stop = %+v, %v", sr.Resume, err)
	}
	// The next session is told where this one stopped.
	next := payload(t, hook.SessionStart, map[string]any{"source": "startup"})
	next.SessionID = "s-2"
	res, err = r.Run(ctx, next)
	if err != nil || !strings.Contains(res.Context, "The last session (s-1") {
		t.Errorf("the next session's start does not say where s-1 stopped: %v\n%s", err, res.Context)
	}
}

func TestRunner_SubAgent(t *testing.T) {
	r := newRunner(t)
	ctx := t.Context()
	if _, err := r.Run(ctx, payload(t, hook.SessionStart, map[string]any{"source": "startup"})); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Run(ctx, payload(t, hook.PostToolUse, map[string]any{"tool_name": "Grep", "tool_use_id": "toolu_9",
		"agent_id": "a1b2", "agent_type": "Explore", "tool_input": map[string]any{"pattern": "RetryUpload"},
		"tool_response": "internal/upload/retry.go:4:func RetryUpload"})); err != nil {
		t.Fatal(err)
	}
	arc, _ := r.Eng.Archive(ctx)
	agents, err := arc.Agents(ctx, "s-1")
	if err != nil {
		t.Fatal(err)
	}
	var sub store.ArchiveAgent
	for _, a := range agents {
		if a.ID == "claude-code@s-1/a1b2" {
			sub = a
		}
	}
	if sub.ParentID != "claude-code@s-1" || sub.Role != "Explore" {
		t.Errorf("the sub-agent = %+v, want a child of claude-code@s-1 with role Explore (agents %+v)", sub, agents)
	}
}

// TestRunner_SessionNotAnID: a harness's session ID that is not a valid
// agent ID (a space, a letter outside ASCII) still gets its agent and
// sub-agent, under IDs made valid.
func TestRunner_SessionNotAnID(t *testing.T) {
	r := newRunner(t)
	ctx := t.Context()
	for _, ev := range []struct {
		event  string
		fields map[string]any
	}{
		{hook.SessionStart, map[string]any{"source": "startup"}},
		{hook.UserPromptSubmit, map[string]any{"prompt": "why does the upload retry spin"}},
		{hook.PostToolUse, map[string]any{"tool_name": "Grep", "tool_use_id": "toolu_1", "agent_id": "sub ü",
			"tool_input": map[string]any{"pattern": "RetryUpload"}, "tool_response": "internal/upload/retry.go:4:func RetryUpload"}},
	} {
		ev.fields["session_id"] = "run 7 ü"
		if _, err := r.Run(ctx, payload(t, ev.event, ev.fields)); err != nil {
			t.Fatalf("%s: %v", ev.event, err)
		}
	}
	arc, _ := r.Eng.Archive(ctx)
	agents, err := arc.Agents(ctx, "run 7 ü")
	if err != nil {
		t.Fatal(err)
	}
	main := archive.ClipID("claude-code@run 7 ü")
	var found []string
	for _, a := range agents {
		found = append(found, a.ID)
		if a.ID != main && a.ParentID != main {
			t.Errorf("agent %+v is neither the session's agent %q nor its child", a, main)
		}
	}
	if len(agents) != 2 {
		t.Errorf("agents %q, want the session's and its sub-agent's", found)
	}
}

// TestCodex_Payloads reads the hook payloads Codex 0.171.0 sent
// (testdata/codex-0.171.0/hooks), and runs a session's events over them.
// A large output is stored, never replaced: Codex's hooks cannot replace
// a tool's output.
func TestCodex_Payloads(t *testing.T) {
	r := newRunner(t)
	r.Harness = hook.Codex
	r.Opts.MaxToolTokens = 100 // every output is "large"
	ctx := t.Context()
	for _, tc := range []struct{ file, event string }{
		{"session-start-startup.json", hook.SessionStart},
		{"user-prompt-submit.json", hook.UserPromptSubmit},
		{"post-tool-use-bash.json", hook.PostToolUse},
		{"post-tool-use-bash-large.json", hook.PostToolUse},
		{"post-tool-use-mcp.json", hook.PostToolUse},
		{"pre-compact-auto.json", hook.PreCompact},
		{"session-start-compact.json", hook.SessionStart},
		{"stop.json", hook.Stop},
	} {
		data, err := os.ReadFile(filepath.Join("testdata", "codex-0.171.0", "hooks", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		p, err := hook.ParsePayload(data, tc.event)
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if p.SessionID == "" || p.TranscriptPath == "" || (tc.event != hook.SessionStart && p.TurnID == "") {
			t.Errorf("%s: session %q, transcript %q, turn %q", tc.file, p.SessionID, p.TranscriptPath, p.TurnID)
		}
		res, err := r.Run(ctx, p)
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if len(res.ToolOutput) > 0 || strings.Contains(string(res.Output(tc.event)), "updatedToolOutput") {
			t.Errorf("%s: the hook replaces the output for Codex: %s", tc.file, res.Output(tc.event))
		}
		if tc.event == hook.PostToolUse {
			var resp any
			_ = json.Unmarshal(p.ToolResponse, &resp)
			if s, ok := resp.(string); ok {
				// Bash's output is the string the model got, stored as it is.
				id, err := r.Eng.Store().MsgEntry(ctx, p.SessionID, p.ToolUseID+"/result")
				if err != nil {
					t.Fatalf("%s: the result: %v", tc.file, err)
				}
				if ent, err := r.Eng.Entry(ctx, id); err != nil || string(ent.Content) != s {
					t.Errorf("%s: the result is stored as %.100q (%v)", tc.file, ent.Content, err)
				}
			}
		}
		if tc.file == "session-start-compact.json" && !strings.Contains(res.Context, "[CTX-REF:") {
			t.Errorf("after the compaction, SessionStart gives no marker: %q", res.Context)
		}
	}
}

// TestRunner_ResumeFromOddInput: a NUL pasted into the first prompt or
// the last answer, or a blank file path in a tool's input, is left out of
// the resume point, which the archive would otherwise refuse at every
// Stop of the session.
func TestRunner_ResumeFromOddInput(t *testing.T) {
	r := newRunner(t)
	ctx := t.Context()
	for _, ev := range []struct {
		event  string
		fields map[string]any
	}{
		{hook.UserPromptSubmit, map[string]any{"prompt": "paste \x00 here\tplease"}},
		{hook.PostToolUse, map[string]any{"tool_name": "Read", "tool_use_id": "toolu_1",
			"tool_input": map[string]any{"file_path": "  "}, "tool_response": "nothing"}},
		{hook.PostToolUse, map[string]any{"tool_name": "Read", "tool_use_id": "toolu_2",
			"tool_input": map[string]any{"file_path": "internal/upload/retry.go"}, "tool_response": "package upload"}},
		{hook.Stop, map[string]any{"last_assistant_message": "done \x00 now"}},
		{hook.Stop, map[string]any{"last_assistant_message": "done again"}},
	} {
		if _, err := r.Run(ctx, payload(t, ev.event, ev.fields)); err != nil {
			t.Fatalf("%s: %v", ev.event, err)
		}
	}
	arc, err := r.Eng.Archive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sr, err := arc.ReadSession(ctx, "s-1", 0)
	if err != nil || sr.Resume == nil {
		t.Fatalf("resume: %+v, %v", sr.Resume, err)
	}
	if sr.Resume.Task != "paste  here please" || !strings.Contains(sr.Resume.Current, "done again") {
		t.Errorf("resume = %+v", sr.Resume)
	}
	for _, f := range sr.Resume.FilesToRead {
		if strings.TrimSpace(f) == "" {
			t.Errorf("a blank file to read: %q", sr.Resume.FilesToRead)
		}
	}
}

// TestRunner_SecretInToolHint: a large output's reference names the call
// that made it (its hint, shown in the marker), with the secret its
// command carried redacted, as the call's own record is.
func TestRunner_SecretInToolHint(t *testing.T) {
	r := newRunner(t)
	r.Opts.MaxToolTokens = 100
	ctx := t.Context()
	secret := "ghp_" + strings.Repeat("a1B2c3", 6)
	var out strings.Builder
	for i := range 400 {
		fmt.Fprintf(&out, "line %d of the listing\n", i)
	}
	res, err := r.Run(ctx, payload(t, hook.PostToolUse, map[string]any{"tool_name": "Bash", "tool_use_id": "toolu_s",
		"tool_input":    map[string]any{"command": "curl -H 'Authorization: token " + secret + "' https://api.github.com/repos"},
		"tool_response": map[string]any{"stdout": out.String(), "stderr": "", "interrupted": false, "isImage": false}}))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Refs) != 1 {
		t.Fatalf("refs %v: the output was not replaced", res.Refs)
	}
	ref, err := r.Eng.Store().Reference(ctx, res.Refs[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(ref.QueryHints) == 0 || !strings.HasPrefix(ref.QueryHints[0], "Bash curl") {
		t.Errorf("the reference's hints %q do not name the call", ref.QueryHints)
	}
	if strings.Contains(strings.Join(ref.QueryHints, " "), secret) || strings.Contains(string(res.ToolOutput), secret) {
		t.Errorf("the secret is in the reference's hints %q or the marker:\n%s", ref.QueryHints, res.ToolOutput)
	}
}
