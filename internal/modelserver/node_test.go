package modelserver

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/engramhq/engram/internal/pictest"
)

// nodeTimeout bounds one run of a client script; it takes about a second.
const nodeTimeout = 60 * time.Second

// runNodeClient runs testdata/node/script with node against srv, the
// package directory that the environment variable pkgEnv names passed
// on in it, and decodes the JSON it prints into out. It skips the test
// when pkgEnv is unset; set, it must name the package installed.
func runNodeClient(t *testing.T, srv *Server, proxied bool, pkgEnv, pkg, script string, out any) {
	t.Helper()
	dir := os.Getenv(pkgEnv)
	if dir == "" {
		t.Skipf("%s does not name the %s package directory "+
			"(npm install --prefix DIR %s puts it in DIR/node_modules/%s; .ci/run does)", pkgEnv, pkg, pinned[pkg], pkg)
	}
	var manifest struct{ Name, Version string }
	data, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err == nil {
		err = json.Unmarshal(data, &manifest)
	}
	if err != nil || manifest.Name != pkg {
		t.Fatalf("%s=%s does not name the %s package directory: package.json %+v, %v", pkgEnv, dir, pkg, manifest, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("%s is set but node is not on PATH: %v", pkgEnv, err)
	}
	abs, err := filepath.Abs(filepath.Join("testdata", "node", script))
	if err != nil {
		t.Fatal(err)
	}
	url := srv.URL()
	if proxied {
		url = throughProxy(t, srv)
	}
	env := append(os.Environ(), "MODELSERVER_URL="+url, pkgEnv+"="+dir)
	stdout, err := runCLI("node", node, t.TempDir(), env, nodeTimeout, []string{abs})
	if err != nil {
		t.Fatalf("%s %s: %v", pkg, manifest.Version, err)
	}
	if err := json.Unmarshal([]byte(stdout), out); err != nil {
		t.Fatalf("%s: output is not JSON: %v\n%s", script, err, stdout)
	}
	t.Logf("%s %s: %s", pkg, manifest.Version, strings.TrimSpace(stdout))
}

// pinned are the client versions .ci/run installs (openai 6.49 is the
// newest that runs on Node 20: openai 7 needs Node 22).
var pinned = map[string]string{
	"openai":            "openai@6.49.0",
	"@anthropic-ai/sdk": "@anthropic-ai/sdk@1.14.0",
}

// answerSecret is a step answering from the tool result the request
// carries, which must hold the secret word; result reads it.
func answerSecret(result func(*Request) (string, bool)) Step {
	return func(r *Request) (Response, error) {
		got, ok := result(r)
		if !ok || !strings.Contains(got, "PAPAYA") {
			return Response{}, fmt.Errorf("request %d: tool result %q (found %v), want the secret word", r.Seq, got, ok)
		}
		return Response{Content: []Block{Text("The secret word is PAPAYA.")}}, nil
	}
}

// TestNode_OpenAIChat runs the official openai client through tool call
// round trips against the Chat Completions API, streaming and not,
// straight and through engram's proxy.
func TestNode_OpenAIChat(t *testing.T) {
	t.Run("direct", func(t *testing.T) { testNodeOpenAIChat(t, false) })
	t.Run("proxy", func(t *testing.T) { testNodeOpenAIChat(t, true) })
}

func testNodeOpenAIChat(t *testing.T, proxied bool) {
	readNotes := ToolUse("read_file", map[string]any{"path": "notes.txt"})
	answer := answerSecret(func(r *Request) (string, bool) {
		m, ok := r.Chat.LastToolResult()
		if !ok {
			return "", false
		}
		if _, ok := r.Chat.ToolResult(m.ToolCallID); !ok {
			return "", false
		}
		return m.Text(), true
	})
	srv := Start(Options{Main: []Step{
		Reply(readNotes), answer, // JSON
		Reply(Text("Let me read it."), readNotes), answer, // the raw stream
		Reply(Text("Reading."), readNotes), answer, // the stream helper
	}})
	defer srv.Close()

	type call struct {
		ID       string
		Type     string
		Function ChatFunctionCall
	}
	type usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	}
	type turn struct {
		Role, Content string
		Calls         []call
		Finish        string
		Usage         *usage
		Chunks        int
	}
	var out struct {
		JSON struct {
			Object      string
			Finish      []string
			Call        call
			CallContent *string
			Answer      string
			Usage       usage
		}
		Stream struct{ First, Second turn }
		Helper struct {
			Finish []string
			Call   call
			Usage  usage
			Answer string
			Pieces int
		}
		Refusal struct {
			Name, Type, Param, Message string
			Status                     int
			Code                       *string
		}
	}
	runNodeClient(t, srv, proxied, "ENGRAM_TEST_NODE_OPENAI", "openai", "openai_chat.mjs", &out)

	args := `{"path":"notes.txt"}`
	isCall := func(c call) bool {
		return strings.HasPrefix(c.ID, "call_mdl") && c.Type == "function" && c.Function == ChatFunctionCall{Name: "read_file", Arguments: args}
	}
	j := out.JSON
	if j.Object != "chat.completion" || !cmp.Equal(j.Finish, []string{"tool_calls", "stop"}) || !isCall(j.Call) || j.CallContent != nil ||
		j.Answer != "The secret word is PAPAYA." || j.Usage.PromptTokens < 20 || j.Usage.TotalTokens != j.Usage.PromptTokens+j.Usage.CompletionTokens {
		t.Errorf("without streaming: %+v", j)
	}
	s := out.Stream
	if s.First.Role != "assistant" || s.First.Content != "Let me read it." || len(s.First.Calls) != 1 || !isCall(s.First.Calls[0]) ||
		s.First.Finish != "tool_calls" || s.First.Usage == nil || s.First.Usage.PromptTokens < 20 || s.First.Chunks < 8 ||
		s.Second.Content != "The secret word is PAPAYA." || s.Second.Finish != "stop" || len(s.Second.Calls) != 0 || s.Second.Usage == nil {
		t.Errorf("the raw stream: %+v", s)
	}
	h := out.Helper
	if !cmp.Equal(h.Finish, []string{"tool_calls", "stop"}) || !isCall(h.Call) || h.Usage.TotalTokens == 0 ||
		h.Answer != "The secret word is PAPAYA." || h.Pieces < 2 {
		t.Errorf("the stream helper: %+v", h)
	}
	r := out.Refusal
	if r.Name != "BadRequestError" || r.Status != http.StatusBadRequest || r.Type != "invalid_request_error" || r.Param != "messages.[0].role" ||
		r.Code != nil || r.Message != chatOrphanTool {
		t.Errorf("refusal: %+v", r)
	}

	if srv.Remaining() != 0 {
		t.Errorf("%d steps left", srv.Remaining())
	}
	reqs := srv.Requests()
	for _, r := range reqs[:len(reqs)-1] {
		if r.Status != http.StatusOK || r.Chat == nil || !r.Chat.HasTool("read_file") {
			t.Errorf("request %d: status %d %s", r.Seq, r.Status, r.Error)
		}
	}
	// The helper sends "stream": true itself; the raw stream's requests
	// and the helper's first ask for the usage.
	var streamed []bool
	for _, r := range reqs {
		streamed = append(streamed, r.Chat.Stream && r.Chat.IncludeUsage)
	}
	if diff := cmp.Diff([]bool{false, false, true, true, true, false, false}, streamed); diff != "" {
		t.Errorf("stream with usage, by request (-want +got):\n%s", diff)
	}
	if err := srv.Err(); err == nil || strings.Count(err.Error(), "\n") != 0 || !strings.Contains(err.Error(), "role 'tool'") {
		t.Errorf("Err() = %v; want the one refusal the script asked for", err)
	}
}

// TestNode_AnthropicMessages runs the official @anthropic-ai/sdk client
// through tool use round trips against the Messages API, streaming and
// not, straight and through engram's proxy.
func TestNode_AnthropicMessages(t *testing.T) {
	t.Run("direct", func(t *testing.T) { testNodeAnthropicMessages(t, false) })
	t.Run("proxy", func(t *testing.T) { testNodeAnthropicMessages(t, true) })
}

func testNodeAnthropicMessages(t *testing.T, proxied bool) {
	readNotes := ToolUse("read_file", map[string]any{"path": "notes.txt"})
	answer := answerSecret(func(r *Request) (string, bool) {
		u := r.Params.LastUser()
		if u == nil {
			return "", false
		}
		for _, b := range u.Content {
			if b.Type == "tool_result" {
				res, ok := r.Params.ToolResult(b.ToolUseID)
				return res.ResultText(), ok
			}
		}
		return "", false
	})
	srv := Start(Options{Main: []Step{
		Reply(Text("Let me read it."), readNotes), answer, // JSON
		Reply(Text("Let me read it."), readNotes), answer, // the stream helper
	}})
	defer srv.Close()

	type use struct {
		ID, Name string
		Input    map[string]any
	}
	type turns struct {
		Stop   []string
		Types  []string
		Use    use
		Answer string
		Pieces int
		Usage  struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		}
	}
	var out struct {
		JSON, Stream turns
		Refusal      struct {
			Name, Type, Message string
			Status              int
		}
	}
	runNodeClient(t, srv, proxied, "ENGRAM_TEST_NODE_ANTHROPIC", "@anthropic-ai/sdk", "anthropic_messages.mjs", &out)

	for name, got := range map[string]turns{"without streaming": out.JSON, "the stream helper": out.Stream} {
		if !cmp.Equal(got.Stop, []string{"tool_use", "end_turn"}) || !cmp.Equal(got.Types, []string{"text", "tool_use"}) ||
			!strings.HasPrefix(got.Use.ID, "toolu_mdl") || got.Use.Name != "read_file" || !cmp.Equal(got.Use.Input, map[string]any{"path": "notes.txt"}) ||
			got.Answer != "The secret word is PAPAYA." || got.Usage.InputTokens < 20 || got.Usage.OutputTokens < 1 {
			t.Errorf("%s: %+v", name, got)
		}
	}
	if out.Stream.Pieces < 2 {
		t.Errorf("the stream helper saw the answer in %d pieces, want several", out.Stream.Pieces)
	}
	r := out.Refusal
	if r.Name != "BadRequestError" || r.Status != http.StatusBadRequest || r.Type != "invalid_request_error" ||
		!strings.Contains(r.Message, "unexpected `tool_use_id` found in `tool_result` blocks: toolu_x") {
		t.Errorf("refusal: %+v", r)
	}
	if srv.Remaining() != 0 {
		t.Errorf("%d steps left", srv.Remaining())
	}
	reqs := srv.Requests()
	var streamed []bool
	for _, r := range reqs {
		streamed = append(streamed, r.Params.Stream)
	}
	if diff := cmp.Diff([]bool{false, false, true, true, false}, streamed); diff != "" {
		t.Errorf("stream, by request (-want +got):\n%s", diff)
	}
	if err := srv.Err(); err == nil || strings.Count(err.Error(), "\n") != 0 || !strings.Contains(err.Error(), "toolu_x") {
		t.Errorf("Err() = %v; want the one refusal the script asked for", err)
	}
}

// TestNode_OpenAIAudio runs the official openai client through engram's
// proxy with a recording (input_audio) asked about over three streamed
// turns: every request reaches the model with the recording, which the
// proxy's window counts as OpenAI does (30 seconds, 300 tokens), not as
// the text of its base64 (1.8 MB), which it evicted at once.
func TestNode_OpenAIAudio(t *testing.T) {
	wav := pictest.NoiseWAVBase64(30, 22050, 16)
	raw, err := base64.StdEncoding.DecodeString(wav)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "bark.wav")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AUDIO_FILE", path)
	srv := Start(Options{Main: []Step{Say("A dog barks."), Say("Twice."), Say("It sounds large.")}})
	defer srv.Close()
	var out struct{ Answers []string }
	runNodeClient(t, srv, true, "ENGRAM_TEST_NODE_OPENAI", "openai", "openai_audio.mjs", &out)
	if want := []string{"A dog barks.", "Twice.", "It sounds large."}; !cmp.Equal(out.Answers, want) {
		t.Errorf("answers %q, want %q", out.Answers, want)
	}
	for _, r := range srv.Requests() {
		if !strings.Contains(string(r.Body), wav[:200]) {
			t.Errorf("request %d reached the model without the recording: %.300s", r.Seq, r.Body)
		}
	}
}

// TestNode_OpenAIResponses runs the official openai client through
// function call round trips against the Responses API, the one Codex
// speaks, streaming and not, straight and through engram's proxy.
func TestNode_OpenAIResponses(t *testing.T) {
	t.Run("direct", func(t *testing.T) { testNodeOpenAIResponses(t, false) })
	t.Run("proxy", func(t *testing.T) { testNodeOpenAIResponses(t, true) })
}

func testNodeOpenAIResponses(t *testing.T, proxied bool) {
	readNotes := ToolUse("read_file", map[string]any{"path": "notes.txt"})
	answer := answerSecret(func(r *Request) (string, bool) {
		it, ok := r.Responses.LastOutput()
		if !ok {
			return "", false
		}
		if _, ok := r.Responses.FunctionOutput(it.CallID); !ok {
			return "", false
		}
		return it.OutputText(), true
	})
	srv := Start(Options{Main: []Step{
		Reply(readNotes), answer, // JSON
		Reply(Text("Let me read it."), readNotes), answer, // the raw stream
		Reply(Text("Reading."), readNotes), answer, // the stream helper
	}})
	defer srv.Close()

	type call struct{ Type, Name, Arguments, CallID string }
	type usage struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
		TotalTokens  int `json:"total_tokens"`
	}
	var out struct {
		JSON struct {
			Object, Answer string
			Status         []string
			Call           call
			Usage          usage
		}
		Stream struct {
			First struct {
				Call                             call
				Args, Text, Status, Begins, Ends string
				Events                           int
			}
			Second struct {
				Text, Answer, Status, Ends string
				Usage                      *usage
			}
		}
		Helper struct {
			Call   call
			Answer string
			Pieces int
			Usage  usage
		}
		Refusal struct {
			Name, Type, Param, Message string
			Status                     int
		}
	}
	runNodeClient(t, srv, proxied, "ENGRAM_TEST_NODE_OPENAI", "openai", "openai_responses.mjs", &out)

	args := `{"path":"notes.txt"}`
	isCall := func(c call) bool {
		return strings.HasPrefix(c.CallID, "call_mdl") && c.Type == "function_call" && c.Name == "read_file" && c.Arguments == args
	}
	j := out.JSON
	if j.Object != "response" || !cmp.Equal(j.Status, []string{"completed", "completed"}) || !isCall(j.Call) ||
		j.Answer != "The secret word is PAPAYA." || j.Usage.InputTokens < 20 || j.Usage.TotalTokens != j.Usage.InputTokens+j.Usage.OutputTokens {
		t.Errorf("without streaming: %+v", j)
	}
	s := out.Stream
	if !isCall(s.First.Call) || s.First.Args != args || s.First.Text != "Let me read it." || s.First.Status != "completed" ||
		s.First.Begins != "response.created" || s.First.Ends != "response.completed" || s.First.Events < 8 ||
		s.Second.Text != "The secret word is PAPAYA." || s.Second.Answer != s.Second.Text || s.Second.Status != "completed" ||
		s.Second.Ends != "response.completed" || s.Second.Usage == nil || s.Second.Usage.InputTokens < 20 {
		t.Errorf("the raw stream: %+v", s)
	}
	h := out.Helper
	if !isCall(h.Call) || h.Answer != "The secret word is PAPAYA." || h.Pieces < 2 || h.Usage.TotalTokens == 0 {
		t.Errorf("the stream helper: %+v", h)
	}
	r := out.Refusal
	if r.Name != "BadRequestError" || r.Status != http.StatusBadRequest || r.Type != "invalid_request_error" || r.Param != "input" ||
		!strings.Contains(r.Message, "No tool call found for function call output with call_id call_orphan") {
		t.Errorf("refusal: %+v", r)
	}

	if srv.Remaining() != 0 {
		t.Errorf("%d steps left", srv.Remaining())
	}
	reqs := srv.Requests()
	var streamed []bool
	for _, r := range reqs[:len(reqs)-1] {
		if r.Status != http.StatusOK || r.Responses == nil || !r.Responses.HasTool("read_file") {
			t.Errorf("request %d: status %d %s", r.Seq, r.Status, r.Error)
			continue
		}
		streamed = append(streamed, r.Responses.Stream)
	}
	if diff := cmp.Diff([]bool{false, false, true, true, true, true}, streamed); diff != "" {
		t.Errorf("streamed, by request (-want +got):\n%s", diff)
	}
	if err := srv.Err(); err == nil || strings.Count(err.Error(), "\n") != 0 || !strings.Contains(err.Error(), "call_orphan") {
		t.Errorf("Err() = %v; want the one refusal the script asked for", err)
	}
}
