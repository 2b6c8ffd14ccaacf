package modelserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Response is what the server answers one request with: content blocks
// and a stop reason, or an API error.
type Response struct {
	Content []Block
	// StopReason is "tool_use" when empty and Content has a tool_use
	// block, else "end_turn" when empty.
	StopReason string
	// Error, when set, is answered instead of a message.
	Error *APIError
	// Pace, when positive, spaces a streamed answer's events: each is
	// sent Pace after the one before (the first at once), as a model
	// generating slowly does; a client that goes away ends the waits.
	// Zero sends them all at once. A non-streamed answer ignores it.
	Pace time.Duration
}

// APIError is an error answered in Anthropic's shape,
// {"type":"error","error":{"type":Type,"message":Message}}, or to a
// Responses or Chat Completions request in OpenAI's,
// {"error":{"message":Message,"type":Type,"param":Param,"code":Code}},
// with Status.
type APIError struct {
	Status  int
	Type    string
	Message string
	// Param and Code are OpenAI's: the parameter at fault, and a code
	// such as invalid_api_key. Empty is null.
	Param string
	Code  string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Type, e.Message)
}

// Step answers one request of a script. An error it returns is a bug in
// the test: the request is answered 500 and the error reported by
// Server.Err.
type Step func(*Request) (Response, error)

// Text is a text block.
func Text(s string) Block { return Block{Type: "text", Text: s} }

// ToolUse is a tool_use block calling the tool name with input, which is
// encoded as JSON (a map, a struct or a json.RawMessage). Its id is made
// when the reply is sent; set ID to choose it. ToolUse panics if input does
// not encode to a JSON object: that is a mistake in the test's script.
func ToolUse(name string, input any) Block {
	data, err := json.Marshal(input)
	if err != nil || len(data) == 0 || data[0] != '{' {
		panic(fmt.Sprintf("modelserver.ToolUse(%q): input must encode to a JSON object: %s (%v)", name, data, err))
	}
	return Block{Type: "tool_use", Name: name, Input: data}
}

// Reply is a Step answering with blocks.
func Reply(blocks ...Block) Step {
	return func(*Request) (Response, error) { return Response{Content: blocks}, nil }
}

// Say is a Step answering with one text block.
func Say(text string) Step { return Reply(Text(text)) }

// Call is a Step answering with one tool_use of name with input.
func Call(name string, input any) Step { return Reply(ToolUse(name, input)) }

// Fail is a Step answering with an API error, such as
// Fail(529, "overloaded_error", "Overloaded").
func Fail(status int, typ, message string) Step {
	return func(*Request) (Response, error) {
		return Response{Error: &APIError{Status: status, Type: typ, Message: message}}, nil
	}
}

// Kind is what a request is for, as Classify tells from its content.
type Kind string

// The kinds of request Classify tells apart. Main-conversation requests
// (KindMain) take the script's steps in order; the others are side
// requests answered by Options.Side.
const (
	// KindMain is a turn of the main conversation, or of a sub-agent's
	// (sub-agents run while the main conversation waits for their tool
	// call, so one ordered script serves both).
	KindMain Kind = "main"
	// KindCompact asks for a summary of the conversation so far (/compact,
	// auto-compaction).
	KindCompact Kind = "compact"
	// KindTitle asks for a short title of the session, without tools.
	KindTitle Kind = "title"
	// KindQuota is a one-token probe of the key and quota.
	KindQuota Kind = "quota"
	// KindCountTokens is a POST /v1/messages/count_tokens.
	KindCountTokens Kind = "count_tokens"
)

// compactMarker begins the instructions Claude Code appends to the last
// user message when it asks for a compaction summary; codexCompactMarker
// is in the user message Codex appends for its own.
const (
	compactMarker      = "Your task is to create a detailed summary of the conversation so far"
	codexCompactMarker = "You are performing a CONTEXT CHECKPOINT COMPACTION"
)

// Classify tells what a request is for. It is the default of
// Options.Classify. The rules, first match wins:
//
//   - the path ends in /count_tokens: KindCountTokens;
//   - the last user message contains "Your task is to create a detailed
//     summary of the conversation so far": KindCompact. Claude Code 2.1
//     sends the whole conversation with the same system prompt and tools
//     and appends these instructions to the last user message: as a
//     message of their own for /compact, as the last text block of the
//     message with the new prompt for auto-compaction;
//   - max_tokens is 1 and the last user message is "quota": KindQuota;
//   - no tools are offered and the system prompt asks for a title:
//     KindTitle;
//   - otherwise KindMain. Sub-agents are KindMain too; they are told apart,
//     if need be, by their system prompt and tools (no Agent tool).
//
// Claude Code 2.1.121 in -p mode sends no title or quota requests (nor
// any other side request); the two rules are for interactive sessions
// and older versions.
//
// A Responses API request (Codex) is KindCompact when it offers no tools
// and its last user message contains "You are performing a CONTEXT
// CHECKPOINT COMPACTION" (Codex 0.171 sends the conversation so far, the
// same instructions, no tools, and that prompt as a user message last),
// else KindMain. Codex 0.171.0 in exec mode sends no other side request.
//
// A Chat Completions request is KindMain: no harness engram runs sends
// side requests there yet.
func Classify(r *Request) Kind {
	if strings.HasSuffix(r.Path, "/count_tokens") {
		return KindCountTokens
	}
	if r.Chat != nil {
		return KindMain
	}
	if p := r.Responses; p != nil {
		if len(p.Tools) == 0 && strings.Contains(responsesLastUserText(p), codexCompactMarker) {
			return KindCompact
		}
		return KindMain
	}
	p := r.Params
	if p == nil {
		return KindMain
	}
	last := lastUserText(p)
	switch {
	case strings.Contains(last, compactMarker):
		return KindCompact
	case p.MaxTokens == 1 && strings.TrimSpace(last) == "quota":
		return KindQuota
	case len(p.Tools) == 0 && strings.Contains(strings.ToLower(p.SystemText()), "title"):
		return KindTitle
	}
	return KindMain
}

// DefaultSide answers side requests so that Claude Code carries on: a
// summary for a compaction, a JSON title for a title request, "ok" for the
// rest. It is the default of Options.Side.
func DefaultSide(r *Request) (Response, error) {
	switch r.Kind {
	case KindCompact:
		return Response{Content: []Block{Text("<analysis>\nThe conversation so far, scripted.\n</analysis>\n\n" +
			"<summary>\n1. Primary Request and Intent:\n   A scripted test session (summary by modelserver).\n</summary>")}}, nil
	case KindTitle:
		return Response{Content: []Block{Text(`{"title": "Scripted session"}`)}}, nil
	default:
		return Response{Content: []Block{Text("ok")}}, nil
	}
}

// errScriptDone is answered, 500, to a main request that has no step left.
func errScriptDone(r *Request) *APIError {
	if r.Chat != nil {
		return &APIError{Status: http.StatusInternalServerError, Type: "server_error",
			Message: fmt.Sprintf("modelserver: script exhausted: request %d (%s %s, %d messages, last user message %.120q) has no step left",
				r.Seq, r.Kind, r.Path, len(r.Chat.Messages), chatLastUserText(r.Chat))}
	}
	if r.Responses != nil {
		return &APIError{Status: http.StatusInternalServerError, Type: "server_error",
			Message: fmt.Sprintf("modelserver: script exhausted: request %d (%s %s, %d input items, last user message %.120q) has no step left",
				r.Seq, r.Kind, r.Path, len(r.Responses.Input), responsesLastUserText(r.Responses))}
	}
	return &APIError{Status: http.StatusInternalServerError, Type: "api_error",
		Message: fmt.Sprintf("modelserver: script exhausted: request %d (%s %s, %d messages, last user message %.120q) has no step left",
			r.Seq, r.Kind, r.Path, len(r.Params.Messages), lastUserText(r.Params))}
}

func lastUserText(p *MessagesRequest) string {
	if p == nil {
		return ""
	}
	if u := p.LastUser(); u != nil {
		return u.Text()
	}
	return ""
}
