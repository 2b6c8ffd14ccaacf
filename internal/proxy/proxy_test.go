package proxy_test

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/modelserver"
	"github.com/engramhq/engram/internal/proxy"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

type fixture struct {
	p       *proxy.Proxy
	up      *modelserver.Server
	front   *httptest.Server
	eng     *engine.Engine
	windows *window.Manager
}

func newFixture(t *testing.T, opts proxy.Options, steps ...modelserver.Step) *fixture {
	t.Helper()
	return newFixtureOn(t, sqlitetest.Open(t, sqlite.Options{}), opts, steps...)
}

// newFixtureOn is newFixture over the store st.
func newFixtureOn(t *testing.T, st store.Store, opts proxy.Options, steps ...modelserver.Step) *fixture {
	t.Helper()
	up := modelserver.Start(modelserver.Options{Main: steps})
	t.Cleanup(up.Close)
	if opts.Anthropic == "" {
		opts.Anthropic = up.URL()
	}
	if opts.OpenAI == "" {
		opts.OpenAI = up.URL()
	}
	eng, m, p := newProxy(t, st, opts)
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	return &fixture{p: p, up: up, front: front, eng: eng, windows: m}
}

// newProxy stands a proxy over the store st, with its engine and
// windows' Manager, as the command builds them.
func newProxy(t *testing.T, st store.Store, opts proxy.Options) (*engine.Engine, *window.Manager, *proxy.Proxy) {
	t.Helper()
	eng, err := engine.New(st, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cat, err := tokens.NewCatalog()
	if err != nil {
		t.Fatal(err)
	}
	m := window.NewManager(eng, cat)
	p, err := proxy.New(eng, m, opts)
	if err != nil {
		t.Fatal(err)
	}
	return eng, m, p
}

// restart stands a new proxy in front of the same store and upstream,
// as a proxy restarted finds them: it knows of its windows what it reads
// back. Requests go to it from then on.
func (f *fixture) restart(t *testing.T) *proxy.Proxy {
	t.Helper()
	cat, err := tokens.NewCatalog()
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.New(f.eng, window.NewManager(f.eng, cat), proxy.Options{Anthropic: f.up.URL(), OpenAI: f.up.URL()})
	if err != nil {
		t.Fatal(err)
	}
	f.front = httptest.NewServer(p)
	t.Cleanup(f.front.Close)
	return p
}

func (f *fixture) post(t *testing.T, body string, header map[string]string) *http.Response {
	t.Helper()
	h := map[string]string{"X-Api-Key": "sk-ant-test", "Anthropic-Version": "2023-06-01", "Authorization": ""}
	for k, v := range header {
		h[k] = v
	}
	return f.postTo(t, "/v1/messages", body, h)
}

const claudeUser = `{\"device_id\":\"d1\",\"account_uuid\":\"\",\"session_id\":\"6f6fe473-07c4-42c5-8087-ddd2ffb878a6\"}`

// A conversation through the proxy: requests and answers pass unchanged,
// streamed or not; the window takes only the new tail of each resent
// history; the answers are stored as the model sent them.
func TestProxy_Conversation(t *testing.T) {
	f := newFixture(t, proxy.Options{},
		modelserver.Say("Hello there."),
		modelserver.Reply(modelserver.Text("Reading it."), modelserver.ToolUse("Read", map[string]any{"file_path": "/p/notes.txt"})),
		modelserver.Say("The word is PAPAYA."),
	)
	ctx := t.Context()
	first := `{"model":"claude-sonnet-4-5","max_tokens":100,"system":"You are terse.","metadata":{"user_id":"` + claudeUser + `"},` +
		`"messages":[{"role":"user","content":"hi"}]}`
	resp := f.post(t, first, nil)
	var out struct {
		ID      string `json:"id"`
		Content []struct{ Type, Text string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || out.Content[0].Text != "Hello there." {
		t.Fatalf("first answer: %d %+v %v", resp.StatusCode, out, err)
	}
	key := store.WindowKey{SessionID: "6f6fe473-07c4-42c5-8087-ddd2ffb878a6", AgentID: "claude-code"}
	f.p.Wait()
	_, held, _, err := f.windows.Messages(ctx, key)
	if err != nil || len(held) != 2 || held[0].Role != window.RoleSystem {
		t.Fatalf("the window after the first request: %d messages, %v; want the system prompt and the prompt", len(held), err)
	}

	// The second turn, streamed: the harness resends the history with the
	// answer as it keeps it, and a new prompt.
	second := `{"model":"claude-sonnet-4-5","max_tokens":100,"stream":true,"system":"You are terse.","metadata":{"user_id":"` + claudeUser + `"},` +
		`"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"Hello there."}]},{"role":"user","content":"read notes.txt"}]}`
	resp = f.post(t, second, nil)
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("stream: %d %s", resp.StatusCode, ct)
	}
	var events []string
	sc := bufio.NewScanner(resp.Body)
	var toolID string
	for sc.Scan() {
		if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			events = append(events, ev)
		}
		if strings.Contains(sc.Text(), `"tool_use"`) {
			var d struct {
				ContentBlock struct{ ID string } `json:"content_block"`
			}
			_ = json.Unmarshal([]byte(strings.TrimPrefix(sc.Text(), "data: ")), &d)
			if d.ContentBlock.ID != "" {
				toolID = d.ContentBlock.ID
			}
		}
	}
	if len(events) < 6 || events[0] != "message_start" || events[len(events)-1] != "message_stop" || toolID == "" {
		t.Fatalf("the stream's events: %v (tool %q)", events, toolID)
	}
	if err := f.up.Err(); err != nil {
		t.Fatal(err)
	}
	f.p.Wait()
	_, held, _, err = f.windows.Messages(ctx, key)
	if err != nil || len(held) != 4 {
		t.Fatalf("the window after the second request: %d messages, %v; want 4 (the tail of 2 appended)", len(held), err)
	}
	// The streamed answer, reassembled, is stored: its text and its tool
	// call's input whole.
	f.p.Wait()
	hits, err := f.eng.Store().TurnRange(ctx, key.SessionID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var answers []string
	for _, e := range hits {
		if e.Type == store.AgentResponse && e.AgentID == "claude-code" && strings.HasPrefix(string(e.Content), `{"content"`) {
			answers = append(answers, string(e.Content))
		}
	}
	want := `{"content":[{"text":"Reading it.","type":"text"},{"id":"` + toolID + `","input":{"file_path":"/p/notes.txt"},"name":"Read","type":"tool_use"}],"role":"assistant"}`
	if len(answers) != 2 || answers[1] != want {
		t.Errorf("stored answers:\n%s\nwant the second:\n%s", strings.Join(answers, "\n"), want)
	}

	// A request engram cannot read goes through as it came; the vendor's
	// answer reaches the client verbatim.
	resp = f.post(t, `{"model": "x", "messages": [`, nil)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "invalid_request_error") || strings.Contains(string(body), "engram") {
		t.Errorf("malformed JSON: %d %s; want the upstream's own 400", resp.StatusCode, body)
	}
}

// TestProxy_Refusals: what the proxy refuses (no token, a web page, a
// body over its limit) is answered in the error shape of the API the
// client speaks, Anthropic's Messages or OpenAI's, so that the harness
// shows the message, and with X-Should-Retry: false, which the vendors'
// SDKs and Claude Code obey: the same request would be refused again.
func TestProxy_Refusals(t *testing.T) {
	f := newFixture(t, proxy.Options{Token: "tok", MaxBody: 1 << 10})
	body := `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 2000) + `"}]}`
	openai := map[string]string{"X-Api-Key": "", "Anthropic-Version": ""}
	with := func(h map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range h {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name, path string
		body       string
		header     map[string]string
		status     int
		want       string
		openai     bool
	}{
		{"no token", "/v1/messages", body, nil, http.StatusUnauthorized, "X-Engram-Token", false},
		{"wrong token", "/v1/messages", body, map[string]string{"X-Engram-Token": "nope"}, http.StatusUnauthorized, "X-Engram-Token", false},
		{"a web page", "/v1/messages", body, map[string]string{"X-Engram-Token": "tok", "Origin": "https://evil.example"}, http.StatusForbidden, "web pages", false},
		{"oversize", "/v1/messages", big, map[string]string{"X-Engram-Token": "tok"}, http.StatusRequestEntityTooLarge, "over the proxy's limit", false},
		// The Messages API by its path, with a bearer token only.
		{"messages with a bearer", "/v1/messages", body, with(openai, "X-Engram-Token", "nope"), http.StatusUnauthorized, "X-Engram-Token", false},
		{"responses without a token", "/v1/responses", `{"model":"m","input":"hi"}`, openai, http.StatusUnauthorized, "X-Engram-Token", true},
		{"responses oversize", "/v1/responses", big, with(openai, "X-Engram-Token", "tok"), http.StatusRequestEntityTooLarge, "over the proxy's limit", true},
		{"chat from a web page", "/v1/chat/completions", body, with(openai, "X-Engram-Token", "tok", "Origin", "https://evil.example"), http.StatusForbidden, "web pages", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := map[string]string{"X-Api-Key": "sk-ant-test", "Anthropic-Version": "2023-06-01", "Authorization": ""}
			for k, v := range tc.header {
				h[k] = v
			}
			resp := f.postTo(t, tc.path, tc.body, h)
			b, _ := io.ReadAll(resp.Body)
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(b, &e); err != nil || resp.StatusCode != tc.status || !strings.Contains(e.Error.Message, tc.want) ||
				!strings.HasPrefix(e.Error.Message, "engram proxy: ") || e.Error.Type == "" {
				t.Errorf("%d %s (%v); want %d saying %q", resp.StatusCode, b, err, tc.status, tc.want)
			}
			if tc.openai && (e.Type != "" || !strings.Contains(string(b), `"code":null`)) {
				t.Errorf("%s; want OpenAI's error shape", b)
			}
			if !tc.openai && e.Type != "error" {
				t.Errorf("%s; want Anthropic's error shape", b)
			}
			if got := resp.Header.Get("X-Should-Retry"); got != "false" {
				t.Errorf("X-Should-Retry: %q, want false", got)
			}
		})
	}
	// Claude Code's HEAD / at its start comes without its custom headers:
	// answered, not refused, and not sent on.
	resp, err := http.Head(f.front.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("HEAD / without the token: %d, want 200", resp.StatusCode)
	}
	f.p.Wait()
	if n := len(f.up.Requests()); n != 0 {
		t.Errorf("%d refused requests reached the upstream", n)
	}
}

// An upstream that does not answer is a 504 after the timeout, not a hang.
func TestProxy_UpstreamTimeout(t *testing.T) {
	cancelled := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(5 * time.Second):
		}
	}))
	defer func() { hang.CloseClientConnections(); hang.Close() }()
	f := newFixture(t, proxy.Options{Anthropic: hang.URL, Timeout: 200 * time.Millisecond})
	resp := f.post(t, `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`, nil)
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(b), "did not answer") {
		t.Errorf("%d %s; want 504", resp.StatusCode, b)
	}
	// Not a refusal: the same request may be answered next time.
	if got := resp.Header.Get("X-Should-Retry"); got != "" {
		t.Errorf("X-Should-Retry: %q on a timeout, want none", got)
	}
	select {
	case <-cancelled:
	case <-time.After(3 * time.Second):
		t.Error("the upstream request was not cancelled")
	}
}

// TestProxy_TooSmallForSystem: a window smaller than the harness's
// system prompt clips it, but the request's system prompt goes as the
// harness sent it; the proxy says so once, in its log, rather than
// leaving the user to wonder why requests pass --window.
func TestProxy_TooSmallForSystem(t *testing.T) {
	f, logs := tooSmallForSystem(t, 6)
	var history []json.RawMessage
	for range 6 {
		askCrates(t, f, "small", &history)
	}
	f.p.Wait()
	if err := f.up.Err(); err != nil {
		t.Fatal(err)
	}
	reqs := f.up.Requests(modelserver.KindMain)
	if got := reqs[len(reqs)-1].Params.SystemText(); got != crateSystem {
		t.Errorf("the system prompt upstream is not the harness's (%d bytes of %d)", len(got), len(crateSystem))
	}
	if n := strings.Count(logs.String(), "too small for the harness's system prompt"); n != 1 {
		t.Errorf("told %d times, want once:\n%s", n, logs.String())
	}
}

// crateSystem is a system prompt of about 3,300 tokens.
var crateSystem = strings.Repeat("You count crates on the ship, carefully and in order. ", 300)

// tooSmallForSystem stands a proxy whose windows (3,000 tokens) cannot
// hold crateSystem, with answers for turns requests, and its log.
func tooSmallForSystem(t *testing.T, turns int) (*fixture, *lockedLog) {
	t.Helper()
	logs := &lockedLog{}
	var steps []modelserver.Step
	for i := range turns {
		steps = append(steps, modelserver.Say(fmt.Sprintf("Answer %d: %s", i, strings.Repeat("the crates are counted. ", 30))))
	}
	return newFixture(t, proxy.Options{Limit: 3000, Logger: slog.New(slog.NewTextHandler(logs, nil))}, steps...), logs
}

// askCrates sends a session's next question with crateSystem, and adds
// the question and its answer to the session's history.
func askCrates(t *testing.T, f *fixture, session string, history *[]json.RawMessage) {
	t.Helper()
	i := len(*history) / 2
	prompt, _ := json.Marshal(map[string]any{"role": "user", "content": fmt.Sprintf("Question %d: how many crates?", i)})
	*history = append(*history, prompt)
	body, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 100, "system": crateSystem, "messages": *history})
	resp := f.post(t, string(body), map[string]string{"X-Engram-Session": session})
	*history = append(*history, anthropicAnswer(t, resp, i))
}

// TestProxy_TooSmallForSystemBounded: what the proxy remembers of the
// windows it told were too small goes with the windows it keeps in
// memory (maxWindows, here 1): a session it dropped and that comes back
// is told again. Remembered apart, for every window ever told, it grew
// without end in a proxy serving session after session.
func TestProxy_TooSmallForSystemBounded(t *testing.T) {
	proxy.SetMaxWindows(t, 1)
	f, logs := tooSmallForSystem(t, 12)
	history := map[string]*[]json.RawMessage{"a": {}, "b": {}}
	told := func() int { return strings.Count(logs.String(), "too small for the harness's system prompt") }
	var want []int
	for _, session := range []string{"a", "b", "a"} {
		for range 4 {
			askCrates(t, f, session, history[session])
		}
		f.p.Wait()
		want = append(want, told())
	}
	if err := f.up.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(want, []int{1, 2, 3}) {
		t.Errorf("told %v times after each session's turns, want [1 2 3]:\n%s", want, logs.String())
	}
}

// lockedLog is a log's text, written by the proxy's goroutines.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Over the window's threshold, older runs reach the model as markers:
// every request stays valid, the rewritten part stays the same bytes from
// one request to the next until the window evicts again, and a marker
// expands to the messages it stands for.
func TestProxy_Virtualizes(t *testing.T) {
	var steps []modelserver.Step
	for i := range 30 {
		steps = append(steps, modelserver.Say(fmt.Sprintf("Answer %d: %s", i, strings.Repeat("the quartermaster counts the crates again. ", 20))))
	}
	f := newFixture(t, proxy.Options{Limit: 6000}, steps...)
	ctx := t.Context()
	var history []json.RawMessage
	var bodies [][]byte
	for i := range 30 {
		prompt, _ := json.Marshal(map[string]any{"role": "user", "content": fmt.Sprintf("Question %d: %s", i, strings.Repeat("how many crates are on the ship today? ", 15))})
		history = append(history, prompt)
		body, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 100, "system": "You count crates.",
			"messages": history})
		resp := f.post(t, string(body), map[string]string{"X-Engram-Session": "crates"})
		history = append(history, anthropicAnswer(t, resp, i))
	}
	if err := f.up.Err(); err != nil {
		t.Fatal(err)
	}
	f.p.Wait()
	reqs := f.up.Requests(modelserver.KindMain)
	for _, r := range reqs {
		bodies = append(bodies, r.Body)
	}
	last := reqs[len(reqs)-1]
	if n := len(last.Params.Messages); n >= len(history)-1 {
		t.Fatalf("the last request upstream has %d messages of %d: nothing was evicted", n, len(history)-1)
	}
	if last.InputTokens > 6000 {
		t.Errorf("the last request upstream counts %d tokens, over the window's 6,000", last.InputTokens)
	}
	first := last.Params.Messages[0]
	refs := ctxref.Find(first.Text())
	if first.Role != "user" || len(refs) == 0 || !strings.Contains(first.Text(), "retrieve_context") {
		t.Fatalf("the first message upstream is not the markers:\n%.600s", first.Text())
	}
	// Between evictions, each request repeats the one before's messages
	// byte for byte: the provider's prompt cache keeps hitting.
	stable := 0
	for i := 1; i < len(bodies); i++ {
		var a, b struct {
			Messages []json.RawMessage `json:"messages"`
		}
		_ = json.Unmarshal(bodies[i-1], &a)
		_ = json.Unmarshal(bodies[i], &b)
		same := len(a.Messages) <= len(b.Messages)
		for j := 0; same && j < len(a.Messages); j++ {
			same = string(a.Messages[j]) == string(b.Messages[j])
		}
		if same {
			stable++
		}
	}
	t.Logf("%d of %d requests repeated the one before as their prefix; the last sent %d messages of %d, %d tokens", stable, len(bodies)-1, len(last.Params.Messages), len(history)-1, last.InputTokens)
	if stable < len(bodies)*2/3 {
		t.Errorf("only %d of %d requests repeated the one before as their prefix: the window evicts in steps too small", stable, len(bodies)-1)
	}
	// The first marker expands to the conversation's first messages.
	f.p.Wait()
	got, err := f.windows.Expand(ctx, refs[0].Marker.ID)
	if err != nil || len(got) == 0 {
		t.Fatalf("expanding %s: %d messages, %v", refs[0].Marker.ID, len(got), err)
	}
	if text := got[0].Blocks[0].Text; !strings.HasPrefix(text, "Question 0:") {
		t.Errorf("the first marker expands to %q first, want the first question", text)
	}
}

// TestProxy_UpstreamFaults: an answer to a client that takes gzip (as
// SDKs do) is stored as the JSON it is, the proxy asking for it plain; a stream the upstream cuts off reaches the client
// cut off, never as a whole answer; an upstream that closes the
// connection is a 502 that names neither the request's query nor Go's
// error; a body declared over the limit is refused before it is read.
func TestProxy_UpstreamFaults(t *testing.T) {
	answer := `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"GZIPPED ANSWER"}],` +
		`"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}`
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch r.URL.Query().Get("mode") {
		case "gzip", "gzip-anyway":
			w.Header().Set("Content-Type", "application/json")
			if r.URL.Query().Get("mode") == "gzip" && !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
				_, _ = io.WriteString(w, answer)
				return
			}
			w.Header().Set("Content-Encoding", "gzip")
			gz := gzip.NewWriter(w)
			_, _ = io.WriteString(gz, answer)
			_ = gz.Close()
		case "cut":
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_2\",\"role\":\"assistant\",\"content\":[]}}\n\nevent: content_bl")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		case "close":
			panic(http.ErrAbortHandler)
		}
	}))
	defer up.Close()
	f := newFixture(t, proxy.Options{Anthropic: up.URL, MaxBody: 1 << 10})
	req := func(query, session, body string, header map[string]string) (*http.Response, error) {
		r, _ := http.NewRequest(http.MethodPost, f.front.URL+"/v1/messages?"+query, strings.NewReader(body))
		r.Header.Set("X-Api-Key", "sk-ant-test")
		r.Header.Set("Anthropic-Version", "2023-06-01")
		r.Header.Set("X-Engram-Session", session)
		for k, v := range header {
			r.Header.Set(k, v)
		}
		return http.DefaultTransport.RoundTrip(r)
	}
	msg := func(text string) string {
		return `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"` + text + `"}]}`
	}

	// Compressed, as an SDK asks for it.
	resp, err := req("mode=gzip", "gz", msg("say it compressed"), map[string]string{"Accept-Encoding": "gzip"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "" || string(b) != answer {
		t.Errorf("a compressed answer: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Encoding"), b)
	}
	f.p.Wait()
	entries, err := f.eng.Store().TurnRange(t.Context(), "gz", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	stored := false
	for _, e := range entries {
		stored = stored || e.Type == store.AgentResponse && strings.Contains(string(e.Content), "GZIPPED ANSWER")
	}
	if !stored {
		t.Errorf("the compressed answer was not stored (%d entries)", len(entries))
	}

	// Compressed though asked for plain: passed on as it came, not stored.
	resp, err = req("mode=gzip-anyway", "gz2", msg("compress it anyway"), map[string]string{"Accept-Encoding": "gzip"})
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatalf("an answer compressed anyway, passed on: %v", err)
	}
	b, _ = io.ReadAll(zr)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "gzip" || string(b) != answer {
		t.Errorf("an answer compressed anyway: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Encoding"), b)
	}
	f.p.Wait()

	// Cut off mid-stream: the client's read fails.
	resp, err = req("mode=cut", "cut", strings.Replace(msg("stream it"), `"max_tokens"`, `"stream":true,"max_tokens"`, 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(resp.Body); err == nil {
		t.Errorf("a stream the upstream cut off reached the client whole: %q", b)
	}

	// Closed without an answer.
	resp, err = req("mode=close&api-key=QUERYSECRET", "closed", msg("hello"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), "closed the connection without an answer") ||
		strings.Contains(string(b), "QUERYSECRET") || strings.Contains(string(b), "Post ") {
		t.Errorf("an upstream that closed the connection: %d %s", resp.StatusCode, b)
	}

	// Declared over the limit: 413 before the body is asked for (a
	// client that expects 100 Continue gets the 413 instead).
	c, err := net.Dial("tcp", f.front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	fmt.Fprintf(c, "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Api-Key: sk-ant-test\r\nContent-Type: application/json\r\n"+
		"Content-Length: %d\r\nExpect: 100-continue\r\n\r\n", 1<<20)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second)) // a server that waits for the body never answers
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 413") {
		t.Errorf("a body declared over the limit: first line %q (%v), want 413 before 100 Continue", line, err)
	}
	_ = c.Close() // a handler still waiting for the body gives up
	f.p.Wait()
}

// TestProxy_TooManyMessages: a history longer than a window the proxy
// manages is forwarded as it came, at once, and counted as failed open.
func TestProxy_TooManyMessages(t *testing.T) {
	f := newFixture(t, proxy.Options{MaxBody: 64 << 20}, modelserver.Say("ok"))
	var b strings.Builder
	b.WriteString(`{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[`)
	for i := range 10_001 {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"role":%q,"content":"m%d"}`, role, i)
	}
	b.WriteString(`]}`)
	resp := f.post(t, b.String(), map[string]string{"X-Engram-Session": "long"})
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	f.p.Wait()
	if s := f.p.Stats(); s.FailedOpen != 1 {
		t.Errorf("failed open %d times, want 1", s.FailedOpen)
	}
	if _, _, _, err := f.windows.Messages(t.Context(), store.WindowKey{SessionID: "long", AgentID: "proxy"}); err == nil {
		t.Error("a window was made for a history past the bound")
	}
}

// lossyStore loses the answer of the next lose appends to a window: the
// store commits them, and the caller hears an error (a connection to
// PostgreSQL dropped after the commit).
type lossyStore struct {
	store.Store
	lose atomic.Int32
}

func (s *lossyStore) AppendWindow(ctx context.Context, key store.WindowKey, a store.WindowAppend, evict store.Evictor) (store.Window, []store.WindowItem, []store.Eviction, error) {
	w, items, evs, err := s.Store.AppendWindow(ctx, key, a, evict)
	if err == nil && s.lose.Add(-1) >= 0 {
		return store.Window{}, nil, nil, errors.New("the connection dropped before the commit's answer")
	}
	return w, items, evs, err
}

// An append whose answer was lost (committed all the same) is not made
// again: the proxy reads the window again from its ledger, and a request
// sent again appends the same messages once.
func TestProxy_LostAppendAnswer(t *testing.T) {
	st := &lossyStore{Store: sqlitetest.Open(t, sqlite.Options{})}
	f := newFixtureOn(t, st, proxy.Options{},
		modelserver.Say("Hello there."), modelserver.Say("It says PAPAYA."), modelserver.Say("Done."), modelserver.Say("Done again."))
	ctx := t.Context()
	key := store.WindowKey{SessionID: "6f6fe473-07c4-42c5-8087-ddd2ffb878a6", AgentID: "claude-code"}
	req := func(msgs string) {
		t.Helper()
		resp := f.post(t, `{"model":"claude-sonnet-4-5","max_tokens":100,"system":"You are terse.","metadata":{"user_id":"`+claudeUser+`"},"messages":[`+msgs+`]}`, nil)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("HTTP %d", resp.StatusCode)
		}
		f.p.Wait()
	}
	turn1 := `{"role":"user","content":"hi"}`
	turn2 := turn1 + `,{"role":"assistant","content":[{"type":"text","text":"Hello there."}]},{"role":"user","content":"read notes.txt"}`
	req(turn1)
	st.lose.Store(1) // the next append commits, and its answer is lost
	req(turn2)
	req(turn2) // the harness sends it again
	req(turn2 + `,{"role":"assistant","content":[{"type":"text","text":"Done."}]},{"role":"user","content":"thanks"}`)
	_, held, _, err := f.windows.Messages(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, msg := range held {
		got = append(got, string(msg.Role)+": "+msg.Blocks[0].Text)
	}
	want := []string{"system: You are terse.", "user: hi", "assistant: Hello there.", "user: read notes.txt",
		"assistant: Done.", "user: thanks"}
	if !slices.Equal(got, want) {
		t.Errorf("the window:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// frozenStore stops answering window appends (a database host frozen):
// they wait until their context ends.
type frozenStore struct{ store.Store }

func (s frozenStore) AppendWindow(ctx context.Context, _ store.WindowKey, _ store.WindowAppend, _ store.Evictor) (store.Window, []store.WindowItem, []store.Eviction, error) {
	<-ctx.Done()
	return store.Window{}, nil, nil, ctx.Err()
}

// A store that stops answering does not hold the harness: past
// StoreTimeout, the request goes to the model as it came.
func TestProxy_StoreStopsAnswering(t *testing.T) {
	f := newFixtureOn(t, frozenStore{sqlitetest.Open(t, sqlite.Options{})}, proxy.Options{StoreTimeout: 200 * time.Millisecond},
		modelserver.Say("Hello there."))
	done := make(chan *http.Response, 1)
	go func() {
		done <- f.post(t, `{"model":"claude-sonnet-4-5","max_tokens":100,"system":"You are terse.","metadata":{"user_id":"`+claudeUser+`"},"messages":[{"role":"user","content":"hi"}]}`, nil)
	}()
	select {
	case resp := <-done:
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "Hello there.") {
			t.Errorf("with the store frozen: HTTP %d %s; want the model's answer", resp.StatusCode, b)
		}
	case <-time.After(time.Minute):
		t.Fatal("the request waited on the frozen store")
	}
}

// anthropicAnswer reads turn i's answer, which must be a 200 in the
// Messages API's JSON, as the assistant message a harness sends back.
func anthropicAnswer(t *testing.T, resp *http.Response, i int) json.RawMessage {
	t.Helper()
	var out struct {
		Content []map[string]any `json:"content"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("turn %d: %d %v", i, resp.StatusCode, err)
	}
	answer, _ := json.Marshal(map[string]any{"role": "assistant", "content": out.Content})
	return answer
}

// TestProxy_Role: the proxy's windows take the tool_loop role unless told
// otherwise (a role of the Manager's configured table too), and a role
// that names no policy is refused with the roles there are, since nobody
// would be told that the windows fell back to the default's.
func TestProxy_Role(t *testing.T) {
	f := newFixture(t, proxy.Options{}, modelserver.Say("ok"))
	if resp := f.post(t, `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hello"}]}`,
		map[string]string{"X-Engram-Session": "roles"}); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	f.p.Wait()
	st, err := f.windows.Status(t.Context(), store.WindowKey{SessionID: "roles", AgentID: "proxy"})
	if err != nil || st.Settings.Role != window.ToolLoopRole {
		t.Errorf("the window's role is %q (%v), want %s", st.Settings.Role, err, window.ToolLoopRole)
	}

	cat, err := tokens.NewCatalog()
	if err != nil {
		t.Fatal(err)
	}
	m := window.NewManager(f.eng, cat)
	_, err = proxy.New(f.eng, m, proxy.Options{Role: "reviewer"})
	if err == nil || !strings.Contains(err.Error(), `role "reviewer" names no window policy`) || !strings.Contains(err.Error(), "tool_loop") {
		t.Errorf("an unknown role: %v", err)
	}
	if err := m.Configure(window.Config{Policies: map[string]window.Policy{"reviewer": window.PolicyFor(window.DefaultRole)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := proxy.New(f.eng, m, proxy.Options{Role: "reviewer"}); err != nil {
		t.Errorf("a configured role: %v", err)
	}
}
