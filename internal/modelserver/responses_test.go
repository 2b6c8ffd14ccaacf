package modelserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// postResponses sends body to /v1/responses with the headers Codex sends.
func postResponses(t *testing.T, srv *Server, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL()+"/v1/responses", strings.NewReader(body))
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

const codexHello = `{"model":"gpt-5-codex","stream":%v,"store":false,"tools":[{"type":"function","name":"exec_command","parameters":{"type":"object"}},` +
	`{"type":"namespace","name":"mcp__engram","tools":[{"type":"function","name":"record","parameters":{"type":"object"}}]},{"type":"web_search"}],` +
	`"input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"You are a coding agent."}]},` +
	`{"type":"message","role":"user","content":[{"type":"input_text","text":"hello there"}]}]}`

func TestResponses_Stream(t *testing.T) {
	record := ToolUse("record", map[string]any{"type": "note", "content": "x"})
	record.Namespace = "mcp__engram"
	srv := Start(Options{Main: []Step{Reply(
		Text("Let me run it."),
		ToolUse("exec_command", map[string]any{"cmd": "ls -la"}),
		record,
	)}})
	defer srv.Close()
	resp := postResponses(t, srv, fmt.Sprintf(codexHello, true))
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := readSSE(t, resp.Body)
	var names []string
	text, args := "", ""
	var done []map[string]any
	var completed map[string]any
	for i, e := range events {
		names = append(names, e.Name)
		if e.Data["sequence_number"] != float64(i) {
			t.Errorf("event %d (%s): sequence_number %v", i, e.Name, e.Data["sequence_number"])
		}
		switch e.Name {
		case "response.output_text.delta":
			text += e.Data["delta"].(string)
		case "response.function_call_arguments.delta":
			args += e.Data["delta"].(string)
		case "response.output_item.done":
			done = append(done, e.Data["item"].(map[string]any))
		case "response.completed":
			completed = e.Data["response"].(map[string]any)
		}
	}
	want := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
		"response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
		"response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
		"response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
		"response.completed"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if text != "Let me run it." || !strings.HasPrefix(args, `{"cmd":"ls -la"}`) {
		t.Errorf("text %q, arguments %q", text, args)
	}
	if len(done) != 3 || done[1]["type"] != "function_call" || done[1]["name"] != "exec_command" ||
		!strings.HasPrefix(done[1]["call_id"].(string), "call_") || done[2]["namespace"] != "mcp__engram" || done[2]["name"] != "record" {
		t.Errorf("items = %v", done)
	}
	usage, _ := completed["usage"].(map[string]any)
	if completed["status"] != "completed" || len(completed["output"].([]any)) != 3 || usage["input_tokens"].(float64) < 10 ||
		usage["output_tokens"].(float64) < 1 || usage["total_tokens"] != usage["input_tokens"].(float64)+usage["output_tokens"].(float64) {
		t.Errorf("response.completed = %v", completed)
	}
	reqs := srv.Requests()
	if err := srv.Err(); err != nil || len(reqs) != 1 || reqs[0].Kind != KindMain || reqs[0].Responses.LastUser().Text() != "hello there" ||
		!reqs[0].Responses.HasTool("record") || reqs[0].Header.Get("Authorization") != "" {
		t.Errorf("recorded %+v, %v", reqs, err)
	}
}

func TestResponses_JSON(t *testing.T) {
	srv := Start(Options{Main: []Step{Say("Hi.")}})
	defer srv.Close()
	var out struct {
		Object, Status string
		Output         []struct {
			Type, Role string
			Content    []Part
		}
		Usage struct {
			InputTokens int `json:"input_tokens"`
		}
	}
	if err := json.NewDecoder(postResponses(t, srv, fmt.Sprintf(codexHello, false)).Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.Object != "response" || out.Status != "completed" || len(out.Output) != 1 || out.Output[0].Role != "assistant" ||
		out.Output[0].Content[0].Text != "Hi." || out.Usage.InputTokens < 10 {
		t.Errorf("response = %+v", out)
	}
}

// A compaction is a side request; a main request past the script is a
// clear 500.
func TestResponses_CompactAndExhausted(t *testing.T) {
	srv := Start(Options{})
	defer srv.Close()
	compact := `{"model":"gpt-5-codex","stream":true,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]},` +
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary."}]}]}`
	if resp := postResponses(t, srv, compact); resp.StatusCode != http.StatusOK {
		t.Errorf("compaction: status %d", resp.StatusCode)
	}
	resp := postResponses(t, srv, fmt.Sprintf(codexHello, true))
	var e struct {
		Error struct{ Message, Type string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusInternalServerError || e.Error.Type != "server_error" || !strings.Contains(e.Error.Message, "script exhausted") ||
		!strings.Contains(e.Error.Message, `"hello there"`) {
		t.Errorf("past the script: %d %+v", resp.StatusCode, e)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 || reqs[0].Kind != KindCompact || reqs[1].Kind != KindMain {
		t.Errorf("kinds: %+v", reqs)
	}
	if err := srv.Err(); err == nil || !strings.Contains(err.Error(), "script exhausted") {
		t.Errorf("Err() = %v", err)
	}
}

func TestResponses_Invalid(t *testing.T) {
	msg := func(role, typ, text string) string {
		return fmt.Sprintf(`{"type":"message","role":%q,"content":[{"type":%q,"text":%q}]}`, role, typ, text)
	}
	call := `{"type":"function_call","name":"exec_command","arguments":"{}","call_id":"call_1"}`
	output := `{"type":"function_call_output","call_id":"call_1","output":"ok"}`
	reasoning := `{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"}`
	body := func(items ...string) string {
		return `{"model":"gpt-5-codex","input":[` + strings.Join(items, ",") + `]}`
	}
	// toolOutput answers call_1 with parts, as Codex answers an MCP tool.
	toolOutput := func(parts ...string) string {
		return `{"type":"function_call_output","call_id":"call_1","output":[` + strings.Join(parts, ",") + `]}`
	}
	for _, tc := range []struct{ name, body, param, message string }{
		{"no model", `{"input":"hi"}`, "model", "Missing required parameter: 'model'."},
		{"no input", `{"model":"m"}`, "input", "Missing required parameter: 'input'."},
		{"unknown item", body(`{"type":"telepathy"}`), "input[0].type", "Invalid value: 'telepathy'."},
		{"bad role", body(msg("robot", "input_text", "x")), "input[0].role", "Invalid value: 'robot'."},
		{"output part from the user", body(msg("user", "output_text", "x")), "input[0].content[0]", "Invalid value: 'output_text'."},
		{"output without its call", body(msg("user", "input_text", "x"), output), "input", "No tool call found for function call output with call_id call_1."},
		{"call without its output", body(msg("user", "input_text", "x"), call), "input", "No tool output found for function call call_1."},
		{"reasoning last", body(msg("user", "input_text", "x"), reasoning), "input", "Item 'rs_1' of type 'reasoning' was provided without its required following item."},
		{"reasoning before a prompt", body(msg("user", "input_text", "x"), reasoning, msg("user", "input_text", "y")), "input",
			"Item 'rs_1' of type 'reasoning' was provided without its required following item."},
		{"output part from a tool", body(msg("user", "input_text", "x"), call, toolOutput(`{"type":"output_text","text":"ok"}`)), "input[2].output[0]", "Invalid value: 'output_text'."},
		{"tool output neither text nor parts", body(msg("user", "input_text", "x"), call, `{"type":"function_call_output","call_id":"call_1","output":5}`),
			"input[2].output", "Invalid type for 'input[2].output': expected a string or an array of content parts."},
		{"tool picture without a picture", body(msg("user", "input_text", "x"), call, toolOutput(`{"type":"input_image","detail":"high"}`)),
			"input[2].output[0]", "Invalid 'input[2].output[0]': an input_image needs an 'image_url' or a 'file_id'."},
		{"tool picture of text", body(msg("user", "input_text", "x"), call, toolOutput(`{"type":"input_image","image_url":"data:text/plain;base64,aGk="}`)),
			"input[2].output[0].image_url", "Invalid 'input[2].output[0].image_url'. Expected a base64-encoded data URL with an image MIME type"},
		{"tool picture not base64", body(msg("user", "input_text", "x"), call, toolOutput(`{"type":"input_image","image_url":"data:image/png;base64,iVBO?!"}`)),
			"input[2].output[0].image_url", "Invalid 'input[2].output[0].image_url'. Expected a base64-encoded data URL with an image MIME type, but its data is not base64"},
		{"user picture without a picture", body(`{"type":"message","role":"user","content":[{"type":"input_image"}]}`),
			"input[0].content[0]", "Invalid 'input[0].content[0]': an input_image needs an 'image_url' or a 'file_id'."},
		{"computer screenshot of text", body(msg("user", "input_text", "x"), `{"type":"computer_call","call_id":"call_1","action":{"type":"screenshot"},"pending_safety_checks":[],"status":"completed"}`,
			`{"type":"computer_call_output","call_id":"call_1","output":{"type":"computer_screenshot","image_url":"data:text/plain;base64,aGk="}}`),
			"input[2].output.image_url", "Invalid 'input[2].output.image_url'. Expected a base64-encoded data URL with an image MIME type"},
		{"computer output not a screenshot", body(msg("user", "input_text", "x"), `{"type":"computer_call","call_id":"call_1","action":{"type":"screenshot"},"pending_safety_checks":[],"status":"completed"}`,
			`{"type":"computer_call_output","call_id":"call_1","output":"done"}`),
			"input[2].output", "Invalid 'input[2].output': expected an object of type 'computer_screenshot'."},
		{"computer output without its call", body(msg("user", "input_text", "x"), `{"type":"computer_call_output","call_id":"call_1","output":{"type":"computer_screenshot","image_url":"data:image/png;base64,iVBO"}}`),
			"input", "No tool call found for function call output with call_id call_1."},
		{"function without a name", `{"model":"m","input":"hi","tools":[{"type":"function"}]}`, "tools[0].name", "Missing required parameter: 'tools[0].name'."},
		{"stored conversation", `{"model":"m","input":"hi","previous_response_id":"resp_1"}`, "previous_response_id", "Previous response with id 'resp_1' not found."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := Start(Options{Main: []Step{Say("never")}})
			defer srv.Close()
			resp := postResponses(t, srv, tc.body)
			var e struct {
				Error struct {
					Message, Type string
					Param         *string
				}
			}
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusBadRequest || e.Error.Type != "invalid_request_error" || e.Error.Param == nil ||
				*e.Error.Param != tc.param || !strings.HasPrefix(e.Error.Message, tc.message) {
				t.Errorf("%d %+v (param %v); want 400 on %s: %s", resp.StatusCode, e.Error, e.Error.Param, tc.param, tc.message)
			}
			if srv.Err() == nil || srv.Remaining() != 1 {
				t.Errorf("Err() = %v, %d steps left; want the refusal reported and the step kept", srv.Err(), srv.Remaining())
			}
		})
	}
	// A valid pair passes.
	srv := Start(Options{Main: []Step{Say("ok")}})
	defer srv.Close()
	if resp := postResponses(t, srv, body(msg("user", "input_text", "x"), reasoning, call, output)); resp.StatusCode != http.StatusOK {
		t.Errorf("reasoning, a call and its output: status %d", resp.StatusCode)
	}
	// So does a tool's output of text and a picture, as Codex sends an MCP
	// tool's text and image content.
	srv = Start(Options{Main: []Step{Say("ok")}})
	defer srv.Close()
	picture := toolOutput(`{"type":"input_text","text":"Wall time: 0.1 seconds\nOutput:"}`, `{"type":"input_text","text":"the login page"}`,
		`{"type":"input_image","image_url":"data:image/png;base64,iVBORw0KGgo=","detail":"high"}`)
	if resp := postResponses(t, srv, body(msg("user", "input_text", "x"), call, picture)); resp.StatusCode != http.StatusOK {
		t.Errorf("a call and its output of text and a picture: status %d", resp.StatusCode)
	}
	if err := srv.Err(); err != nil {
		t.Error(err)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests recorded, want 1", len(reqs))
	}
	it, _ := reqs[0].Responses.LastOutput()
	parts, err := it.OutputParts()
	want := []Part{{Type: "input_text", Text: "Wall time: 0.1 seconds\nOutput:"}, {Type: "input_text", Text: "the login page"},
		{Type: "input_image", ImageURL: "data:image/png;base64,iVBORw0KGgo=", Detail: "high"}}
	if diff := cmp.Diff(want, parts); diff != "" || err != nil {
		t.Errorf("OutputParts (%v) mismatch (-want +got):\n%s", err, diff)
	}
	if err := srv.Err(); err != nil {
		t.Error(err)
	}
}

// An item the server made right after a reasoning item is refused
// without it, as the API refuses it; with it, the request passes.
func TestResponses_ReasoningRequired(t *testing.T) {
	srv := Start(Options{Main: []Step{
		Reply(Block{Type: "thinking", Thinking: "Look first."}, ToolUse("exec_command", map[string]any{"cmd": "ls"})),
		Say("Done."), Say("Done."),
	}})
	defer srv.Close()
	var out struct{ Output []json.RawMessage }
	if err := json.NewDecoder(postResponses(t, srv, fmt.Sprintf(codexHello, false)).Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if len(out.Output) != 2 {
		t.Fatalf("%d output items, want the reasoning and the call", len(out.Output))
	}
	var rs, fc Item
	if json.Unmarshal(out.Output[0], &rs) != nil || json.Unmarshal(out.Output[1], &fc) != nil || rs.Type != "reasoning" || fc.Type != "function_call" {
		t.Fatalf("output %s, want a reasoning item and a call", out.Output)
	}
	prompt := `{"type":"message","role":"user","content":[{"type":"input_text","text":"hello there"}]}`
	output := fmt.Sprintf(`{"type":"function_call_output","call_id":%q,"output":"a.go"}`, fc.CallID)
	body := func(items ...string) string {
		return `{"model":"gpt-5-codex","input":[` + strings.Join(items, ",") + `]}`
	}
	resp := postResponses(t, srv, body(prompt, string(out.Output[1]), output))
	var e struct{ Error struct{ Message string } }
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("Item '%s' of type 'function_call' was provided without its required 'reasoning' item: '%s'.", fc.ID, rs.ID)
	if resp.StatusCode != http.StatusBadRequest || e.Error.Message != want {
		t.Errorf("the call without its reasoning: %d %q, want 400 %q", resp.StatusCode, e.Error.Message, want)
	}
	if resp := postResponses(t, srv, body(prompt, string(out.Output[0]), string(out.Output[1]), output)); resp.StatusCode != http.StatusOK {
		t.Errorf("the call with its reasoning: status %d", resp.StatusCode)
	}
}
