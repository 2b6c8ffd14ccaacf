package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// anthropicTurn is a turn of a coding agent in Anthropic's shape: a
// prompt, a tool call, its result and an answer; about 470 tokens.
func anthropicTurn(i int) []string {
	body := fmt.Sprintf("package pkg%d\n\n// handler%d serves requests.\n%s", i, i, strings.Repeat("\t// a line of the body, ünïcödé ✓\n", 40))
	result, _ := json.Marshal(body)
	return []string{
		fmt.Sprintf(`{"role":"user","content":"Step %d: read internal/pkg%d/file.go"}`, i, i),
		fmt.Sprintf(`{"role":"assistant","content":[{"type":"text","text":"Reading it."},{"type":"tool_use","id":"call-%d","name":"read_file","input":{"path": "internal/pkg%d/file.go"}}]}`, i, i),
		fmt.Sprintf(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"call-%d","content":%s}]}`, i, result),
		fmt.Sprintf(`{"role":"assistant","content":"handler%d serves requests."}`, i),
	}
}

func appendBody(format string, msgs ...string) string {
	return fmt.Sprintf(`{"format":%q,"messages":[%s]}`, format, strings.Join(msgs, ","))
}

// sameJSON reports whether two JSON texts are the same value.
func sameJSON(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Fatalf("%v: %s", err, a)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return reflect.DeepEqual(x, y)
}

// expanded returns a window's context in format with every marker
// replaced by the messages GET /v1/refs gives for it.
func (c client) expanded(t *testing.T, w, format string) []string {
	t.Helper()
	_, b := c.want(200, "GET", w+"/context?format="+format, "", "")
	var ctxOut struct {
		Items []struct {
			Message json.RawMessage
			RefID   string `json:"ref_id"`
		}
	}
	if err := json.Unmarshal([]byte(b), &ctxOut); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, it := range ctxOut.Items {
		if it.RefID == "" {
			if len(it.Message) > 0 { // else an excerpt of messages under a marker
				out = append(out, string(it.Message))
			}
			continue
		}
		_, b := c.want(200, "GET", "/v1/refs/"+it.RefID+"?format="+format, "", `"ref_id":"`+it.RefID)
		checkJSON(t, "expand", b)
		var exp struct{ Messages []json.RawMessage }
		if err := json.Unmarshal([]byte(b), &exp); err != nil {
			t.Fatal(err)
		}
		for _, m := range exp.Messages {
			out = append(out, string(m))
		}
	}
	return out
}

// TestWindows drives a window through the JSON API as a harness would:
// open it, append turns in Anthropic's shape until it evicts, read its
// context with the markers, and expand a marker back to the very
// messages, by GET /v1/refs and by POST /v1/retrieve with the marker.
// What was appended is found by the history search and the session's
// turns.
func TestWindows(t *testing.T) {
	eng := newEngine(t)
	// References of at most 1,000 tokens ([window] max_ref_tokens), so
	// that one fits back into this small window.
	cat, err := tokens.NewCatalog()
	if err != nil {
		t.Fatal(err)
	}
	m := window.NewManager(eng, cat)
	if err := m.Configure(window.Config{Defaults: window.Defaults{MaxRefTokens: 1000}}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Handler(eng, Options{Token: "tok", Windows: m}))
	defer srv.Close()
	c := client{t, srv.URL}
	const w = "/v1/windows/s1/claude"

	c.want(200, "GET", "/v1/windows", "", `{"windows":[]}`)
	c.want(404, "GET", w, "", "no window for agent")
	c.want(404, "POST", w+"/messages", appendBody("anthropic", anthropicTurn(0)...), "open it first")
	_, b := c.want(200, "PUT", w, `{"limit":3000,"output":200,"safety":100}`, `"budget":2430`)
	checkJSON(t, "PUT "+w, b)
	c.want(201, "POST", w+"/messages", `{"messages":[{"role":"system","content":"You are a careful engineer."}]}`, `"positions":[0]`)

	var sent [][]string
	var evicted []struct {
		ID, Marker string
		From, To   int
	}
	for i := range 8 {
		turn := anthropicTurn(i)
		sent = append(sent, turn)
		_, b := c.want(201, "POST", w+"/messages", appendBody("anthropic", turn...), `"positions":[`)
		var out struct {
			Window  struct{ Used, Budget int }
			Evicted []struct {
				ID, Marker string
				From, To   int
			}
		}
		if err := json.Unmarshal([]byte(b), &out); err != nil {
			t.Fatal(err)
		}
		evicted = append(evicted, out.Evicted...)
		checkJSON(t, "append", b)
	}
	if len(evicted) == 0 {
		t.Fatal("eight turns of about 470 tokens in a 2,430-token window evicted nothing")
	}
	_, b = c.want(200, "GET", w, "", `"strategy":"recency"`)
	checkJSON(t, "GET "+w, b)
	_, b = c.want(200, "GET", "/v1/windows?session=s1", "", `"agent":"claude"`)
	checkJSON(t, "GET /v1/windows", b)

	// The context opens with the system prompt; with every marker in it
	// expanded (GET /v1/refs), it is the conversation sent, message for
	// message: nothing was lost, nothing moved.
	_, b = c.want(200, "GET", w+"/context?format=anthropic", "", `"format":"anthropic"`)
	checkJSON(t, "context", b)
	if !strings.Contains(b, `"marker":"[CTX-REF:`) {
		t.Fatalf("the context holds no marker: %s", b)
	}
	whole := c.expanded(t, w, "anthropic")
	want := append([]string{`{"role":"system","content":"You are a careful engineer."}`}, slices.Concat(sent...)...)
	if len(whole) != len(want) {
		t.Fatalf("the context, expanded, holds %d messages; %d were sent", len(whole), len(want))
	}
	for i := range want {
		if !sameJSON(t, whole[i], want[i]) {
			t.Errorf("message %d: %s, want %s", i, whole[i], want[i])
		}
	}

	// retrieve_context's route reads a marker's content byte for byte.
	first := evicted[0]
	marker, _ := json.Marshal(first.Marker)
	_, b = c.want(200, "POST", "/v1/retrieve", fmt.Sprintf(`{"ref_id":%s,"max_tokens":8000}`, marker), `"items":[`)
	wantBody := fmt.Sprintf("package pkg0\n\n// handler0 serves requests.\n%s", strings.Repeat("\t// a line of the body, ünïcödé ✓\n", 40))
	var ret struct{ Items []struct{ Content string } }
	if err := json.Unmarshal([]byte(b), &ret); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, it := range ret.Items {
		found = found || it.Content == wantBody
	}
	if !found {
		t.Errorf("POST /v1/retrieve with the marker: the tool result is not among %d items byte for byte", len(ret.Items))
	}

	// What went through the window is the session's: history search and
	// turns find it.
	c.want(200, "GET", "/v1/history?q=handler3+serves+requests&session=s1", "", "handler3 serves requests")
	c.want(200, "GET", "/v1/sessions/s1/turns?from=1&to=3", "", "Step 0: read internal/pkg0/file.go")

	// Unknown references and formats.
	c.want(404, "GET", "/v1/refs/r0000000000000000", "", "no reference r0000000000000000")
	c.want(400, "GET", "/v1/refs/"+first.ID+"?format=xml", "", `format \"xml\"`)
	c.want(400, "GET", w+"/context?format=xml", "", `format \"xml\"`)

	// Re-admission: a marker of the context comes back into the window,
	// in its place; the marker no longer stands in the context, and the
	// context expanded is still the conversation sent. Wrong references
	// get clear errors; one too large for the window is a conflict.
	c.want(400, "POST", w+"/readmit", `{}`, "ref_id is required")
	c.want(404, "POST", w+"/readmit", `{"ref_id":"r0000000000000000"}`, "no reference r0000000000000000")
	c.want(400, "POST", w+"/readmit", `{"ref_id":"[CTX-REF:"}`, "ref_id:")
	c.want(400, "POST", w+"/readmit", `{"ref_id":"x","agent":"other"}`, "the body names window")
	_, b = c.want(200, "GET", w+"/context", "", `"ref_id":"`)
	var ctxOut struct {
		Items []struct {
			RefID string `json:"ref_id"`
		}
	}
	if err := json.Unmarshal([]byte(b), &ctxOut); err != nil {
		t.Fatal(err)
	}
	var ref string
	for _, it := range slices.Backward(ctxOut.Items) {
		if it.RefID != "" {
			ref = it.RefID
			break
		}
	}
	st, _, b := c.do("POST", w+"/readmit", `{"ref_id":"`+ref+`"}`)
	switch st {
	case 200:
		checkJSON(t, "readmit", b)
		if _, ctxNow := c.want(200, "GET", w+"/context", "", ""); strings.Contains(ctxNow, `"ref_id":"`+ref+`"`) {
			t.Errorf("the re-admitted reference %s still stands in the context", ref)
		}
		if whole := c.expanded(t, w, "anthropic"); len(whole) != len(want) {
			t.Errorf("after the re-admission, the context expanded holds %d messages; %d were sent", len(whole), len(want))
		}
		c.want(409, "POST", w+"/readmit", `{"ref_id":"`+ref+`"}`, "in the window already")
	case 409:
		t.Errorf("the newest reference (%s, of at most 1,000 tokens) does not fit a 2,430-token window: %s", ref, b)
	default:
		t.Errorf("readmit %s: HTTP %d %s", ref, st, b)
	}
	c.want(200, "PUT", w, `{"limit":500,"output":10,"safety":10}`, `"budget":432`)
	_, b = c.want(200, "GET", w+"/context", "", "")
	if err := json.Unmarshal([]byte(b), &ctxOut); err != nil {
		t.Fatal(err)
	}
	big, most := "", 0
	for _, it := range ctxOut.Items {
		if it.RefID == "" {
			continue
		}
		_, b := c.want(200, "GET", "/v1/refs/"+it.RefID, "", "")
		var exp struct{ Tokens int }
		if err := json.Unmarshal([]byte(b), &exp); err != nil {
			t.Fatal(err)
		}
		if exp.Tokens > most {
			big, most = it.RefID, exp.Tokens
		}
	}
	if most <= 432 {
		t.Fatalf("no reference of the 432-token window is larger than it (the largest: %d tokens)", most)
	}
	c.want(409, "POST", w+"/readmit", `{"ref_id":"`+big+`"}`, "no room in the window")
}

// TestWindowsBadInput: every refusal is a 4xx with a JSON body that names
// the problem, and stores nothing, in the window or the content store.
func TestWindowsBadInput(t *testing.T) {
	eng := newEngine(t)
	srv := httptest.NewServer(Handler(eng, Options{Token: "tok", MaxBodyBytes: 256 << 10}))
	defer srv.Close()
	c := client{t, srv.URL}
	ctx := context.Background()
	const w = "/v1/windows/s1/claude"

	c.want(400, "PUT", w, `{}`, "a window needs a model or a context limit")
	c.want(400, "PUT", w, `{"model":"no-such-model"}`, `unknown model \"no-such-model\"`)
	c.want(400, "PUT", w, `{"limit":10}`, "limit is 10; it must be from 256")
	c.want(400, "PUT", w, `{"limit":3000,"session":"s2"}`, "the body names window s2/, the path s1/claude")
	c.want(400, "PUT", w, `{"limit":3000,"colour":"red"}`, "unknown field")
	c.want(404, "GET", w, "", "no window")
	c.want(200, "PUT", w, `{"limit":3000,"output":200,"safety":100}`, `"budget":2430`)
	c.want(201, "POST", w+"/messages", appendBody("anthropic", anthropicTurn(0)...), `"positions":[0,1,2,3]`)
	before, err := eng.Store().Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, status := c.want(200, "GET", w, "", `"messages":4`)

	many := make([]string, 1001)
	for i := range many {
		many[i] = `{"role":"user","content":"x"}`
	}
	for _, tc := range []struct{ name, body, want string }{
		{"a result with no call", appendBody("anthropic", `{"role":"user","content":"ok"}`,
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"call-nowhere","content":"orphan output"}]}`),
			`message 1: a result for tool call \"call-nowhere\", which no earlier message makes`},
		{"a call answered twice", appendBody("anthropic", `{"role":"user","content":[{"type":"tool_result","tool_use_id":"call-0","content":"again"}]}`),
			`message 0: tool call \"call-0\" is answered twice`},
		{"an unknown role", appendBody("openai", `{"role":"user","content":"fine"}`, `{"role":"wizard","content":"orphan output"}`),
			`message 1: openai message: role \"wizard\"`},
		{"a call from the user", appendBody("engram", `{"role":"user","blocks":[{"type":"tool_use","id":"c9","name":"x","input":{}}]}`),
			"message 0: block 0: a tool call in a user message"},
		{"not an object", `{"messages":[42]}`, "message 0: anthropic"},
		{"content and blocks", appendBody("engram", `{"role":"user","content":"orphan output","blocks":[{"type":"text","text":"y"}]}`),
			"message 0: give content or blocks, not both"},
		{"an unknown field", appendBody("engram", `{"role":"user","content":"orphan output","colour":"red"}`), `unknown field \"colour\"`},
		{"an unknown format", appendBody("xml", `{"role":"user","content":"orphan output"}`), `format \"xml\": want engram`},
		{"too many", appendBody("engram", many...), "1001 messages in one append; at most 1000"},
		{"none", `{"messages":[]}`, "no messages: an append takes 1 to 1000"},
		{"no list", `{}`, "no messages"},
		{"another window in the body", `{"agent":"other","messages":[{"role":"user","content":"orphan output"}]}`, "the body names window"},
		// encoding/json keeps a member's last value and drops the others.
		{"a member twice in a message", appendBody("engram", `{"role":"user","content":"lost","content":"orphan output"}`),
			`the member \"content\" is given twice in one object (again at byte offset 63)`},
		{"a name escaped", appendBody("anthropic", `{"role":"user","content":[{"type":"text","text":"lost","te\u0078t":"orphan output"}]}`),
			`the member \"text\" is given twice`},
		{"a name in another case", appendBody("engram", `{"role":"user","content":"lost","Content":"orphan output"}`),
			`message 0: unknown field \"Content\" (the field is \"content\")`},
		{"the body's list twice", `{"messages":[{"role":"user","content":"lost"}],"messages":[{"role":"user","content":"orphan output"}]}`,
			`the member \"messages\" is given twice in one object (again at byte offset 47)`},
	} {
		if tc.name == "not an object" {
			tc.body = `{"format":"anthropic","messages":[42]}`
		}
		c.want(400, "POST", w+"/messages", tc.body, tc.want)
	}
	// A body over the server's cap.
	big, _ := json.Marshal(strings.Repeat("orphan output ", 30_000))
	c.want(413, "POST", w+"/messages", fmt.Sprintf(`{"messages":[{"role":"user","content":%s}]}`, big), "over")
	// Not JSON.
	if st, _, b := c.do("POST", w+"/messages", `{"messages":[]}`, "Content-Type", "text/plain"); st != 415 {
		t.Errorf("a text/plain append: HTTP %d %s", st, b)
	}

	after, err := eng.Store().Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Entries != before.Entries || after.Occurrences != before.Occurrences {
		t.Errorf("refused appends stored something: %d entries and %d occurrences, before %d and %d",
			after.Entries, after.Occurrences, before.Entries, before.Occurrences)
	}
	if _, b := c.want(200, "GET", w, "", `"messages":4`); b != status {
		t.Errorf("the window changed:\n%s\nwas\n%s", b, status)
	}
	c.want(200, "GET", "/v1/history?q=orphan+output&session=s1", "", "nothing found")
}

// TestWindowsOversized: a message larger than the window's whole budget
// is not refused: it is stored whole, and can be read back whole.
func TestWindowsOversized(t *testing.T) {
	eng := newEngine(t)
	srv := httptest.NewServer(Handler(eng, Options{Token: "tok"}))
	defer srv.Close()
	c := client{t, srv.URL}
	const w = "/v1/windows/s1/claude"
	c.want(200, "PUT", w, `{"limit":3000,"output":200,"safety":100}`, `"budget":2430`)
	c.want(201, "POST", w+"/messages", appendBody("anthropic", anthropicTurn(0)...), "")
	huge := strings.Repeat("FAIL TestUploadRetry (2.00s): context deadline exceeded, attempt 7 of 9\n", 3000) // ~60k tokens
	text, _ := json.Marshal(huge)
	_, b := c.want(201, "POST", w+"/messages", appendBody("anthropic",
		`{"role":"user","content":"Run the tests."}`,
		`{"role":"assistant","content":[{"type":"tool_use","id":"call-big","name":"bash","input":{"command":"go test ./..."}}]}`,
		fmt.Sprintf(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"call-big","content":%s}]}`, text)), `"positions":[4,5,6]`)
	var out struct {
		Window struct{ Used, Budget, Messages int }
	}
	if err := json.Unmarshal([]byte(b), &out); err != nil {
		t.Fatal(err)
	}
	// What the window shows of it is the window's business (issue 23: its
	// head, tail and a marker); it is never over its budget, and the
	// message is one expansion away, whole.
	t.Logf("after a %d-byte tool result: %d of %d tokens, %d messages in the window", len(huge), out.Window.Used, out.Window.Budget, out.Window.Messages)
	if out.Window.Used > out.Window.Budget {
		t.Errorf("the window holds %d tokens of its %d", out.Window.Used, out.Window.Budget)
	}
	whole := c.expanded(t, w, "anthropic")
	if len(whole) != 7 || !strings.Contains(whole[6], string(text)) {
		t.Errorf("the context, expanded, does not hold the tool result whole (%d messages)", len(whole))
	}
	if st, err := eng.Store().Stats(context.Background()); err != nil || st.ContentBytes < int64(len(huge)) {
		t.Errorf("the store holds %d bytes of content (%v), less than the tool result's %d", st.ContentBytes, err, len(huge))
	}
}

// TestWindowsAgentKeys: an agent's key opens and appends to its own
// window only, in its own session; another agent's window or another
// session's is refused (403) and audited; reading any window is allowed.
func TestWindowsAgentKeys(t *testing.T) {
	eng := newEngine(t)
	srv := httptest.NewServer(Handler(eng, Options{Token: tok}))
	defer srv.Close()
	alice := agentKey(t, srv.URL, "alice", "a1")
	bob := agentKey(t, srv.URL, "bob", "b1")
	carol := agentKey(t, srv.URL, "alice", "c1")
	_ = agentKey(t, srv.URL, "alice", "c1-2") // another agent, under the name of carol's next instance
	as := func(key string) []string {
		return []string{"Authorization", "Bearer " + key, "Content-Type", "application/json"}
	}
	msg := `{"messages":[{"role":"user","content":"hello from a test"}]}`
	for _, tc := range []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
	}{
		{"open own", "PUT", "/v1/windows/alice/a1", `{"limit":8000}`, as(alice), 200},
		{"append own", "POST", "/v1/windows/alice/a1/messages", msg, as(alice), 201},
		{"open another agent's", "PUT", "/v1/windows/alice/claude", `{"limit":8000}`, as(alice), 403},
		{"open in another session", "PUT", "/v1/windows/bob/a1", `{"limit":8000}`, as(alice), 403},
		{"bob opens his", "PUT", "/v1/windows/bob/b1", `{"limit":8000}`, as(bob), 200},
		{"append to another's", "POST", "/v1/windows/alice/a1/messages", msg, as(bob), 403},
		{"read another's", "GET", "/v1/windows/alice/a1", "", as(bob), 200},
		{"read another's context", "GET", "/v1/windows/alice/a1/context", "", as(bob), 200},
		{"list", "GET", "/v1/windows", "", as(bob), 200},
		{"operator anywhere", "PUT", "/v1/windows/alice/claude", `{"limit":8000}`, withToken("Content-Type", "application/json"), 200},
		{"readmit into another's", "POST", "/v1/windows/alice/a1/readmit", `{"ref_id":"r0000000000000000"}`, as(bob), 403},
		{"hand off another's", "POST", "/v1/windows/alice/a1/handoff", `{}`, as(bob), 403},
		{"hand off into another agent's window", "POST", "/v1/windows/alice/a1/handoff", `{"to":"b1"}`, as(alice), 403},
		{"hand off own", "POST", "/v1/windows/alice/a1/handoff", `{"to":"a1-2"}`, as(alice), 201},
		{"carol opens hers", "PUT", "/v1/windows/alice/c1", `{"limit":8000}`, as(carol), 200},
		{"carol appends", "POST", "/v1/windows/alice/c1/messages", msg, as(carol), 201},
		{"hand off into a registered agent's window under the next name", "POST", "/v1/windows/alice/c1/handoff", `{}`, as(carol), 403},
	} {
		st, _, b := raw(t, tc.method, srv.URL+tc.path, tc.body, tc.hdr...)
		if st != tc.status {
			t.Errorf("%s: HTTP %d %s, want %d", tc.name, st, strings.TrimSpace(b), tc.status)
		}
		// A refusal within the agent's own session names what was refused.
		if st == http.StatusForbidden && strings.Contains(b, "cannot write to session alice") && strings.Contains(b, "belongs to session alice") {
			t.Errorf("%s: the refusal names the agent's own session: %s", tc.name, b)
		}
	}
	st, _, b := raw(t, "GET", srv.URL+"/v1/windows/alice/a1", "", withToken()...)
	if st != 200 || !strings.Contains(b, `"messages":1`) {
		t.Errorf("alice's window after bob's attempt: HTTP %d %s", st, b)
	}
	if st, _, b := raw(t, "GET", srv.URL+"/v1/windows/alice/b1", "", withToken()...); st != http.StatusNotFound {
		t.Errorf("the window a refused handoff named: HTTP %d %s", st, b)
	}
	evs, err := eng.Store().ArchiveEvents(context.Background(), -1, 100)
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for _, e := range evs {
		if e.Type == "isolation_violation" {
			refused++
		}
	}
	if refused != 7 {
		t.Errorf("%d refusals audited, want 7", refused)
	}
}

// TestWindowsConcurrent: clients appending to one window at once, through
// one server and its one window Manager, lose nothing and never interleave
// a turn.
func TestWindowsConcurrent(t *testing.T) {
	c := windowServer(t, newEngine(t), Options{})
	const w = "/v1/windows/s1/claude"
	c.want(200, "PUT", w, `{"limit":3000,"output":200,"safety":100}`, "")
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 3 {
				turn := anthropicTurn(10*g + i)
				if st, _, b := c.do("POST", w+"/messages", appendBody("anthropic", turn...)); st != 201 {
					t.Errorf("client %d, turn %d: HTTP %d %s", g, i, st, b)
				}
			}
		})
	}
	wg.Wait()
	whole := c.expanded(t, w, "anthropic")
	if len(whole) != 4*3*4 {
		t.Fatalf("%d messages in the window and its references, want %d", len(whole), 4*3*4)
	}
	seen := map[string]bool{}
	for i := 0; i < len(whole); i += 4 {
		var first struct{ Content string }
		if err := json.Unmarshal([]byte(whole[i]), &first); err != nil || !strings.HasPrefix(first.Content, "Step ") {
			t.Fatalf("message %d does not open a turn: %s", i, whole[i])
		}
		var n int
		if _, err := fmt.Sscanf(first.Content, "Step %d:", &n); err != nil || seen[first.Content] {
			t.Fatalf("message %d: %q", i, first.Content)
		}
		seen[first.Content] = true
		for j, m := range anthropicTurn(n) {
			if !sameJSON(t, whole[i+j], m) {
				t.Errorf("turn %d is not whole at message %d: %s", n, i+j, whole[i+j])
			}
		}
	}
}

// TestWindowsAssemble: a turn's context through the JSON API, in
// Anthropic's shape, within the budget less the tools; bad input is a
// 4xx naming the problem.
func TestWindowsAssemble(t *testing.T) {
	eng := newEngine(t)
	srv := httptest.NewServer(Handler(eng, Options{Token: "tok"}))
	defer srv.Close()
	c := client{t, srv.URL}
	const w = "/v1/windows/s1/claude"
	c.want(404, "POST", w+"/assemble", `{"message":"hi"}`, "no window for agent")
	c.want(200, "PUT", w, `{"limit":3000,"output":200,"safety":100}`, `"budget":2430`)
	c.want(201, "POST", w+"/messages", `{"messages":[{"role":"system","content":"You are a careful engineer."}]}`, "")
	for i := range 8 {
		c.want(201, "POST", w+"/messages", appendBody("anthropic", anthropicTurn(i)...), "")
	}
	_, b := c.want(200, "POST", w+"/assemble", `{"message":"Why does handler2 serve requests slowly?","tools":300,"format":"anthropic"}`, `"format":"anthropic"`)
	checkJSON(t, "assemble", b)
	var out struct {
		Messages []json.RawMessage
		Budget   int
		Tokens   int
		Layers   []struct {
			Name            string
			Allocated, Used int
		}
		History struct{ Messages, Shown, Refs int }
	}
	if err := json.Unmarshal([]byte(b), &out); err != nil {
		t.Fatal(err)
	}
	if out.Budget != 2430-300 || out.Tokens > out.Budget || len(out.Layers) == 0 || out.History.Refs == 0 {
		t.Errorf("assembled: budget %d, %d tokens, layers %+v, history %+v", out.Budget, out.Tokens, out.Layers, out.History)
	}
	// Each layer within its allocation, but retrieval, which takes what
	// the others left of theirs too.
	left := out.Budget
	for _, l := range out.Layers {
		if l.Name != "L5_retrieval" {
			left -= l.Used
			if l.Used > l.Allocated {
				t.Errorf("layer %s used %d of %d", l.Name, l.Used, l.Allocated)
			}
		}
	}
	for _, l := range out.Layers {
		if l.Name == "L5_retrieval" && l.Used > left {
			t.Errorf("retrieval used %d, %d were left", l.Used, left)
		}
	}
	if last := string(out.Messages[len(out.Messages)-1]); !strings.Contains(last, "Why does handler2 serve requests slowly?") || !strings.Contains(last, `"role":"user"`) {
		t.Errorf("the last message: %s", last)
	}
	c.want(400, "POST", w+"/assemble", `{"message":"hi","tools":5000}`, "tools")
	c.want(400, "POST", w+"/assemble", `{"message":"hi","format":"xml"}`, `format \"xml\"`)
	c.want(400, "POST", w+"/assemble", `{}`, "no message for the turn")
	c.want(400, "POST", w+"/assemble", `{"message":"hi","retrieval":"sometimes"}`, `retrieval \"sometimes\": want auto`)
	c.want(400, "POST", w+"/assemble", `{"message":"hi","retrieval":"on","no_retrieval":true}`, "contradict")
	c.want(400, "POST", w+"/assemble", `{"message":"hi","briefing":"the task","no_briefing":true}`, "briefing and no_briefing contradict")
	c.want(200, "POST", w+"/assemble", `{"message":"hi","no_retrieval":true}`, `"retrieval":"off"`)
	c.want(200, "POST", w+"/assemble", `{"message":"Why does handler2 serve requests slowly?"}`, `"retrieval":"on"`)
}

// TestWindowsAppendKey: an append sent again under its Idempotency-Key
// (or body key) is answered 200, replayed, with the first append's
// places, and appended once; the key with other messages is a 409; a
// bad key, two keys or keys that disagree are a 400, nothing written.
func TestWindowsAppendKey(t *testing.T) {
	c := windowServer(t, newEngine(t), Options{})
	const w = "/v1/windows/s1/claude"
	c.want(200, "PUT", w, `{"limit":3000,"output":200,"safety":100}`, `"budget":2430`)
	turn := appendBody("anthropic", anthropicTurn(0)...)
	h, _ := c.want(201, "POST", w+"/messages", turn, `"positions":[0,1,2,3]`, "Idempotency-Key", "turn-0")
	if h.Get("Idempotent-Replayed") != "" {
		t.Errorf("a first append says it was replayed")
	}
	h, b := c.want(200, "POST", w+"/messages", turn, `"positions":[0,1,2,3]`, "Idempotency-Key", "turn-0")
	if h.Get("Idempotent-Replayed") != "true" || !strings.Contains(b, `"replayed":true`) || !strings.Contains(b, `"messages":4`) {
		t.Errorf("the retry: %s, Idempotent-Replayed %q", b, h.Get("Idempotent-Replayed"))
	}
	// The body's key is the same key.
	keyed := fmt.Sprintf(`{"format":"anthropic","key":"turn-0","messages":[%s]}`, strings.Join(anthropicTurn(0), ","))
	c.want(200, "POST", w+"/messages", keyed, `"replayed":true`)
	c.want(200, "POST", w+"/messages", keyed, `"replayed":true`, "Idempotency-Key", "turn-0")
	c.want(409, "POST", w+"/messages", appendBody("anthropic", anthropicTurn(1)...), `append key \"turn-0\": was used before for other messages`, "Idempotency-Key", "turn-0")
	c.want(400, "POST", w+"/messages", keyed, "Idempotency-Key", "Idempotency-Key", "turn-1")
	c.want(400, "POST", w+"/messages", turn, "printable ASCII", "Idempotency-Key", "tür")
	c.want(400, "POST", w+"/messages", turn, "Idempotency-Key is empty", "Idempotency-Key", " ")
	// The draft's quoted form is the same key.
	c.want(200, "POST", w+"/messages", turn, `"replayed":true`, "Idempotency-Key", `"turn-0"`)
	c.want(400, "POST", w+"/messages", strings.Replace(keyed, `"turn-0"`, `"`+strings.Repeat("k", 256)+`"`, 1), "1 to 255 bytes")
	req, err := http.NewRequest("POST", c.url+w+"/messages", strings.NewReader(turn))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tok")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Add("Idempotency-Key", "turn-5")
	req.Header.Add("Idempotency-Key", "turn-6")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("two Idempotency-Key headers: HTTP %d, want 400", resp.StatusCode)
	}
	c.want(201, "POST", w+"/messages", appendBody("anthropic", anthropicTurn(1)...), `"positions":[4,5,6,7]`, "Idempotency-Key", "turn-1")
	c.want(200, "GET", w, "", `"messages":8`)
}

// frozenStore stops answering window appends (a database host frozen).
type frozenStore struct{ store.Store }

func (s frozenStore) AppendWindow(ctx context.Context, _ store.WindowKey, _ store.WindowAppend, _ store.Evictor) (store.Window, []store.WindowItem, []store.Eviction, error) {
	<-ctx.Done()
	return store.Window{}, nil, nil, ctx.Err()
}

// TestRequestTimeout: a request the store does not answer ends at the
// request's deadline with a 503 and Retry-After, rather than holding its
// slot for good.
func TestRequestTimeout(t *testing.T) {
	eng, err := engine.New(frozenStore{sqlitetest.Open(t, sqlite.Options{})}, engine.Options{Embed: engine.EmbedOptions{Provider: "none"}})
	if err != nil {
		t.Fatal(err)
	}
	// The window is opened by a server with no deadline: on a machine
	// under load the opening (its encoding's first load) can itself take
	// longer than the deadline this test gives the append.
	windowServer(t, eng, Options{}).want(200, "PUT", "/v1/windows/s1/claude", `{"limit":3000}`, `"budget"`)
	c := windowServer(t, eng, Options{RequestTimeout: 200 * time.Millisecond})
	h, _ := c.want(503, "POST", "/v1/windows/s1/claude/messages", appendBody("anthropic", anthropicTurn(0)...), "no answer in time")
	if h.Get("Retry-After") == "" {
		t.Errorf("a timed-out request without Retry-After")
	}
}

// windowServer serves eng's API with a window Manager, the token "tok"
// and opts, for the test's life.
func windowServer(t *testing.T, eng *engine.Engine, opts Options) client {
	t.Helper()
	cat, err := tokens.NewCatalog()
	if err != nil {
		t.Fatal(err)
	}
	opts.Token, opts.Windows = "tok", window.NewManager(eng, cat)
	srv := httptest.NewServer(Handler(eng, opts))
	t.Cleanup(srv.Close)
	return client{t, srv.URL}
}
