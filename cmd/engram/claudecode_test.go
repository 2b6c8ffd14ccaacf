package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/harness"
	"github.com/engramhq/engram/internal/hook"
	"github.com/engramhq/engram/internal/modelserver"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
)

// engramCLI runs the built engram with env and returns its stdout.
func engramCLI(t *testing.T, env []string, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Env, cmd.Dir = env, dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("engram %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// daemonSockets are the sockets of the hook daemons of the stores under
// dataDir, as the hooks name them.
func daemonSockets(dataDir string) []string {
	dbs, _ := filepath.Glob(filepath.Join(dataDir, "projects", "*", "engram.db"))
	var socks []string
	for _, db := range dbs {
		a := &app{}
		a.cfg.Store.Path = db
		socks = append(socks, a.socketPath())
	}
	return socks
}

// stopDaemons stops the hook daemons of the stores under dataDir.
func stopDaemons(dataDir string) {
	for _, s := range daemonSockets(dataDir) {
		if _, err := os.Stat(s); err != nil {
			continue
		}
		c := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", s)
		}}}
		if r, err := c.Post("http://engram/stop", "text/plain", nil); err == nil {
			r.Body.Close()
		}
	}
}

// userTexts are the texts of a request's user messages, tool results
// included.
func userTexts(r *modelserver.Request) string {
	var b strings.Builder
	for _, m := range r.Params.Messages {
		if m.Role != "user" {
			continue
		}
		for _, c := range m.Content {
			b.WriteString(c.Text)
			b.WriteString(c.ResultText())
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// TestClaudeCode_Hooks runs the real Claude Code CLI with engram's hooks
// and MCP server installed in its project: a session that reads a file
// and runs a command with a large output, a compaction, and a prompt
// after it whose answer expands the compaction's marker through engram's
// MCP tool.
func TestClaudeCode_Hooks(t *testing.T) {
	srv := modelserver.Start(modelserver.Options{})
	defer srv.Close()
	cc := modelserver.NewClaudeCode(t, srv)
	bin := binary(t)
	dataDir := t.TempDir()
	env := append(cc.Env, "ENGRAM_DATA_DIR="+dataDir)
	cc.Env = env
	t.Cleanup(func() { stopDaemons(dataDir) })

	// Shared memory from an earlier session, and code the pre-fetch finds.
	engramCLI(t, env, cc.Dir, "pattern", "add", "--category", "testing.flaky",
		"the upload retry must pass ctx to backoff.Wait or it ignores the deadline")
	code := "package upload\n\n// RetryUpload retries an upload with exponential backoff until the deadline.\nfunc RetryUpload(ctx context.Context) error {\n\treturn backoffWait(ctx)\n}\n"
	rec, _ := json.Marshal(map[string]any{"type": "code_file", "content": code, "files": []string{"internal/upload/retry.go"}})
	addCmd := exec.Command(bin, "add", "-")
	addCmd.Env, addCmd.Dir, addCmd.Stdin = env, cc.Dir, strings.NewReader(string(rec)+"\n")
	if out, err := addCmd.CombinedOutput(); err != nil {
		t.Fatalf("engram add: %v\n%s", err, out)
	}

	installClaudeHooks(t, env, cc.Dir)

	notes := filepath.Join(cc.Dir, "notes.txt")
	if err := os.WriteFile(notes, []byte("the secret word is PAPAYA\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var seq strings.Builder
	for i := 1; i <= 40000; i++ {
		fmt.Fprintf(&seq, "%d\n", i)
	}
	prompt1 := "Why does RetryUpload give up before the deadline with exponential backoff?"
	srv.Add(
		func(r *modelserver.Request) (modelserver.Response, error) {
			u := userTexts(r)
			for _, want := range []string{`<engram-context kind="session">`, "pass ctx to backoff.Wait", `<engram-context kind="prefetch">`, "internal/upload/retry.go"} {
				if !strings.Contains(u, want) {
					return modelserver.Response{}, fmt.Errorf("the first request lacks %q:\n%s", want, u)
				}
			}
			return modelserver.Response{Content: []modelserver.Block{modelserver.ToolUse("Read", map[string]any{"file_path": notes})}}, nil
		},
		modelserver.Call("Bash", map[string]any{"command": "seq 1 40000", "description": "count"}),
		func(r *modelserver.Request) (modelserver.Response, error) {
			got := modelserver.ToolResult(t, r)
			if !strings.Contains(got, "[CTX-REF:") || len(got) > 10000 || !strings.HasPrefix(got, "1\n2\n3\n") || !strings.HasSuffix(strings.TrimSpace(got), "40000") {
				return modelserver.Response{}, fmt.Errorf("the large output reached the model as %d bytes, not head, marker and tail:\n%.500s", len(got), got)
			}
			return modelserver.Response{Content: []modelserver.Block{modelserver.Text("Counted to 40000.")}}, nil
		},
	)
	res := cc.Prompt(t, prompt1, "--allowedTools", "Read,Bash")
	if err := srv.Err(); err != nil {
		t.Fatal(err)
	}
	sid := res.SessionID

	// The compaction, then a prompt after it.
	cc.Prompt(t, "/compact", "--resume", sid)
	if err := srv.Err(); err != nil {
		t.Fatal(err)
	}
	var refID string
	srv.Add(
		func(r *modelserver.Request) (modelserver.Response, error) {
			u := userTexts(r)
			for _, m := range ctxref.Find(u) {
				if m.Marker.Type == store.RefConversation {
					refID = m.Marker.ID
				}
			}
			if refID == "" || !strings.Contains(u, "pass ctx to backoff.Wait") {
				return modelserver.Response{}, fmt.Errorf("the request after the compaction carries no conversation marker or no briefing:\n%s", u)
			}
			return modelserver.Response{Content: []modelserver.Block{modelserver.ToolUse("mcp__engram__retrieve_context",
				map[string]any{"ref_id": refID, "max_tokens": 8000})}}, nil
		},
		func(r *modelserver.Request) (modelserver.Response, error) {
			// The result's text, as stored: engram sends no structured
			// content, which Claude Code would give the model instead.
			got := modelserver.ToolResult(t, r)
			for _, want := range []string{prompt1, "the secret word is PAPAYA\n", `{"tool":"Bash","input":{"command":"seq 1 40000","description":"count"}}`, "\n100\n101\n"} {
				if !strings.Contains(got, want) {
					return modelserver.Response{}, fmt.Errorf("the expanded marker lacks %q:\n%.2000s", want, got)
				}
			}
			return modelserver.Response{Content: []modelserver.Block{modelserver.ToolUse("mcp__engram__record",
				map[string]any{"type": "note", "content": "the secret word is settled: PAPAYA"})}}, nil
		},
		func(r *modelserver.Request) (modelserver.Response, error) {
			if got := modelserver.ToolResult(t, r); strings.Contains(got, "error") {
				return modelserver.Response{}, fmt.Errorf("record failed: %s", got)
			}
			return modelserver.Response{Content: []modelserver.Block{modelserver.Text("The word was PAPAYA.")}}, nil
		},
	)
	out, err := cc.Run(t, "-p", "What was the secret word?", "--output-format", "json", "--resume", sid, "--allowedTools", "mcp__engram__retrieve_context,mcp__engram__record")
	if serr := srv.Err(); serr != nil {
		t.Fatal(serr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("claude's answer: %v\n%s", err, out)
	}
	if res.Result != "The word was PAPAYA." {
		t.Errorf("result = %q", res.Result)
	}

	checkHooksRan(t, env, cc.Dir, hook.ClaudeCode)

	// Every prompt, tool call and result of the transcript is in the store,
	// byte for byte; the large output whole, under its marker.
	stopDaemons(dataDir)
	transcripts, _ := filepath.Glob(filepath.Join(cc.Home, ".claude", "projects", "*", sid+".jsonl"))
	if len(transcripts) != 1 {
		t.Fatalf("transcripts of %s: %v", sid, transcripts)
	}
	st := openDataStore(t, dataDir)
	checkTranscriptStored(t, st, transcripts[0], seq.String())

	checkRecordedByMCP(t, st, hook.ClaudeCode, sid, "the secret word is settled: PAPAYA")
}

// checkTranscriptStored checks that every user prompt, tool call and tool
// result of a Claude Code transcript is an entry of the store, byte for
// byte, and that a result engram replaced is stored whole.
func checkTranscriptStored(t *testing.T, st store.Store, path, whole string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	has := inStore(t, st)
	var prompts, calls, results, replaced int
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var line struct {
			Type     string `json:"type"`
			IsMeta   bool   `json:"isMeta"`
			Summary  bool   `json:"isCompactSummary"`
			Message  *modelserver.Message
			Sidechan bool `json:"isSidechain"`
		}
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatalf("transcript line: %v", err)
		}
		if line.Message == nil || line.IsMeta || line.Summary {
			continue
		}
		for _, b := range line.Message.Content {
			switch {
			case line.Type == "user" && b.Type == "text" && !strings.HasPrefix(b.Text, "<"):
				has("prompt", []byte(b.Text))
				prompts++
			case b.Type == "tool_use":
				has("tool call "+b.Name, hook.ToolCallContent(b.Name, b.Input))
				calls++
			case b.Type == "tool_result":
				text := b.ResultText()
				if strings.Contains(text, "[CTX-REF:") {
					has("the whole of a replaced result", []byte(whole))
					replaced++
					continue
				}
				has("tool result", []byte(text))
				results++
			}
		}
	}
	if prompts < 2 || calls != 4 || results != 3 || replaced != 1 {
		t.Errorf("checked %d prompts, %d calls, %d results and %d replaced; want 2+, 4, 3 and 1", prompts, calls, results, replaced)
	}
}

// installClaudeHooks installs engram's hooks and MCP server in the
// project, as a user would.
func installClaudeHooks(t *testing.T, env []string, dir string) {
	t.Helper()
	engramCLI(t, env, dir, "hooks", "install", "claude-code", "--project", dir)
}

// TestClaudeCode_AutoCompaction fills the real Claude Code's context with
// file reads until it compacts by itself (its window set to its least,
// 100,000 tokens), and shows that the conversation after the compaction
// carries the compaction's marker, which expands, with the next question
// as the query, to the line of the compacted file that answers it.
func TestClaudeCode_AutoCompaction(t *testing.T) {
	srv := modelserver.Start(modelserver.Options{})
	defer srv.Close()
	cc := modelserver.NewClaudeCode(t, srv)
	dataDir := t.TempDir()
	cc.Env = append(cc.Env, "ENGRAM_DATA_DIR="+dataDir, "CLAUDE_CODE_AUTO_COMPACT_WINDOW=100000")
	t.Cleanup(func() { stopDaemons(dataDir) })
	installClaudeHooks(t, cc.Env, cc.Dir)

	// Seven files of about 7,000 tokens each: under the size the hooks
	// replace, and with the 22,000 tokens of Claude Code's own prompt, over
	// its 67,000-token threshold (100,000 less the output and a margin).
	var files []string
	for i := range 7 {
		var b strings.Builder
		for j := 0; b.Len() < 24000; j++ {
			fmt.Fprintf(&b, "file %d line %d: the quartermaster counts crates of tea and tallow for voyage %d\n", i, j, i*1000+j)
		}
		if i == 3 {
			b.WriteString("the harbour master's password is MARMALADE\n")
		}
		p := filepath.Join(cc.Dir, fmt.Sprintf("ledger%d.txt", i))
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	var steps []modelserver.Step
	for _, p := range files {
		steps = append(steps, modelserver.Call("Read", map[string]any{"file_path": p}))
	}
	steps = append(steps, modelserver.Say("Read them all."))
	srv.Add(steps...)
	res := cc.Prompt(t, "Read the seven ledgers.", "--allowedTools", "Read")
	if err := srv.Err(); err != nil {
		t.Fatal(err)
	}
	// Claude Code compacts in the middle of the turn, once the reads pass
	// its threshold, and goes on.
	compactions := srv.Requests(modelserver.KindCompact)
	if len(compactions) != 1 {
		t.Fatalf("%d compaction requests, want 1: Claude Code did not compact by itself", len(compactions))
	}

	var refID string
	srv.Add(
		func(r *modelserver.Request) (modelserver.Response, error) {
			u := userTexts(r)
			for _, m := range ctxref.Find(u) {
				if m.Marker.Type == store.RefConversation {
					refID = m.Marker.ID
				}
			}
			if refID == "" {
				return modelserver.Response{}, fmt.Errorf("the conversation after the auto-compaction carries no conversation marker:\n%.3000s", u)
			}
			return modelserver.Response{Content: []modelserver.Block{modelserver.ToolUse("mcp__engram__retrieve_context",
				map[string]any{"ref_id": refID, "query": "harbour master password", "max_tokens": 2000})}}, nil
		},
		func(r *modelserver.Request) (modelserver.Response, error) {
			if got := modelserver.ToolResult(t, r); !strings.Contains(got, "MARMALADE") {
				return modelserver.Response{}, fmt.Errorf("the marker's expansion lacks the compacted file's line:\n%.2000s", got)
			}
			return modelserver.Response{Content: []modelserver.Block{modelserver.Text("MARMALADE.")}}, nil
		},
	)
	res = cc.Prompt(t, "What is the harbour master's password?", "--resume", res.SessionID, "--allowedTools", "mcp__engram__retrieve_context")
	if err := srv.Err(); err != nil {
		t.Fatal(err)
	}
	if res.Result != "MARMALADE." {
		t.Errorf("result = %q", res.Result)
	}
}

// checkHooksRan checks, as engram hooks status reports it, that each of
// engram's hooks for harness ran in the project at dir, and never failed.
func checkHooksRan(t *testing.T, env []string, dir, harnessName string) {
	t.Helper()
	var status struct {
		Runs []harness.Run `json:"runs"`
	}
	if err := json.Unmarshal([]byte(engramCLI(t, env, dir, "hooks", "status", "--json")), &status); err != nil {
		t.Fatal(err)
	}
	ran := map[string]int64{}
	for _, r := range status.Runs {
		if r.Harness == harnessName {
			ran[r.Event] = r.Runs
			if r.Errors > 0 {
				t.Errorf("the %s hook failed %d times: %s", r.Event, r.Errors, r.LastError)
			}
		}
	}
	for _, ev := range hook.Events {
		if ran[ev] == 0 {
			t.Errorf("the %s hook never ran (runs %v)", ev, ran)
		}
	}
}

// openDataStore opens the one store under dataDir, once its daemons are
// stopped.
func openDataStore(t *testing.T, dataDir string) *sqlite.Store {
	t.Helper()
	stopDaemons(dataDir)
	dbs, _ := filepath.Glob(filepath.Join(dataDir, "projects", "*", "engram.db"))
	if len(dbs) != 1 {
		t.Fatalf("stores: %v", dbs)
	}
	st, err := sqlite.Open(t.Context(), dbs[0], sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// checkRecordedByMCP checks that what the model recorded through engram's
// MCP server landed in the session the hooks registered, as the hooks'
// agent, although the harness does not tell MCP servers its session.
func checkRecordedByMCP(t *testing.T, st store.Store, harnessName, session, content string) {
	t.Helper()
	want := hook.AgentOf(harnessName, session, "")
	occ, err := st.Occurrences(t.Context(), store.ID([]byte(content)))
	if err != nil || len(occ) != 1 || occ[0].SessionID != session || occ[0].AgentID != want {
		t.Errorf("the MCP server's record: %+v, %v; want session %s, agent %s", occ, err, session, want)
	}
}

// inStore returns a check that content is an entry of st, byte for byte.
func inStore(t *testing.T, st store.Store) func(what string, content []byte) {
	return func(what string, content []byte) {
		t.Helper()
		if _, err := st.Entries(t.Context(), []string{store.ID(content)}); err != nil {
			t.Errorf("%s is not in the store (%v): %.200q", what, err, content)
		}
	}
}
