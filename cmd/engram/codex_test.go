package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/hook"
	"github.com/engramhq/engram/internal/modelserver"
	"github.com/engramhq/engram/internal/store"
)

// developerTexts are the texts of a Responses request's developer
// messages, where Codex puts what hooks add (additionalContext).
func developerTexts(r *modelserver.Request) string {
	var b strings.Builder
	for _, it := range r.Responses.Input {
		if it.Type == "message" && it.Role == "developer" {
			b.WriteString(it.Text())
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// lastOutput is the output of the last tool call a Responses request
// carries. A step returns the error (t.Fatal cannot be called from the
// server's goroutine).
func lastOutput(r *modelserver.Request) (string, error) {
	it, ok := r.Responses.LastOutput()
	if !ok {
		return "", fmt.Errorf("request %d carries no tool output (%d input items, last user message %.200q)",
			r.Seq, len(r.Responses.Input), r.Responses.LastUser().Text())
	}
	return it.OutputText(), nil
}

// mcpOutput is the text of an MCP tool's result as Codex gives it to the
// model, without the "Wall time: …\nOutput:\n" Codex puts before it.
// engram sends no structured content by default, which Codex would show
// instead, as JSON.
func mcpOutput(out string) string {
	if _, rest, ok := strings.Cut(out, "Output:\n"); ok {
		out = rest
	}
	return out
}

// recordedNew is record's text for content stored anew.
var recordedNew = regexp.MustCompile(`recorded [0-9a-f]{12} \(turn \d+\)`)

// TestCodex_Hooks runs the real Codex CLI with engram's hooks and MCP
// server installed in its project (engram hooks install codex): a
// session that reads a file and runs a command with a large output, then,
// resumed with a small auto-compaction limit, a compaction before the
// next prompt, whose answer expands the compaction's marker and records a
// note through engram's MCP tools.
func TestCodex_Hooks(t *testing.T) {
	srv := modelserver.Start(modelserver.Options{})
	defer srv.Close()
	cx := modelserver.NewCodex(t, srv)
	bin := binary(t)
	// The store is ENGRAM_DATA_DIR's, which Codex passes to engram's MCP
	// server because the installed block names it (env_vars).
	dataDir := t.TempDir()
	cx.Env = append(cx.Env, "ENGRAM_DATA_DIR="+dataDir)
	env := cx.Env
	t.Cleanup(func() { stopDaemons(dataDir) })

	// Shared memory from an earlier session, and code the pre-fetch finds.
	engramCLI(t, env, cx.Dir, "pattern", "add", "--category", "testing.flaky",
		"the upload retry must pass ctx to backoff.Wait or it ignores the deadline")
	code := "package upload\n\n// RetryUpload retries an upload with exponential backoff until the deadline.\nfunc RetryUpload(ctx context.Context) error {\n\treturn backoffWait(ctx)\n}\n"
	rec, _ := json.Marshal(map[string]any{"type": "code_file", "content": code, "files": []string{"internal/upload/retry.go"}})
	addCmd := exec.Command(bin, "add", "-")
	addCmd.Env, addCmd.Dir, addCmd.Stdin = env, cx.Dir, strings.NewReader(string(rec)+"\n")
	if out, err := addCmd.CombinedOutput(); err != nil {
		t.Fatalf("engram add: %v\n%s", err, out)
	}

	engramCLI(t, env, cx.Dir, "hooks", "install", "codex", "--project", cx.Dir)

	if err := os.WriteFile(filepath.Join(cx.Dir, "notes.txt"), []byte("the secret word is PAPAYA\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	prompt1 := "Why does RetryUpload give up before the deadline with exponential backoff?"
	firstTokens := 0
	srv.Add(
		func(r *modelserver.Request) (modelserver.Response, error) {
			d := developerTexts(r)
			for _, want := range []string{`<engram-context kind="session">`, "pass ctx to backoff.Wait", `<engram-context kind="prefetch">`, "internal/upload/retry.go"} {
				if !strings.Contains(d, want) {
					return modelserver.Response{}, fmt.Errorf("the first request's developer messages lack %q:\n%s", want, d)
				}
			}
			firstTokens = r.InputTokens
			return modelserver.Response{Content: []modelserver.Block{modelserver.ToolUse("exec_command", map[string]any{"cmd": "cat notes.txt"})}}, nil
		},
		func(r *modelserver.Request) (modelserver.Response, error) {
			if got, err := lastOutput(r); err != nil || !strings.Contains(got, "the secret word is PAPAYA") {
				return modelserver.Response{}, fmt.Errorf("cat's output lacks the file: %q (%v)", got, err)
			}
			return modelserver.Response{Content: []modelserver.Block{modelserver.Text("Now a count."),
				modelserver.ToolUse("exec_command", map[string]any{"cmd": "seq 1 40000"})}}, nil
		},
		func(r *modelserver.Request) (modelserver.Response, error) {
			if got, err := lastOutput(r); err != nil || !strings.Contains(got, "\n39999\n40000") {
				return modelserver.Response{}, fmt.Errorf("seq's output lacks its tail: %.300q (%v)", got, err)
			}
			return modelserver.Response{Content: []modelserver.Block{modelserver.Text("Counted to 40000.")}}, nil
		},
	)
	res := cx.Exec(t, prompt1, "--dangerously-bypass-hook-trust")
	if err := srv.Err(); err != nil {
		t.Fatal(err)
	}
	sid := res.ThreadID

	// Resumed with a limit the session is over (the large output put it
	// over), not the context after a compaction: Codex compacts once,
	// before the prompt, and the request after it carries the
	// compaction's marker. The expansion is kept small for the same
	// reason.
	var refID string
	srv.Add(
		func(r *modelserver.Request) (modelserver.Response, error) {
			d := developerTexts(r)
			for _, m := range ctxref.Find(d) {
				if m.Marker.Type == store.RefConversation {
					refID = m.Marker.ID
				}
			}
			if refID == "" || !strings.Contains(d, "pass ctx to backoff.Wait") {
				return modelserver.Response{}, fmt.Errorf("the request after the compaction carries no conversation marker or no briefing:\n%s", d)
			}
			call := modelserver.ToolUse("retrieve_context", map[string]any{"ref_id": refID, "max_tokens": 200})
			call.Namespace = "mcp__engram"
			return modelserver.Response{Content: []modelserver.Block{call}}, nil
		},
		func(r *modelserver.Request) (modelserver.Response, error) {
			out, err := lastOutput(r)
			if err != nil {
				return modelserver.Response{}, err
			}
			got := mcpOutput(out)
			for _, want := range []string{prompt1, "the secret word is PAPAYA\n", `{"tool":"Bash","input":{"command":"cat notes.txt"}}`} {
				if !strings.Contains(got, want) {
					return modelserver.Response{}, fmt.Errorf("the expanded marker lacks %q:\n%.2000s", want, got)
				}
			}
			call := modelserver.ToolUse("record", map[string]any{"type": "note", "content": "the secret word is settled: PAPAYA"})
			call.Namespace = "mcp__engram"
			return modelserver.Response{Content: []modelserver.Block{call}}, nil
		},
		func(r *modelserver.Request) (modelserver.Response, error) {
			if got, err := lastOutput(r); err != nil || !recordedNew.MatchString(got) {
				return modelserver.Response{}, fmt.Errorf("record failed: %s (%v)", got, err)
			}
			return modelserver.Response{Content: []modelserver.Block{modelserver.Text("The word was PAPAYA.")}}, nil
		},
	)
	limit := "model_auto_compact_token_limit=" + strconv.Itoa(firstTokens+2000)
	// engram's tools that write (record) are not read-only: Codex would
	// ask before it called them, and exec, which cannot ask, would refuse
	// them, but for the approval the installed block gives them.
	res = cx.Exec(t, "What was the secret word?", "--dangerously-bypass-hook-trust", "-c", limit, "resume", sid)
	if err := srv.Err(); err != nil {
		t.Fatal(err)
	}
	if res.Message != "The word was PAPAYA." || res.ThreadID != sid {
		t.Errorf("answer %q in thread %q, want the word in %q", res.Message, res.ThreadID, sid)
	}
	if n := len(srv.Requests(modelserver.KindCompact)); n == 0 {
		t.Error("Codex did not compact")
	}

	checkHooksRan(t, env, cx.Dir, hook.Codex)

	// Every prompt, tool call and result of the rollout is in the store,
	// byte for byte, after engram import codex (the Stop hook imported
	// all but the lines Codex wrote after it).
	stopDaemons(dataDir)
	rollouts, _ := filepath.Glob(filepath.Join(cx.CodexHome, "sessions", "*", "*", "*", "rollout-*-"+sid+".jsonl"))
	if len(rollouts) != 1 {
		t.Fatalf("rollouts of %s: %v", sid, rollouts)
	}
	engramCLI(t, env, cx.Dir, "import", "codex")
	st := openDataStore(t, dataDir)
	checkRolloutStored(t, st, rollouts[0])

	checkRecordedByMCP(t, st, hook.Codex, sid, "the secret word is settled: PAPAYA")
}

// checkRolloutStored checks that every user prompt, tool call and tool
// output of a Codex rollout is an entry of the store, byte for byte, and
// that none of engram's own contexts is.
func checkRolloutStored(t *testing.T, st store.Store, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	has := inStore(t, st)
	var prompts, calls, outputs, contexts int
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var line struct {
			Type    string          `json:"type"`
			Payload json.RawMessage `json:"payload"`
		}
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatalf("rollout line: %v", err)
		}
		if line.Type != "response_item" {
			continue
		}
		var it modelserver.Item
		if err := json.Unmarshal(line.Payload, &it); err != nil {
			t.Fatalf("rollout item: %v", err)
		}
		switch {
		case it.Type == "message" && it.Role == "user" && !strings.HasPrefix(it.Text(), "<"):
			has("prompt", []byte(it.Text()))
			prompts++
		case it.Type == "message" && it.Role == "developer" && strings.HasPrefix(it.Text(), "<engram-context "):
			if _, err := st.Entries(t.Context(), []string{store.ID([]byte(it.Text()))}); err == nil {
				t.Errorf("engram's own context is stored: %.200q", it.Text())
			}
			contexts++
		case it.Type == "function_call":
			name := it.Name
			if it.Namespace != "" {
				name = it.Namespace + "__" + name
			}
			has("tool call "+name, hook.ToolCallContent(name, json.RawMessage(it.Arguments)))
			calls++
		case it.Type == "function_call_output":
			has("tool output", []byte(it.OutputText()))
			outputs++
		}
	}
	if prompts != 2 || calls != 4 || outputs != 4 || contexts < 4 {
		t.Errorf("checked %d prompts, %d calls, %d outputs and %d contexts; want 2, 4, 4 and 4+", prompts, calls, outputs, contexts)
	}
}

// TestCodex_MCPPrintConfig runs the real Codex CLI with what engram mcp
// --print-config codex prints appended to its config.toml, as is, and no
// flag that approves tools: the model calls engram's record tool, which
// is not read-only, and codex exec, which cannot ask, must run it; the
// server must find the store ENGRAM_DATA_DIR names in Codex's
// environment, which Codex gives an MCP server only when the snippet
// names it.
func TestCodex_MCPPrintConfig(t *testing.T) {
	srv := modelserver.Start(modelserver.Options{})
	defer srv.Close()
	cx := modelserver.NewCodex(t, srv)
	dataDir := t.TempDir()
	// The snippet runs engram from PATH: the test's binary.
	path := "PATH=" + filepath.Dir(binary(t)) + string(filepath.ListSeparator) + os.Getenv("PATH")
	cx.Env = append(withoutVar(cx.Env, "PATH"), path, "ENGRAM_DATA_DIR="+dataDir)
	snippet := engramCLI(t, cx.Env, cx.Dir, "mcp", "--print-config", "codex")
	config := filepath.Join(cx.CodexHome, "config.toml")
	b, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(config, append(b, "\n"+snippet...), 0o644); err != nil {
		t.Fatal(err)
	}

	const note = "the printed configuration records"
	srv.Add(
		func(r *modelserver.Request) (modelserver.Response, error) {
			call := modelserver.ToolUse("record", map[string]any{"type": "note", "content": note})
			call.Namespace = "mcp__engram"
			return modelserver.Response{Content: []modelserver.Block{call}}, nil
		},
		func(r *modelserver.Request) (modelserver.Response, error) {
			if got, err := lastOutput(r); err != nil || !recordedNew.MatchString(got) {
				return modelserver.Response{}, fmt.Errorf("engram's record tool answered %q (%v)", got, err)
			}
			return modelserver.Response{Content: []modelserver.Block{modelserver.Text("Noted.")}}, nil
		},
	)
	res := cx.Exec(t, "Note that it works.")
	if err := srv.Err(); err != nil {
		t.Fatal(err)
	}
	if res.Message != "Noted." {
		t.Errorf("Codex's answer: %q", res.Message)
	}
	st := openDataStore(t, dataDir)
	if occ, err := st.Occurrences(t.Context(), store.ID([]byte(note))); err != nil || len(occ) != 1 {
		t.Errorf("the note in the store under ENGRAM_DATA_DIR: %+v, %v", occ, err)
	}
}
