package modelserver

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// post sends body to the server's path with the headers Claude Code sends.
func post(t *testing.T, srv *Server, path, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", "sk-test")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// sseEvent is one server-sent event.
type sseEvent struct {
	Name string
	Data map[string]any
}

// readSSE reads a stream line by line, as a client does.
func readSSE(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var events []sseEvent
	var name string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var data map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &data); err != nil {
				t.Fatalf("event %s: data is not JSON: %v", name, err)
			}
			if data["type"] != name {
				t.Errorf("event %s carries data of type %v", name, data["type"])
			}
			events = append(events, sseEvent{name, data})
		case line == "":
		default:
			t.Fatalf("unexpected line in stream: %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return events
}

const userHello = `{"model":"claude-sonnet-4-6","max_tokens":1024,%s"messages":[{"role":"user","content":"hello there"}]}`

func TestServer_Stream(t *testing.T) {
	srv := Start(Options{Main: []Step{Reply(
		Text("Let me look at the file, it is short."),
		ToolUse("Read", map[string]any{"file_path": "/tmp/x.go", "limit": 20}),
	)}})
	defer srv.Close()
	resp := post(t, srv, "/v1/messages", fmt.Sprintf(userHello, `"stream":true,`))
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := readSSE(t, resp.Body)

	var names []string
	text, input := "", ""
	inputPieces := 0
	var stop, toolName string
	var inTokens, outTokens float64
	for _, e := range events {
		names = append(names, e.Name)
		switch e.Name {
		case "message_start":
			inTokens = e.Data["message"].(map[string]any)["usage"].(map[string]any)["input_tokens"].(float64)
		case "content_block_start":
			if cb := e.Data["content_block"].(map[string]any); cb["type"] == "tool_use" {
				toolName = cb["name"].(string)
				if id, _ := cb["id"].(string); !strings.HasPrefix(id, "toolu_") {
					t.Errorf("tool_use id %q", id)
				}
			}
		case "content_block_delta":
			d := e.Data["delta"].(map[string]any)
			switch d["type"] {
			case "text_delta":
				text += d["text"].(string)
			case "input_json_delta":
				input += d["partial_json"].(string)
				inputPieces++
			}
		case "message_delta":
			stop = e.Data["delta"].(map[string]any)["stop_reason"].(string)
			outTokens = e.Data["usage"].(map[string]any)["output_tokens"].(float64)
		}
	}
	want := []string{"message_start",
		"content_block_start", "ping", "content_block_delta", "content_block_delta", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_delta", "content_block_delta", "content_block_delta", "content_block_stop",
		"message_delta", "message_stop"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if text != "Let me look at the file, it is short." {
		t.Errorf("text = %q", text)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(input), &got); err != nil {
		t.Fatalf("tool input %q: %v", input, err)
	}
	if diff := cmp.Diff(map[string]any{"file_path": "/tmp/x.go", "limit": 20.0}, got); diff != "" {
		t.Errorf("tool input (-want +got):\n%s", diff)
	}
	if inputPieces < 3 || toolName != "Read" || stop != "tool_use" || inTokens < 1 || outTokens < 1 {
		t.Errorf("pieces %d, tool %q, stop %q, tokens in %v out %v", inputPieces, toolName, stop, inTokens, outTokens)
	}
	if err := srv.Err(); err != nil {
		t.Error(err)
	}
}

func TestServer_Message(t *testing.T) {
	srv := Start(Options{Main: []Step{Say("Hi.")}})
	defer srv.Close()
	resp := post(t, srv, "/v1/messages", fmt.Sprintf(userHello, ""))
	var msg struct {
		Type, Role, Model string
		Content           []Block
		StopReason        string `json:"stop_reason"`
		Usage             usage
	}
	if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil {
		t.Fatal(err)
	}
	if msg.Type != "message" || msg.Role != "assistant" || msg.Model != "claude-sonnet-4-6" || msg.StopReason != "end_turn" ||
		len(msg.Content) != 1 || msg.Content[0].Text != "Hi." || msg.Usage.InputTokens < 1 {
		t.Errorf("message = %+v", msg)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 || reqs[0].Kind != KindMain || reqs[0].Step != 0 || reqs[0].Header.Get("X-Api-Key") != "" ||
		reqs[0].Params.LastUser().Text() != "hello there" {
		t.Errorf("recorded %+v", reqs)
	}
}

func TestServer_CountTokens(t *testing.T) {
	srv := Start(Options{})
	defer srv.Close()
	count := func(text string) int {
		body, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-6",
			"messages": []any{map[string]any{"role": "user", "content": text}}})
		var got struct {
			InputTokens int `json:"input_tokens"`
		}
		if err := json.NewDecoder(post(t, srv, "/v1/messages/count_tokens", string(body)).Body).Decode(&got); err != nil {
			t.Fatal(err)
		}
		return got.InputTokens
	}
	short, long := count("hello"), count(strings.Repeat("the context grows with every turn ", 1000))
	if short < 1 || long < 6000 {
		t.Errorf("counts %d and %d; want a few and over 6000", short, long)
	}
	if err := srv.Err(); err != nil {
		t.Error(err)
	}
}

func TestServer_Invalid(t *testing.T) {
	user := func(content string) string { return `{"role":"user","content":` + content + `}` }
	asst := func(content string) string { return `{"role":"assistant","content":` + content + `}` }
	body := func(msgs ...string) string {
		return `{"model":"m","max_tokens":10,"messages":[` + strings.Join(msgs, ",") + `]}`
	}
	use := `[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}]`
	result := `[{"type":"tool_result","tool_use_id":"toolu_1","content":"a.go"}]`
	tests := []struct {
		name, path, body string
		status           int
		typ, message     string
	}{
		{"NotJSON", "/v1/messages", `{"model":`, 400, "invalid_request_error", "not a valid JSON object"},
		{"NoModel", "/v1/messages", `{"max_tokens":10,"messages":[` + user(`"hi"`) + `]}`, 400, "invalid_request_error", "model: Field required"},
		{"NoMaxTokens", "/v1/messages", `{"model":"m","messages":[` + user(`"hi"`) + `]}`, 400, "invalid_request_error", "max_tokens: Field required"},
		{"NoMessages", "/v1/messages", body(), 400, "invalid_request_error", "messages: at least one message is required"},
		{"BadRole", "/v1/messages", body(`{"role":"system","content":"hi"}`), 400, "invalid_request_error", "messages.0.role"},
		{"EmptyText", "/v1/messages", body(user(`[{"type":"text","text":""}]`)), 400, "invalid_request_error", "text content blocks must be non-empty"},
		{"EmptyContent", "/v1/messages", body(user(`[]`), asst(`"ok"`)), 400, "invalid_request_error", "messages.0: all messages must have non-empty content"},
		{"UnknownBlock", "/v1/messages", body(user(`[{"type":"video","url":"x"}]`)), 400, "invalid_request_error", "Input tag 'video'"},
		{"UnansweredToolUse", "/v1/messages", body(user(`"hi"`), asst(use), user(`"go on"`)), 400, "invalid_request_error",
			"messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1"},
		{"OrphanToolResult", "/v1/messages", body(user(`"hi"`), asst(`"ok"`), user(result)), 400, "invalid_request_error",
			"messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_1"},
		{"ResultTooLate", "/v1/messages", body(user(`"hi"`), asst(use), user(`"wait"`), asst(`"ok"`), user(result)), 400, "invalid_request_error",
			"messages.1: `tool_use` ids were found"},
		{"ToolUseFromUser", "/v1/messages", body(user(use)), 400, "invalid_request_error", "tool_use blocks can only be in assistant messages"},
		{"CountNoModel", "/v1/messages/count_tokens", `{"messages":[` + user(`"hi"`) + `]}`, 400, "invalid_request_error", "model: Field required"},
		{"UnknownPath", "/v1/complete", body(user(`"hi"`)), 404, "not_found_error", "Not Found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := Start(Options{Main: []Step{Say("never")}})
			defer srv.Close()
			resp := post(t, srv, tt.path, tt.body)
			var got struct {
				Type  string
				Error struct{ Type, Message string }
			}
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.status || got.Type != "error" || got.Error.Type != tt.typ || !strings.Contains(got.Error.Message, tt.message) {
				t.Errorf("got %d %+v; want %d %s containing %q", resp.StatusCode, got, tt.status, tt.typ, tt.message)
			}
			if err := srv.Err(); err == nil || !strings.Contains(err.Error(), tt.message) {
				t.Errorf("Err() = %v, want the refusal reported", err)
			}
			if srv.Remaining() != 1 {
				t.Error("a refused request used a step of the script")
			}
		})
	}
	t.Run("Valid", func(t *testing.T) {
		srv := Start(Options{Main: []Step{Say("fine")}})
		defer srv.Close()
		// Consecutive user messages and text after a tool_result are fine:
		// Claude Code sends both.
		resp := post(t, srv, "/v1/messages", body(user(`"hi"`), user(`"again"`), asst(use),
			user(`[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"a.go"}]},{"type":"text","text":"note"}]`)))
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		if err := srv.Err(); err != nil {
			t.Error(err)
		}
	})
}

func TestServer_Auth(t *testing.T) {
	srv := Start(Options{APIKey: "sk-right"})
	defer srv.Close()
	for _, key := range []string{"", "sk-wrong"} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL()+"/v1/messages", strings.NewReader(fmt.Sprintf(userHello, "")))
		req.Header.Set("Anthropic-Version", "2023-06-01")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), `"authentication_error"`) {
			t.Errorf("key %q: %d %s", key, resp.StatusCode, b)
		}
	}
}

func TestServer_ScriptExhausted(t *testing.T) {
	srv := Start(Options{Main: []Step{Say("one")}})
	defer srv.Close()
	post(t, srv, "/v1/messages", fmt.Sprintf(userHello, ""))
	resp := post(t, srv, "/v1/messages", fmt.Sprintf(userHello, ""))
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(b), "script exhausted: request 2") ||
		!strings.Contains(string(b), "hello there") {
		t.Errorf("%d %s", resp.StatusCode, b)
	}
	if err := srv.Err(); err == nil || !strings.Contains(err.Error(), "script exhausted") {
		t.Errorf("Err() = %v", err)
	}
}

func TestServer_StepError(t *testing.T) {
	srv := Start(Options{Main: []Step{
		func(*Request) (Response, error) { return Response{}, fmt.Errorf("no tool_result for Read") },
		Fail(529, "overloaded_error", "Overloaded"),
	}})
	defer srv.Close()
	if resp := post(t, srv, "/v1/messages", fmt.Sprintf(userHello, "")); resp.StatusCode != 500 {
		t.Errorf("failed step: status %d", resp.StatusCode)
	}
	if resp := post(t, srv, "/v1/messages", fmt.Sprintf(userHello, "")); resp.StatusCode != 529 {
		t.Errorf("Fail step: status %d", resp.StatusCode)
	}
	err := srv.Err()
	if err == nil || !strings.Contains(err.Error(), "no tool_result for Read") || strings.Contains(err.Error(), "Overloaded") {
		t.Errorf("Err() = %v; want the failed step and not the scripted error", err)
	}
}

// TestClassify_ClaudeCode classifies and validates requests the real
// Claude Code 2.1.121 sent (saved by the hook package's discovery).
func TestClassify_ClaudeCode(t *testing.T) {
	dir := "../hook/testdata/claude-code-2.1.121/requests"
	want := map[string]Kind{
		"main-first.json":       KindMain,
		"subagent-first.json":   KindMain,
		"compact-manual.json":   KindCompact,
		"compact-auto-cut.json": KindCompact,
		"updated-output.json":   KindMain,
	}
	for name, kind := range want {
		body, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		p, err := parseRequest(body)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if msg := validate(p, false); msg != "" {
			t.Errorf("%s: refused: %s", name, msg)
		}
		if got := Classify(&Request{Path: "/v1/messages", Params: p}); got != kind {
			t.Errorf("%s: kind %s, want %s", name, got, kind)
		}
	}
}

func TestServer_SideRequests(t *testing.T) {
	srv := Start(Options{Main: []Step{Say("main")}})
	defer srv.Close()
	compact := `{"model":"m","max_tokens":20000,"tools":[{"name":"Bash","input_schema":{"type":"object"}}],"messages":[` +
		`{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},` +
		`{"role":"user","content":"CRITICAL: Respond with TEXT ONLY.\n\n` + compactMarker + `, paying close attention"}]}`
	resp := post(t, srv, "/v1/messages", compact)
	var msg struct{ Content []Block }
	if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 1 || !strings.Contains(msg.Content[0].Text, "<summary>") {
		t.Errorf("compaction answered %+v", msg)
	}
	if srv.Remaining() != 1 {
		t.Error("a side request used a step of the main script")
	}
	if got := srv.Requests(KindCompact); len(got) != 1 || got[0].Step != -1 {
		t.Errorf("compaction requests: %+v", got)
	}
}

func TestPieces(t *testing.T) {
	for _, s := range []string{"", "a", "ab", "héllo wörld", `{"command":"ls -la"}`} {
		p := pieces(s, 3)
		if strings.Join(p, "") != s || len(p) > 3 {
			t.Errorf("pieces(%q) = %q", s, p)
		}
		for _, x := range p {
			if x == "" || !strings.HasPrefix(s[strings.Index(s, x):], x) {
				t.Errorf("pieces(%q): bad piece %q", s, x)
			}
		}
	}
}

// A paced stream sends its first event at once and the rest later, each
// event the same as unpaced; a client that goes away ends the waits, so
// the handler returns (Close would wait an hour otherwise). No timings
// are asserted: the pace is an hour or a millisecond.
func TestServer_Pace(t *testing.T) {
	paced := func(pace time.Duration) Step {
		return func(*Request) (Response, error) {
			return Response{Content: []Block{Text("Slowly, one piece at a time.")}, Pace: pace}, nil
		}
	}
	srv := Start(Options{Main: []Step{Say("Slowly, one piece at a time."), paced(time.Millisecond), paced(time.Hour)}})
	defer srv.Close()
	names := func(events []sseEvent) []string {
		var out []string
		for _, e := range events {
			out = append(out, e.Name)
		}
		return out
	}
	body := fmt.Sprintf(userHello, `"stream":true,`)
	unpaced := names(readSSE(t, post(t, srv, "/v1/messages", body).Body))
	if diff := cmp.Diff(unpaced, names(readSSE(t, post(t, srv, "/v1/messages", body).Body))); diff != "" {
		t.Errorf("events paced by 1ms (-unpaced +paced):\n%s", diff)
	}

	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL()+"/v1/messages", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", "sk-test")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	first, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || first != "event: message_start\n" {
		t.Fatalf("first line of a stream paced by an hour: %q, %v", first, err)
	}
	cancel()
	resp.Body.Close()
	if err := srv.Err(); err != nil { // waits for the handler to return
		t.Error(err)
	}
}

// A server that forgets keeps no requests, and still follows its script
// and reports refusals.
func TestServer_Forget(t *testing.T) {
	srv := Start(Options{Main: []Step{Say("one"), Say("two")}, Forget: true})
	defer srv.Close()
	post(t, srv, "/v1/messages", fmt.Sprintf(userHello, ""))
	if n := len(srv.Requests()); n != 0 || srv.Remaining() != 1 || srv.Err() != nil {
		t.Errorf("after one request: %d recorded, %d steps left, %v; want none, 1, nil", n, srv.Remaining(), srv.Err())
	}
	post(t, srv, "/v1/messages", `{"model":"m","messages":[]}`)
	if err := srv.Err(); err == nil {
		t.Error("a refused request was not reported")
	}
}
