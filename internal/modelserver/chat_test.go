package modelserver

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// postChat sends body to /v1/chat/completions with the headers OpenAI's
// clients send.
func postChat(t *testing.T, srv *Server, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL()+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// readChatStream reads a chat stream line by line, as a client does: the
// chunks of its data: lines, and whether it ended with data: [DONE].
func readChatStream(t *testing.T, r io.Reader) (chunks []map[string]any, done bool) {
	t.Helper()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
		case line == "data: [DONE]":
			if done {
				t.Error("two data: [DONE] lines")
			}
			done = true
		case strings.HasPrefix(line, "data: "):
			if done {
				t.Errorf("a chunk after data: [DONE]: %s", line)
			}
			var c map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &c); err != nil {
				t.Fatalf("chunk is not JSON: %v: %s", err, line)
			}
			chunks = append(chunks, c)
		default:
			t.Fatalf("unexpected line in stream: %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return chunks, done
}

// chatStreamShape describes each chunk of a stream in a word or two
// ("role", "content", "call 0 Read", "args 0", "finish stop", "usage"),
// and checks what every chunk must carry.
func chatStreamShape(t *testing.T, chunks []map[string]any, includeUsage, obfuscation bool) []string {
	t.Helper()
	var shape []string
	for i, c := range chunks {
		if c["object"] != "chat.completion.chunk" || c["id"] != chunks[0]["id"] || c["model"] != "gpt-4o" || c["created"] == nil {
			t.Errorf("chunk %d: %v", i, c)
		}
		if _, pad := c["obfuscation"]; pad != (len(c["choices"].([]any)) > 0 && obfuscation) {
			t.Errorf("chunk %d: obfuscation present %v", i, pad)
		}
		usage, hasUsage := c["usage"]
		if hasUsage != includeUsage {
			t.Errorf("chunk %d: usage present %v, want %v", i, hasUsage, includeUsage)
		}
		choices := c["choices"].([]any)
		if len(choices) == 0 {
			if usage == nil {
				t.Errorf("chunk %d has no choices and no usage", i)
			}
			shape = append(shape, "usage")
			continue
		}
		if usage != nil {
			t.Errorf("chunk %d: usage %v beside choices", i, usage)
		}
		ch := choices[0].(map[string]any)
		d := ch["delta"].(map[string]any)
		var words []string
		if d["role"] != nil {
			words = append(words, "role")
		}
		if s, ok := d["content"].(string); ok && s != "" {
			words = append(words, "content")
		}
		if calls, ok := d["tool_calls"].([]any); ok {
			call := calls[0].(map[string]any)
			fn := call["function"].(map[string]any)
			if name, ok := fn["name"]; ok {
				words = append(words, fmt.Sprintf("call %v %v", call["index"], name))
			} else {
				words = append(words, fmt.Sprintf("args %v", call["index"]))
			}
		}
		if f := ch["finish_reason"]; f != nil {
			words = append(words, fmt.Sprintf("finish %v", f))
		}
		shape = append(shape, strings.Join(words, "+"))
	}
	return shape
}

const chatHello = `{"model":"gpt-4o",%s"tools":[{"type":"function","function":{"name":"Read","parameters":{"type":"object"}}}],` +
	`"messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"hello there"}]}`

func TestChat_Stream(t *testing.T) {
	srv := Start(Options{Main: []Step{Reply(
		Text("Let me look at both files."),
		ToolUse("Read", map[string]any{"file_path": "/tmp/a.go"}),
		ToolUse("Read", map[string]any{"file_path": "/tmp/b.go", "limit": 20}),
	)}})
	defer srv.Close()
	resp := postChat(t, srv, fmt.Sprintf(chatHello, `"stream":true,"stream_options":{"include_usage":true,"include_obfuscation":false},`))
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	chunks, done := readChatStream(t, resp.Body)
	if !done {
		t.Error("no data: [DONE]")
	}
	want := []string{"role", "content", "content", "content",
		"call 0 Read", "args 0", "args 0", "args 0",
		"call 1 Read", "args 1", "args 1", "args 1",
		"finish tool_calls", "usage"}
	if diff := cmp.Diff(want, chatStreamShape(t, chunks, true, false)); diff != "" {
		t.Errorf("chunks (-want +got):\n%s", diff)
	}

	text := ""
	args := map[float64]string{}
	ids := map[float64]string{}
	for _, c := range chunks {
		for _, ch := range c["choices"].([]any) {
			d := ch.(map[string]any)["delta"].(map[string]any)
			if s, ok := d["content"].(string); ok {
				text += s
			}
			calls, _ := d["tool_calls"].([]any)
			for _, call := range calls {
				call := call.(map[string]any)
				i := call["index"].(float64)
				if id, ok := call["id"].(string); ok {
					ids[i] = id
					if call["type"] != "function" {
						t.Errorf("call %v: type %v", i, call["type"])
					}
				}
				args[i] += call["function"].(map[string]any)["arguments"].(string)
			}
		}
	}
	if text != "Let me look at both files." {
		t.Errorf("content = %q", text)
	}
	if diff := cmp.Diff(map[float64]string{0: `{"file_path":"/tmp/a.go"}`, 1: `{"file_path":"/tmp/b.go","limit":20}`}, args); diff != "" {
		t.Errorf("arguments (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(ids[0], "call_mdl") || !strings.HasPrefix(ids[1], "call_mdl") || ids[0] == ids[1] {
		t.Errorf("ids = %v", ids)
	}
	first := chunks[0]["choices"].([]any)[0].(map[string]any)["delta"]
	if diff := cmp.Diff(map[string]any{"role": "assistant", "content": "", "refusal": nil}, first); diff != "" {
		t.Errorf("first delta (-want +got):\n%s", diff)
	}
	usage := chunks[len(chunks)-1]["usage"].(map[string]any)
	reqs := srv.Requests()
	if len(reqs) != 1 || usage["prompt_tokens"] != float64(reqs[0].InputTokens) || usage["prompt_tokens"].(float64) < 10 ||
		usage["completion_tokens"].(float64) < 10 || usage["total_tokens"] != usage["prompt_tokens"].(float64)+usage["completion_tokens"].(float64) {
		t.Errorf("usage %v; recorded %+v", usage, reqs)
	}
	if err := srv.Err(); err != nil {
		t.Error(err)
	}
	r := reqs[0]
	if r.Kind != KindMain || r.Step != 0 || r.Chat == nil || !r.Chat.Stream || !r.Chat.IncludeUsage || !r.Chat.HasTool("Read") ||
		r.Chat.LastUser().Text() != "hello there" || r.Chat.SystemText() != "You are a coding agent." || r.Header.Get("Authorization") != "" {
		t.Errorf("recorded %+v", r)
	}
}

// A reply of tool calls alone starts with the first call, content null;
// without include_usage no chunk has a usage.
func TestChat_StreamToolOnly(t *testing.T) {
	srv := Start(Options{Main: []Step{Call("Read", map[string]any{"file_path": "/tmp/a.go"})}})
	defer srv.Close()
	chunks, done := readChatStream(t, postChat(t, srv, fmt.Sprintf(chatHello, `"stream":true,`)).Body)
	if diff := cmp.Diff([]string{"role+call 0 Read", "args 0", "args 0", "args 0", "finish tool_calls"}, chatStreamShape(t, chunks, false, true)); diff != "" || !done {
		t.Errorf("chunks (-want +got), done %v:\n%s", done, diff)
	}
	first := chunks[0]["choices"].([]any)[0].(map[string]any)["delta"].(map[string]any)
	if c, ok := first["content"]; !ok || c != nil || first["role"] != "assistant" {
		t.Errorf("first delta = %v", first)
	}
}

func TestChat_JSON(t *testing.T) {
	srv := Start(Options{Main: []Step{
		Reply(Text("Hi."), Text("Twice.")),
		Reply(Text("Reading."), ToolUse("Read", map[string]any{"file_path": "/tmp/a.go"})),
	}})
	defer srv.Close()
	type completion struct {
		ID, Object, Model string
		Choices           []struct {
			Index   int
			Message struct {
				Role      string
				Content   *string
				ToolCalls []ChatToolCall `json:"tool_calls"`
			}
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
			TotalTokens      int `json:"total_tokens"`
		}
	}
	get := func() completion {
		resp := postChat(t, srv, fmt.Sprintf(chatHello, ""))
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		var c completion
		if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := get()
	if c.Object != "chat.completion" || !strings.HasPrefix(c.ID, "chatcmpl-mdl") || c.Model != "gpt-4o" || len(c.Choices) != 1 ||
		c.Choices[0].Message.Role != "assistant" || c.Choices[0].Message.Content == nil || *c.Choices[0].Message.Content != "Hi.\n\nTwice." ||
		c.Choices[0].Message.ToolCalls != nil || c.Choices[0].FinishReason != "stop" ||
		c.Usage.PromptTokens < 10 || c.Usage.CompletionTokens < 1 || c.Usage.TotalTokens != c.Usage.PromptTokens+c.Usage.CompletionTokens {
		t.Errorf("completion = %+v", c)
	}
	c = get()
	calls := c.Choices[0].Message.ToolCalls
	if len(calls) != 1 || !strings.HasPrefix(calls[0].ID, "call_mdl") || calls[0].Type != "function" || calls[0].Function.Name != "Read" ||
		calls[0].Function.Arguments != `{"file_path":"/tmp/a.go"}` || c.Choices[0].FinishReason != "tool_calls" || *c.Choices[0].Message.Content != "Reading." {
		t.Errorf("completion = %+v", c)
	}
	if err := srv.Err(); err != nil {
		t.Error(err)
	}
}

// A tool call and its result: the second request carries the call and
// the tool message answering it, which a step reads with ToolResult.
func TestChat_ToolRoundTrip(t *testing.T) {
	srv := Start(Options{Main: []Step{
		Call("Read", map[string]any{"file_path": "/tmp/a.go"}),
		func(r *Request) (Response, error) {
			m, ok := r.Chat.LastToolResult()
			if !ok {
				return Response{}, fmt.Errorf("no tool message")
			}
			if res, ok := r.Chat.ToolResult(m.ToolCallID); !ok || res.Text() != "package a" {
				return Response{}, fmt.Errorf("tool result %q for %s", res.Text(), m.ToolCallID)
			}
			return Response{Content: []Block{Text("It is package a.")}}, nil
		},
	}})
	defer srv.Close()
	var first struct {
		Choices []struct{ Message json.RawMessage }
	}
	if err := json.NewDecoder(postChat(t, srv, fmt.Sprintf(chatHello, "")).Body).Decode(&first); err != nil {
		t.Fatal(err)
	}
	var call struct {
		ToolCalls []ChatToolCall `json:"tool_calls"`
	}
	if err := json.Unmarshal(first.Choices[0].Message, &call); err != nil || len(call.ToolCalls) != 1 {
		t.Fatalf("first reply %s: %v", first.Choices[0].Message, err)
	}
	body := fmt.Sprintf(`{"model":"gpt-4o","messages":[{"role":"user","content":"hello there"},%s,`+
		`{"role":"tool","tool_call_id":%q,"content":[{"type":"text","text":"package a"}]}]}`, first.Choices[0].Message, call.ToolCalls[0].ID)
	resp := postChat(t, srv, body)
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"content":"It is package a."`) {
		t.Errorf("second reply: %d %s", resp.StatusCode, b)
	}
	if err := srv.Err(); err != nil {
		t.Error(err)
	}
}

func TestChat_Invalid(t *testing.T) {
	user := `{"role":"user","content":"hi"}`
	asstCalls := func(ids ...string) string {
		var calls []string
		for _, id := range ids {
			calls = append(calls, fmt.Sprintf(`{"id":%q,"type":"function","function":{"name":"Read","arguments":"{}"}}`, id))
		}
		return `{"role":"assistant","content":null,"tool_calls":[` + strings.Join(calls, ",") + `]}`
	}
	tool := func(id string) string { return fmt.Sprintf(`{"role":"tool","tool_call_id":%q,"content":"ok"}`, id) }
	body := func(msgs ...string) string { return `{"model":"gpt-4o","messages":[` + strings.Join(msgs, ",") + `]}` }
	null := "null"
	tests := []struct {
		name, body           string
		param, code, message string
	}{
		{"NotJSON", `{"model":`, null, null, chatUnparsable},
		{"ModelNotString", `{"model":4,"messages":[` + user + `]}`, null, null, chatUnparsable},
		{"NoModel", `{"messages":[` + user + `]}`, null, null, "you must provide a model parameter"},
		{"NoMessages", `{"model":"gpt-4o"}`, "messages", "missing_required_parameter", "Missing required parameter: 'messages'."},
		{"EmptyMessages", body(), "messages", "empty_array",
			"Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead."},
		{"MessagesString", `{"model":"gpt-4o","messages":"hi"}`, "messages", "invalid_type",
			"Invalid type for 'messages': expected an array of objects, but got a string instead."},
		{"MessageString", body(`"hi"`), "messages[0]", "invalid_type", "Invalid type for 'messages[0]': expected an object, but got a string instead."},
		{"ContentNumber", body(`{"role":"user","content":7}`), "messages[0].content", "invalid_type",
			"Invalid type for 'messages[0].content': expected one of a string or array of objects, but got an integer instead."},
		{"NoRole", body(`{"content":"hi"}`), "messages[0].role", "missing_required_parameter", "Missing required parameter: 'messages[0].role'."},
		{"BadRole", body(`{"role":"robot","content":"hi"}`), "messages[0].role", "invalid_value",
			"Invalid value: 'robot'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'."},
		{"BadPart", body(user, `{"role":"assistant","content":[{"type":"thinking","thinking":"x"}]}`), "messages[1].content[0].type", "invalid_value",
			"Invalid value: 'thinking'. Supported values are: 'text', 'image_url', 'input_audio', 'refusal', 'audio', and 'file'."},
		{"NullUserContent", body(`{"role":"user","content":null}`), "messages.[0].content", null,
			"Invalid value for 'content': expected a string, got null."},
		{"NullAssistantContent", body(user, `{"role":"assistant","content":null}`), "messages.[1].content", null,
			"Invalid value for 'content': expected a string, got null."},
		{"StreamString", `{"model":"gpt-4o","stream":"yes","messages":[` + user + `]}`, "stream", "invalid_type",
			"Invalid type for 'stream': expected a boolean, but got a string instead."},
		{"StreamOptionsWithoutStream", `{"model":"gpt-4o","stream_options":{"include_usage":true},"messages":[` + user + `]}`, "stream_options", null,
			"The 'stream_options' parameter is only allowed when 'stream' is enabled."},
		{"ToolWithoutFunction", `{"model":"gpt-4o","tools":[{"type":"function"}],"messages":[` + user + `]}`, "tools[0].function", "missing_required_parameter",
			"Missing required parameter: 'tools[0].function'."},
		{"ToolWithoutName", `{"model":"gpt-4o","tools":[{"type":"function","function":{"parameters":{}}}],"messages":[` + user + `]}`,
			"tools[0].function.name", "missing_required_parameter", "Missing required parameter: 'tools[0].function.name'."},
		{"ToolMessageWithoutID", body(user, asstCalls("call_1"), `{"role":"tool","content":"ok"}`), "messages[2].tool_call_id", "missing_required_parameter",
			"Missing required parameter: 'messages[2].tool_call_id'."},
		{"UnansweredAtEnd", body(user, asstCalls("call_1", "call_2"), tool("call_1")), "messages", null,
			"An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. " +
				"The following tool_call_ids did not have response messages: call_2"},
		{"UnansweredBeforeUser", body(user, asstCalls("call_1", "call_2"), user), "messages.[2].role", null,
			"An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. " +
				"The following tool_call_ids did not have response messages: call_1, call_2"},
		{"OrphanTool", body(user, tool("call_1")), "messages.[1].role", null, chatOrphanTool},
		{"ToolAfterUser", body(user, asstCalls("call_1"), tool("call_1"), user, tool("call_1")), "messages.[4].role", null, chatOrphanTool},
		{"WrongToolCallID", body(user, asstCalls("call_1"), tool("call_9")), "messages.[2].tool_call_id", null,
			"Invalid parameter: 'tool_call_id' of 'call_9' not found in 'tool_calls' of previous message."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := Start(Options{Main: []Step{Say("never")}})
			defer srv.Close()
			resp := postChat(t, srv, tt.body)
			got, _ := io.ReadAll(resp.Body)
			quote := func(s string) string {
				if s == null {
					return null
				}
				b, _ := json.Marshal(s)
				return string(b)
			}
			want := fmt.Sprintf(`{"error":{"message":%s,"type":"invalid_request_error","param":%s,"code":%s}}`,
				quote(tt.message), quote(tt.param), quote(tt.code))
			if resp.StatusCode != http.StatusBadRequest || !jsonEqual(t, want, string(got)) {
				t.Errorf("got %d %s\nwant 400 %s", resp.StatusCode, got, want)
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
		// Parallel calls answered in any order, then the conversation goes
		// on; an image, a developer message and a name are fine.
		resp := postChat(t, srv, body(`{"role":"developer","content":"Be brief."}`,
			`{"role":"user","name":"ann","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}`,
			asstCalls("call_1", "call_2"), tool("call_2"), tool("call_1"), `{"role":"assistant","content":"done"}`, user))
		if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		if err := srv.Err(); err != nil {
			t.Error(err)
		}
	})
}

// jsonEqual reports whether two JSON texts hold the same value.
func jsonEqual(t *testing.T, a, b string) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal([]byte(a), &va); err != nil {
		t.Fatalf("%v: %s", err, a)
	}
	if err := json.Unmarshal([]byte(b), &vb); err != nil {
		return false
	}
	return cmp.Equal(va, vb)
}

func TestChat_AuthAndRoutes(t *testing.T) {
	srv := Start(Options{APIKey: "sk-right-key"})
	defer srv.Close()
	do := func(method, path string, header map[string]string) (int, map[string]any) {
		req, err := http.NewRequestWithContext(t.Context(), method, srv.URL()+path, strings.NewReader(fmt.Sprintf(chatHello, "")))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct{ Error map[string]any }
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, out.Error
	}
	// OpenAI reads the key from Authorization alone: x-api-key is no key.
	status, e := do(http.MethodPost, "/v1/chat/completions", map[string]string{"X-Api-Key": "sk-right-key"})
	if status != http.StatusUnauthorized || !strings.HasPrefix(e["message"].(string), "You didn't provide an API key.") || e["code"] != nil {
		t.Errorf("no bearer: %d %v", status, e)
	}
	status, e = do(http.MethodPost, "/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-wrong-key"})
	if status != http.StatusUnauthorized || e["code"] != "invalid_api_key" || e["type"] != "invalid_request_error" ||
		!strings.HasPrefix(e["message"].(string), "Incorrect API key provided: sk-*****-key.") {
		t.Errorf("wrong key: %d %v", status, e)
	}
	status, e = do(http.MethodGet, "/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-right-key"})
	if status != http.StatusNotFound || e["message"] != "Invalid URL (GET /v1/chat/completions)" {
		t.Errorf("GET: %d %v", status, e)
	}
	if err := srv.Err(); err == nil || !strings.Contains(err.Error(), "Incorrect API key") {
		t.Errorf("Err() = %v", err)
	}
}

func TestChat_ScriptExhausted(t *testing.T) {
	srv := Start(Options{Main: []Step{
		Say("one"),
		Fail(429, "rate_limit_exceeded", "Rate limit reached"),
	}})
	defer srv.Close()
	postChat(t, srv, fmt.Sprintf(chatHello, ""))
	resp := postChat(t, srv, fmt.Sprintf(chatHello, `"stream":true,`))
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 429 || !strings.Contains(string(b), `"type":"rate_limit_exceeded"`) {
		t.Errorf("Fail step: %d %s", resp.StatusCode, b)
	}
	resp = postChat(t, srv, fmt.Sprintf(chatHello, ""))
	var e struct {
		Error struct{ Message, Type string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusInternalServerError || e.Error.Type != "server_error" ||
		!strings.Contains(e.Error.Message, "script exhausted: request 3") || !strings.Contains(e.Error.Message, `"hello there"`) {
		t.Errorf("past the script: %d %+v", resp.StatusCode, e)
	}
	err := srv.Err()
	if err == nil || !strings.Contains(err.Error(), "script exhausted") || strings.Contains(err.Error(), "Rate limit") {
		t.Errorf("Err() = %v; want the exhausted script and not the scripted error", err)
	}
}

// FuzzParseChatRequest checks that no body panics the decoder or the
// validator, and that a refusal always names a message.
func FuzzParseChatRequest(f *testing.F) {
	f.Add(fmt.Sprintf(chatHello, `"stream":true,"stream_options":{"include_usage":true},`))
	f.Add(`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":[{"type":"text","text":"ok"}]}]}`)
	f.Add(`{"model":"m","messages":[{"role":"tool","content":7}],"tools":[{"type":"function"}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		r, e := parseChatRequest([]byte(body))
		if e == nil {
			e = validateChat(r)
		}
		if e != nil && e.msg == "" {
			t.Errorf("a refusal without a message: %+v", e)
		}
	})
}
