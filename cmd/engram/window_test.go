package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/window"
)

// anthropicTurn is a turn of a coding agent in Anthropic's shape, one
// message a line: a prompt, a tool call, its result and an answer; about
// 470 tokens.
func anthropicTurn(i int) string {
	result, _ := json.Marshal(toolOutput(i))
	return fmt.Sprintf(`{"role":"user","content":"Step %d: read internal/pkg%d/file.go"}
{"role":"assistant","content":[{"type":"text","text":"Reading it."},{"type":"tool_use","id":"call-%d","name":"read_file","input":{"path": "internal/pkg%d/file.go"}}]}
{"role":"user","content":[{"type":"tool_result","tool_use_id":"call-%d","content":%s}]}
{"role":"assistant","content":"handler%d serves requests."}
`, i, i, i, i, i, result, i)
}

func toolOutput(i int) string {
	return fmt.Sprintf("package pkg%d\n\n// handler%d serves requests.\n%s", i, i, strings.Repeat("\t// a line of the body, ünïcödé ✓\n", 40))
}

func (e *env) fail(stdin string, code int, stderr string, args ...string) {
	e.t.Helper()
	got, _, errOut := e.run(stdin, args...)
	if got != code || !strings.Contains(errOut, stderr) {
		e.t.Errorf("engram %s: exit %d, stderr %q; want exit %d with %q", strings.Join(args, " "), got, errOut, code, stderr)
	}
}

// TestCLI_Window: open a window, append turns in Anthropic's shape until
// it evicts, see its status, list and context with the markers, and expand
// a marker back to the very messages.
func TestCLI_Window(t *testing.T) {
	e := newEnv(t)
	win := []string{"--session", "s1", "--agent", "claude"}
	args := func(a ...string) []string { return append(a, win...) }

	var st struct {
		Budget, Used, Messages, Refs int
		Strategy                     string
	}
	if err := json.Unmarshal([]byte(e.ok("", args("window", "open", "--limit", "3000", "--output", "200", "--safety", "100", "--json")...)), &st); err != nil {
		t.Fatal(err)
	}
	if st.Budget != 2430 || st.Strategy != "recency" {
		t.Fatalf("open: %+v", st)
	}
	if got := e.ok(`{"role":"system","content":"You are a careful engineer."}`+"\n", args("window", "append", "--key", "system")...); !strings.HasPrefix(got, "appended 1 message at 0-0\n") {
		t.Errorf("append: %q", got)
	}
	// The same append again under its key is not made twice; the key
	// with another message is refused.
	if got := e.ok(`{"role":"system","content":"You are a careful engineer."}`+"\n", args("window", "append", "--key", "system")...); !strings.HasPrefix(got, `appended before under key "system": nothing written again at 0-0`+"\n") {
		t.Errorf("append again: %q", got)
	}
	e.fail(`{"role":"system","content":"You are a lazy engineer."}`+"\n", 1, "was used before for other messages", args("window", "append", "--key", "system")...)
	var sent []string
	var markers []string
	for i := range 8 {
		f := filepath.Join(t.TempDir(), "turn.jsonl")
		turn := anthropicTurn(i)
		sent = append(sent, strings.Split(strings.TrimSpace(turn), "\n")...)
		if err := os.WriteFile(f, []byte(turn), 0o644); err != nil {
			t.Fatal(err)
		}
		var out struct {
			Evicted []struct{ ID, Marker string }
		}
		if err := json.Unmarshal([]byte(e.ok("", args("window", "append", "--format", "anthropic", "--file", f, "--json")...)), &out); err != nil {
			t.Fatal(err)
		}
		for _, r := range out.Evicted {
			markers = append(markers, r.Marker)
		}
	}
	if len(markers) == 0 {
		t.Fatal("eight turns in a 2,430-token window evicted nothing")
	}
	status := e.ok("", args("window", "status")...)
	if !strings.HasPrefix(status, "window s1/claude (default, recency, 3000-token context): ") || !strings.Contains(status, " evicted under ") {
		t.Errorf("status: %q", status)
	}
	if got := e.ok("", "window", "status", "--session", "s1"); got != status {
		t.Errorf("status of the session's only window: %q, want %q", got, status)
	}
	// An agent named is that agent's window, never the session's only
	// one; and a command that names no window acts on none.
	for _, cmd := range [][]string{{"status"}, {"context"}, {"assemble"}, {"snapshots"}, {"snapshot"}, {"diff", "1", "2"}} {
		e.fail("", 1, `no window for agent "codex" of session "s1" (open it first)`, append(append([]string{"window"}, cmd...), "--session", "s1", "--agent", "codex")...)
	}
	if got := e.ok("", args("window", "snapshots")...); !strings.HasSuffix(got, "has no snapshot: no turn was assembled\n") {
		t.Errorf("snapshots after commands on another agent's window: %q", got)
	}
	if got := e.ok("", "window", "list"); got != status {
		t.Errorf("list: %q, want %q", got, status)
	}
	text := e.ok("", args("window", "context")...)
	if !strings.HasPrefix(text, "--- 0 system (") || !strings.Contains(text, "\n[CTX-REF:") || !strings.Contains(text, toolOutput(7)) {
		t.Errorf("context: %s", text)
	}
	// The context, each marker expanded, is the conversation as it was
	// sent.
	whole := e.expanded(args, "anthropic")
	want := append([]string{`{"role":"system","content":"You are a careful engineer."}`}, sent...)
	if len(whole) != len(want) {
		t.Fatalf("the context, expanded, holds %d messages; %d were sent", len(whole), len(want))
	}
	for i := range want {
		var got, w any
		_ = json.Unmarshal(whole[i], &got)
		_ = json.Unmarshal([]byte(want[i]), &w)
		if !reflect.DeepEqual(got, w) {
			t.Errorf("message %d: %s, want %s", i, whole[i], want[i])
		}
	}
	if got := e.ok("", "window", "expand", markers[0]); !strings.Contains(got, toolOutput(0)) {
		t.Errorf("expand as text: %s", got)
	}
	// Re-admission: in this window, what a marker stands for is more
	// than the budget; in a larger one, laid out anew, it comes back.
	readmit := func() (string, string) {
		for _, line := range strings.Split(e.ok("", args("window", "context")...), "\n") {
			if mk, err := ctxref.Parse(line); err == nil {
				return mk.ID, fmt.Sprintf("%d tokens", mk.Tokens)
			}
		}
		t.Fatal("no marker in the context")
		return "", ""
	}
	ref, _ := readmit()
	e.fail("", 1, "error: reference "+ref+": no room in the window", "window", "readmit", ref)
	e.ok("", args("window", "open", "--limit", "5000")...)
	ref, size := readmit()
	if got := e.ok("", "window", "readmit", ref); !strings.HasPrefix(got, "readmitted ") || !strings.Contains(got, "window s1/claude") {
		t.Errorf("readmit %s (%s): %s", ref, size, got)
	}
	if got := e.ok("", args("window", "context")...); strings.Contains(got, ref) || !strings.Contains(got, toolOutput(0)) {
		t.Errorf("the context after readmitting %s:\n%s", ref, got)
	}
	e.fail("", 1, "error: reference "+ref+": its messages are in the window already", "window", "readmit", ref)
	e.fail("", 2, "window readmit takes one reference", "window", "readmit")
	// What went through the window is searchable.
	if got := e.ok("", "search", "handler2", "serves", "--session", "s1"); !strings.Contains(got, "handler2 serves requests") {
		t.Errorf("search: %s", got)
	}
}

// TestCLI_WindowBadInput: bad input is a clear error, named by line, and
// stores nothing; a message larger than the whole budget is taken.
func TestCLI_WindowBadInput(t *testing.T) {
	e := newEnv(t)
	win := []string{"--session", "s1", "--agent", "claude"}
	args := func(a ...string) []string { return append(a, win...) }

	e.fail("", 1, "no store yet", args("window", "status")...)
	e.fail("", 2, "window open needs --session", "window", "open", "--limit", "3000")
	e.fail("", 2, "window open needs --agent", "window", "open", "--limit", "3000", "--session", "s1")
	e.fail("", 2, `unknown model "gpt-9"`, args("window", "open", "--model", "gpt-9")...)
	e.fail("", 2, "limit is 12; it must be from 256", args("window", "open", "--limit", "12")...)
	e.fail("", 2, "a window needs a model or a context limit", args("window", "open")...)
	e.fail(`{"role":"user","content":"hi"}`+"\n", 1, "no window for agent", args("window", "append")...)
	e.ok("", args("window", "open", "--limit", "3000", "--output", "200", "--safety", "100")...)
	e.ok(anthropicTurn(0), args("window", "append", "--format", "anthropic")...)
	before := e.ok("", args("window", "status", "--json")...)

	orphan := `{"role":"user","content":[{"type":"tool_result","tool_use_id":"call-x","content":"orphan output"}]}`
	for _, c := range []struct {
		in, format, want string
	}{
		{"{\"role\":\"user\",\"content\":\"ok\"}\n\n{\"role\":\"user\",\"content\":\"orphan output\"\n", "engram", "line 3: not an engram message"},
		{"{\"role\":\"user\",\"content\":\"ok\"}\n{\"role\":\"robot\",\"content\":\"orphan output\"}\n[1]\n", "engram", "line 2: role \"robot\" is not system, user, assistant or tool"},
		{"{\"role\":\"user\",\"content\":\"ok\"}\n{\"role\":\"robot\",\"content\":\"orphan output\"}\n[1]\n", "engram", "line 3: not an engram message"},
		{`{"role":"user","content":"ok"}` + "\n" + orphan + "\n", "anthropic", `line 2: a result for tool call "call-x", which no earlier message makes`},
		{`{"role":"tool","content":"orphan output"}` + "\n", "openai", "line 1: openai message: a tool message needs its tool_call_id"},
		{`{"role":"user","content":"orphan output","tokens":-1,"colour":1}` + "\n", "engram", `line 1: not an engram message (role, and content or blocks): unknown field "colour"`},
	} {
		code, _, errOut := e.run(c.in, args("window", "append", "--format", c.format)...)
		if code != 1 || !strings.Contains(errOut, c.want) || !strings.Contains(errOut, "nothing was stored") {
			t.Errorf("append %q: exit %d, stderr %q; want %q", c.in, code, errOut, c.want)
		}
	}
	e.fail(`{"role":"user","content":"hi"}`+"\n", 2, `format "xml": want engram`, args("window", "append", "--format", "xml")...)
	e.fail("\n\n", 1, "no messages", args("window", "append")...)
	long := `{"role":"user","content":"` + strings.Repeat("orphan output ", 700_000) + `"}` + "\n"
	e.fail(long, 1, "line 1: longer than 8388608 bytes", args("window", "append")...)
	e.fail("", 1, "no reference r0000000000000000", "window", "expand", "r0000000000000000")
	e.fail("", 2, `ref_id: "not a ref" is neither a [CTX-REF] marker nor a ref id`, "window", "expand", "not a ref")
	e.fail("", 2, "window expand takes one reference", "window", "expand")
	if after := e.ok("", args("window", "status", "--json")...); after != before {
		t.Errorf("refused appends changed the window:\n%s\nwas\n%s", after, before)
	}
	if got := e.ok("", "search", "orphan", "output"); strings.Contains(got, "orphan") {
		t.Errorf("refused appends stored content: %s", got)
	}

	// A message larger than the whole budget: stored, not refused.
	huge := strings.Repeat("FAIL TestUploadRetry (2.00s): context deadline exceeded, attempt 7 of 9\n", 3000)
	b, _ := json.Marshal(huge)
	out := e.ok(fmt.Sprintf("{\"role\":\"user\",\"content\":\"Run the tests.\"}\n{\"role\":\"user\",\"content\":%s}\n", b), args("window", "append", "--json")...)
	var res struct {
		Window struct{ Used, Budget int }
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	t.Logf("a %d-byte message in a %d-token window: %d tokens used", len(huge), res.Window.Budget, res.Window.Used)
	if res.Window.Used > res.Window.Budget {
		t.Errorf("the window holds %d tokens of its %d", res.Window.Used, res.Window.Budget)
	}
	// It is shown as its head and tail beside its marker.
	if shown := e.ok("", args("window", "context")...); !strings.Contains(shown, "[CTX-REF:") ||
		!strings.Contains(shown, "FAIL TestUploadRetry (2.00s): context deadline exceeded, attempt 7 of 9\n") {
		t.Errorf("the large message is not shown as a marker with its head and tail:\n%s", shown)
	}
	whole := e.expanded(args, "engram")
	var last struct{ Blocks []struct{ Text string } }
	if err := json.Unmarshal(whole[len(whole)-1], &last); err != nil || len(last.Blocks) != 1 || last.Blocks[0].Text != huge {
		t.Errorf("the large message is not one expansion away, whole (%v)", err)
	}
}

// expanded returns a window's context, as window context --json gives it
// in format, each marker replaced by the messages window expand gives.
func (e *env) expanded(args func(...string) []string, format string) []json.RawMessage {
	e.t.Helper()
	var ctxOut struct {
		Items []struct {
			Message json.RawMessage
			RefID   string `json:"ref_id"`
		}
	}
	if err := json.Unmarshal([]byte(e.ok("", args("window", "context", "--format", format, "--json")...)), &ctxOut); err != nil {
		e.t.Fatal(err)
	}
	var out []json.RawMessage
	for _, it := range ctxOut.Items {
		if it.RefID == "" {
			if len(it.Message) > 0 { // else an excerpt of messages under a marker
				out = append(out, it.Message)
			}
			continue
		}
		var exp struct{ Messages []json.RawMessage }
		if err := json.Unmarshal([]byte(e.ok("", "window", "expand", it.RefID, "--format", format, "--json")), &exp); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, exp.Messages...)
	}
	return out
}

// writeGzip writes s gzipped to a new file and returns its path.
func writeGzip(t *testing.T, name, s string) string {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// addSession is a conversation in engram add's format: each turn a
// prompt, a tool call and its result.
func addSession(turns int) string {
	var b strings.Builder
	for i := range turns {
		result, _ := json.Marshal(toolOutput(i))
		fmt.Fprintf(&b, `{"session":"s1","agent":"claude","role":"user","content":"Step %d: read internal/pkg%d/file.go"}
{"session":"s1","agent":"claude","type":"tool_call","msg_id":"call-%d","content":{"tool":"Read","path":"internal/pkg%d/file.go"}}
{"session":"s1","agent":"claude","type":"tool_result","parent":"call-%d","content":%s}
`, i, i, i, i, i, result)
	}
	return b.String()
}

// TestCLI_WindowReplay: a replay feeds a conversation through a window
// turn by turn, prints what each turn did, and checks that every marker
// expands back byte for byte; in engram add's format, the trajectories'
// (told apart from the first line), and one message a line.
func TestCLI_WindowReplay(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	add := filepath.Join(dir, "session.jsonl")
	if err := os.WriteFile(add, []byte(addSession(9)), 0o644); err != nil {
		t.Fatal(err)
	}
	out := e.ok("", "window", "replay", add, "--budget", "2000")
	for _, want := range []string{"replay of " + add + " (add): 1 window, budget 2,000 tokens (o200k_base)",
		"window s1/claude: strategy recency, evicts at 1,500 tokens down to 1,000",
		"markers:\n  [CTX-REF:", "expands back byte for byte: ", "1 window, 9 turns: "} {
		if !strings.Contains(out, want) {
			t.Errorf("replay: no %q in\n%s", want, out)
		}
	}
	var rep struct {
		Format  string
		Budget  int
		OK      bool
		Refs    int
		Windows []struct {
			Turns []struct {
				Turn, Used, Budget int
				Evicted            []struct{ ID string }
			}
			Check struct {
				Messages, Bytes int
				Mismatches      []string
			}
		}
	}
	if err := json.Unmarshal([]byte(e.ok("", "window", "replay", add, "--budget", "2000", "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Refs == 0 || rep.Format != "add" || len(rep.Windows) != 1 || len(rep.Windows[0].Turns) != 9 ||
		rep.Windows[0].Check.Messages == 0 || len(rep.Windows[0].Check.Mismatches) != 0 {
		t.Errorf("replay --json: %+v", rep)
	}

	// The trajectories' format, gzipped: one window a run; --run picks.
	var runs strings.Builder
	for r := range 2 {
		msgs := []map[string]string{{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Fix the bug."}}
		for i := range 8 {
			msgs = append(msgs, map[string]string{"role": "assistant", "content": fmt.Sprintf("```bash\ncat internal/pkg%d/file.go\n```", i)},
				map[string]string{"role": "user", "content": "<returncode>0</returncode>\n<output>\n" + toolOutput(i) + "</output>"})
		}
		line, _ := json.Marshal(map[string]any{"instance_id": fmt.Sprintf("repo__repo-%d", r), "messages": msgs, "model": "x"})
		runs.Write(line)
		runs.WriteString("\n")
	}
	traj := writeGzip(t, "trajectories.jsonl.gz", runs.String())
	out = e.ok("", "window", "replay", traj, "--budget", "3000", "--run", "repo__repo-1")
	if !strings.Contains(out, "(trajectories): 1 window,") || !strings.Contains(out, "window repo__repo-1/agent: strategy recency") ||
		strings.Contains(out, "repo__repo-0") || !strings.Contains(out, "expands back byte for byte") {
		t.Errorf("replay of trajectories:\n%s", out)
	}
	e.fail("", 1, `no run "repo__repo-7"`, "window", "replay", traj, "--budget", "3000", "--run", "repo__repo-7")

	// One message a line, in a vendor's shape.
	var anth strings.Builder
	for i := range 8 {
		anth.WriteString(anthropicTurn(i))
	}
	msgs := filepath.Join(dir, "chat.jsonl")
	if err := os.WriteFile(msgs, []byte(anth.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// Without --format, messages are not taken for engram add's records
	// (which made a turn of every tool result, silently).
	e.fail("", 2, "holds messages (a role with blocks, a list of content or tool calls), not engram add's records: give --format",
		"window", "replay", msgs, "--budget", "2400")
	out = e.ok("", "window", "replay", msgs, "--format", "anthropic", "--budget", "2400", "--model", "gpt-4o")
	if !strings.Contains(out, "window replay-chat/replay: ") || !strings.Contains(out, "expands back byte for byte") {
		t.Errorf("replay of anthropic messages:\n%s", out)
	}

	// Into a store that is kept: the windows stay, a second replay of the
	// same conversation is refused.
	kept := filepath.Join(dir, "kept.db")
	e.ok("", "window", "replay", add, "--budget", "2000", "--store", kept)
	if got := e.ok("", "window", "list", "--store", kept); !strings.HasPrefix(got, "window s1/claude ") {
		t.Errorf("the kept store's windows: %q", got)
	}
	e.fail("", 1, "window s1/claude is in the store already", "window", "replay", add, "--budget", "2000", "--store", kept)

	// Bad input: named by line, nothing replayed.
	e.fail("", 2, "window replay needs --budget", "window", "replay", add)
	e.fail("", 2, `--format "csv"`, "window", "replay", add, "--budget", "2000", "--format", "csv")
	e.fail("", 2, `--model "gpt-9"`, "window", "replay", add, "--budget", "2000", "--model", "gpt-9")
	bad := filepath.Join(dir, "bad.jsonl")
	lines := strings.Split(addSession(2), "\n")
	lines[2] = strings.Replace(lines[2], `"parent":"call-0"`, `"parent":"call-9"`, 1)
	lines[4] = `{"session":"s1","role":"user"`
	if err := os.WriteFile(bad, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	e.fail("", 1, "line 5: ", "window", "replay", bad, "--budget", "2000")
	lines[4] = `{"session":"s1","agent":"claude","role":"user","content":"fine"}`
	if err := os.WriteFile(bad, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	e.fail("", 1, `line 3: a tool_result whose parent "call-9" is no earlier tool_call's msg_id in session s1`, "window", "replay", bad, "--budget", "2000")
	lines[2] = strings.Replace(lines[2], `"parent":"call-9"`, `"parent":"call-0"`, 1)
	lines[4] = strings.Replace(lines[5], `"parent":"call-1"`, `"parent":"call-0"`, 1)
	if err := os.WriteFile(bad, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	e.fail("", 1, `line 5: a second tool_result for the tool_call "call-0"`, "window", "replay", bad, "--budget", "2000")
	e.fail("", 1, "no such file", "window", "replay", filepath.Join(dir, "missing.jsonl"), "--budget", "2000")
}

// FuzzReplayRead reads any input as window replay reads engram add's
// records: refused, or windows of messages a window takes, their tool
// calls paired with their results, in turns that each open with a user's
// prompt (the first may open with the system prompt).
func FuzzReplayRead(f *testing.F) {
	f.Add([]byte(addSession(2)))
	f.Add([]byte(`{"session":"s1","type":"tool_call","content":"ls -la"}` + "\n" + `{"session":"s1","type":"tool_result","content":"x"}` + "\n" +
		`{"session":"s2","agent":"b","role":"system","content":"be brief"}` + "\n" + `{"session":"s2","agent":"b","type":"code_file","content":"package x"}`))
	f.Add([]byte(`{"session":"s1","type":"tool_result","parent":"nope","content":"x"}`))
	f.Add([]byte(`{"session":"s1","type":"tool_call","msg_id":"c1","content":{}}` + "\n" + `{"session":"s1","type":"tool_result","parent":"c1","content":"1"}` + "\n" +
		`{"session":"s1","type":"tool_result","parent":"c1","content":"2"}` + "\n" + `{"session":"s1","type":"tool_call","msg_id":"c1","content":{}}`))
	_, eng, done, err := scratchStore(context.Background(), f.TempDir(), "fuzz.db")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(done)
	f.Fuzz(func(t *testing.T, input []byte) {
		convs, err := readAddRecords(eng, bytes.NewReader(input), "in.jsonl")
		if err != nil {
			return
		}
		for _, c := range convs {
			var msgs []window.Message
			for i, turn := range c.turns {
				if len(turn) == 0 {
					t.Fatalf("%s: turn %d is empty", c.key, i)
				}
				first := turn[0].msg
				if i > 0 && (first.Role != window.RoleUser || len(first.Results()) > 0) {
					t.Fatalf("%s: turn %d opens with a %s message", c.key, i, first.Role)
				}
				for _, m := range turn {
					if err := m.msg.Validate(); err != nil {
						t.Fatalf("%s: line %d: %v", c.key, m.line, err)
					}
					msgs = append(msgs, m.msg)
				}
			}
			if _, err := window.Units(msgs); err != nil {
				t.Fatalf("%s: %v", c.key, err)
			}
		}
	})
}

// TestCLI_WindowAssemble: engram window assemble prints the turn's
// messages and how each layer's share went, within the budget; bad input
// is a clear error.
func TestCLI_WindowAssemble(t *testing.T) {
	e := newEnv(t)
	args := func(extra ...string) []string {
		return append([]string{extra[0], extra[1], "--session", "s1", "--agent", "claude"}, extra[2:]...)
	}
	e.ok("", args("window", "open", "--limit", "3000", "--output", "200", "--safety", "100")...)
	e.ok(`{"role":"system","content":"You are a careful engineer."}`+"\n", args("window", "append")...)
	for i := range 8 {
		f := filepath.Join(t.TempDir(), "turn.jsonl")
		if err := os.WriteFile(f, []byte(anthropicTurn(i)), 0o644); err != nil {
			t.Fatal(err)
		}
		e.ok("", args("window", "append", "--format", "anthropic", "--file", f)...)
	}
	brief := filepath.Join(t.TempDir(), "brief.md")
	if err := os.WriteFile(brief, []byte("Decision: handlers take their deadline from the request."), 0o644); err != nil {
		t.Fatal(err)
	}
	out := e.ok("", args("window", "assemble", "--message", "Why is handler1 slow?", "--tools", "200", "--briefing-file", brief)...)
	for _, want := range []string{"Decision: handlers take their deadline", "Why is handler1 slow?", "L6_history", "L5_retrieval", "of 2230 tokens)", "history: "} {
		if !strings.Contains(out, want) {
			t.Errorf("assemble lacks %q:\n%s", want, out)
		}
	}
	e.fail("", 1, "no turn to assemble: no message for the turn", args("window", "assemble")...)
	e.fail("", 1, "tools is 99999999", args("window", "assemble", "--message", "x", "--tools", "99999999")...)
	e.fail("", 1, "no such file", args("window", "assemble", "--message", "x", "--briefing-file", "/nonexistent")...)
}

// TestCLI_WindowSnapshots: each engram window assemble keeps its turn;
// the same state is the same snapshot, an append a new one; snapshots
// lists them, snapshot shows one, diff compares two, status shows the
// latest turn's layers; engram forget of the session removes them; bad
// input is a clear error.
func TestCLI_WindowSnapshots(t *testing.T) {
	e := newEnv(t)
	args := func(extra ...string) []string { return append(extra, "--session", "s1", "--agent", "claude") }
	e.ok("", args("window", "open", "--limit", "3000", "--output", "200", "--safety", "100")...)
	e.ok(`{"role":"system","content":"You are a careful engineer."}`+"\n", args("window", "append")...)
	turn := func(i int) {
		f := filepath.Join(t.TempDir(), "turn.jsonl")
		if err := os.WriteFile(f, []byte(anthropicTurn(i)), 0o644); err != nil {
			t.Fatal(err)
		}
		e.ok("", args("window", "append", "--format", "anthropic", "--file", f)...)
	}
	for i := range 6 {
		turn(i)
	}
	if got := e.ok("", args("window", "snapshots")...); !strings.Contains(got, "window s1/claude has no snapshot") {
		t.Errorf("snapshots before a turn: %q", got)
	}
	status := e.ok("", args("window", "status")...)
	if strings.Contains(status, "latest turn") {
		t.Errorf("status before a turn: %q", status)
	}
	type assembled struct {
		Snapshot string
		Tokens   int
		Layers   []struct {
			Name            string
			Allocated, Used int
		}
	}
	assemble := func() assembled {
		var out assembled
		if err := json.Unmarshal([]byte(e.ok("", args("window", "assemble", "--message", "Why is handler1 slow?", "--json")...)), &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	first, again := assemble(), assemble()
	if first.Snapshot == "" || again.Snapshot != first.Snapshot {
		t.Errorf("the same state assembled twice: %q and %q", first.Snapshot, again.Snapshot)
	}
	turn(6)
	third := assemble()
	if third.Snapshot == first.Snapshot {
		t.Fatal("an append did not change the snapshot")
	}
	list := e.ok("", args("window", "snapshots")...)
	if lines := strings.Split(strings.TrimSpace(list), "\n"); len(lines) != 4 || !strings.HasPrefix(strings.TrimSpace(lines[0]), "3  "+third.Snapshot[:12]) ||
		!strings.HasPrefix(strings.TrimSpace(lines[2]), "1  "+first.Snapshot[:12]) || lines[3] != "(3 snapshots of window s1/claude, newest first)" {
		t.Errorf("snapshots:\n%s", list)
	}
	if got := e.ok("", args("window", "snapshots", "--limit", "1", "--json")...); strings.Count(got, `"seq"`) != 1 {
		t.Errorf("snapshots --limit 1 --json: %s", got)
	}
	shown := e.ok("", args("window", "snapshot", first.Snapshot[:8])...)
	if !strings.HasPrefix(shown, "snapshot 2 of window s1/claude: "+first.Snapshot+"\n") || !strings.Contains(shown, "Why is handler1 slow?") ||
		!strings.Contains(shown, "L6_history") {
		t.Errorf("snapshot:\n%s", shown)
	}
	if latest := e.ok("", args("window", "snapshot")...); !strings.HasPrefix(latest, "snapshot 3 of window s1/claude: "+third.Snapshot) {
		t.Errorf("the latest snapshot:\n%s", latest)
	}
	diff := e.ok("", args("window", "diff", "1")...)
	if !strings.HasPrefix(diff, "--- snapshot 1 ("+first.Snapshot[:12]+")\n+++ snapshot 3 ("+third.Snapshot[:12]+")\n@@ ") ||
		!strings.Contains(diff, "\n+handler6 serves requests.\n") || !strings.Contains(diff, fmt.Sprintf("tokens %d -> %d (%+d)", first.Tokens, third.Tokens, third.Tokens-first.Tokens)) ||
		!strings.Contains(diff, "L6_history       allocated") {
		t.Errorf("diff:\n%s", diff)
	}
	if same := e.ok("", args("window", "diff", "1", "2")...); !strings.HasPrefix(same, "snapshot 1 ("+first.Snapshot[:12]+") and snapshot 2 (") {
		t.Errorf("a diff of one body:\n%s", same)
	}
	status = e.ok("", args("window", "status")...)
	if !strings.Contains(status, "latest turn: snapshot 3 ("+third.Snapshot[:12]+")") || !strings.Contains(status, "the window has not changed since") {
		t.Errorf("status:\n%s", status)
	}
	for _, l := range third.Layers {
		if want := fmt.Sprintf("%-16s %6d of %6d allocated", l.Name, l.Used, l.Allocated); !strings.Contains(status, want) {
			t.Errorf("status lacks %q:\n%s", want, status)
		}
	}
	var st struct {
		Window    struct{ Agent string }
		Assembled struct{ Snapshot string }
	}
	if err := json.Unmarshal([]byte(e.ok("", args("window", "status", "--json")...)), &st); err != nil || st.Window.Agent != "claude" || st.Assembled.Snapshot != third.Snapshot {
		t.Errorf("status --json: %+v, %v", st, err)
	}

	// Bad input.
	e.fail("", 2, "is not a snapshot hash", args("window", "snapshot", "xyz")...)
	e.fail("", 1, "no snapshot 9", args("window", "snapshot", "9")...)
	e.fail("", 2, "limit is 5000", args("window", "snapshots", "--limit", "5000")...)
	e.fail("", 2, "window diff takes one or two snapshots", args("window", "diff")...)
	e.fail("", 2, "window snapshot takes one snapshot", args("window", "snapshot", "1", "2")...)
	e.fail("", 2, `format "xml"`, args("window", "snapshot", "--format", "xml")...)
	e.fail("", 1, `no window for agent "claude" of session "s9"`, "window", "snapshots", "--session", "s9", "--agent", "claude")
	e.fail("", 1, `session "s9" has no window`, "window", "snapshots", "--session", "s9")

	// Forgetting the session takes its snapshots.
	forgot := e.ok("", "forget", "session", "s1", "--yes")
	if !regexp.MustCompile(`\n  snapshots +3\n`).MatchString(forgot) {
		t.Errorf("forget:\n%s", forgot)
	}
	e.fail("", 1, `session "s1" has no window`, "window", "snapshots", "--session", "s1")
}

// TestSameShape: a replay's check tells shapes apart by every field,
// the Responses API's included.
func TestSameShape(t *testing.T) {
	base := func() *window.Shape {
		return &window.Shape{Vendor: window.Responses, Extra: map[string]json.RawMessage{"id": json.RawMessage(`"msg_1"`)},
			Parts: []window.Part{{Type: "input_text", Extra: map[string]json.RawMessage{"annotations": json.RawMessage(`[]`)}}}}
	}
	if !sameShape(base(), base()) || !sameShape(nil, nil) || sameShape(base(), nil) {
		t.Fatal("equal shapes differ")
	}
	for name, change := range map[string]func(*window.Shape){
		"item":       func(s *window.Shape) { s.Item = "function_call_output" },
		"no type":    func(s *window.Shape) { s.NoType = true },
		"extra":      func(s *window.Shape) { s.Extra["id"] = json.RawMessage(`"msg_2"`) },
		"parts":      func(s *window.Shape) { s.Parts = append(s.Parts, window.Part{}) },
		"part type":  func(s *window.Shape) { s.Parts[0].Type = "output_text" },
		"part extra": func(s *window.Shape) { s.Parts[0].Extra = nil },
	} {
		other := base()
		change(other)
		if sameShape(base(), other) {
			t.Errorf("%s: shapes that differ are the same", name)
		}
	}
}

// TestCLI_WindowConfigCheckedAtLoad: a mistake in the [window] section of
// a project's config is refused when the config is loaded, naming its key,
// by any command, not at the first window operation; nothing is stored.
func TestCLI_WindowConfigCheckedAtLoad(t *testing.T) {
	e := newEnv(t)
	conf := filepath.Join(e.project, ".engram.toml")
	for _, c := range []struct{ toml, want string }{
		{"[window]\nsafety = -0.5\n", "window.safety"},
		{"[window]\nmax_ref_tokens = -1\n", "window.max_ref_tokens"},
		{"[window]\nsafety = 0.6\nmargin = 0.5\n", "window.safety"},
		{"[window.roles.reviewer]\nstrategy = \"recency\"\nevict = 0.5\ntarget = 0.8\n", "window.roles.reviewer"},
		{"[window.roles.reviewer]\nstrategy = \"newest\"\nevict = 0.8\ntarget = 0.5\n", `strategy "newest"`},
		{"[window.roles.reviewer]\nstrategy = \"recency\"\nevict = 0.8\ntarget = 0.5\nkeep_turns = -2\n", "window.roles.reviewer"},
		{"[window.roles.reviewer]\nstrategy = \"recency\"\nevict = 0.8\ntarget = 0.5\npreserve = [\"user_promt\"]\n", `preserve: "user_promt" is not a content type`},
	} {
		if err := os.WriteFile(conf, []byte(c.toml), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := e.run(`{"session":"s1","role":"user","content":"kept nowhere"}`+"\n", "add")
		if code != 1 || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("config %q: add gave exit %d, stdout %q, stderr %q; want exit 1 naming %q", c.toml, code, out, errOut, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(e.vars["ENGRAM_DATA_DIR"], "projects")); !os.IsNotExist(err) {
		t.Errorf("a refused config made a store (%v)", err)
	}
	// Corrected, the same command stores.
	if err := os.WriteFile(conf, []byte("[window.roles.reviewer]\nstrategy = \"recency\"\nevict = 0.8\ntarget = 0.5\npreserve = [\"user_prompt\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.ok(`{"session":"s1","role":"user","content":"kept"}`+"\n", "add")
	e.ok("", "window", "open", "--session", "s1", "--agent", "claude", "--role", "reviewer", "--limit", "3000")
}
