package modelserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// The Chat Completions API (POST /v1/chat/completions). A scripted
// Response is sent as one choice: its text blocks, joined by blank lines,
// as message.content (null when there are none), its tool_use blocks as
// tool_calls (a function with the Input as arguments, the ID as id);
// thinking blocks are not sent, as the API sends no reasoning.

// chatFingerprint is the system_fingerprint of every reply.
const chatFingerprint = "fp_modelserver"

// answerChat answers a POST /v1/chat/completions; see answer.
func (s *Server) answerChat(w http.ResponseWriter, hr *http.Request, req *Request) (int, *answerError) {
	fail := func(status int, typ string, e *chatError) (int, *answerError) {
		ae := &APIError{Status: status, Type: typ, Message: e.msg, Param: e.param, Code: e.code}
		s.writeResponsesError(w, ae)
		return status, &answerError{APIError: ae}
	}
	if hr.Method != http.MethodPost || hr.URL.Path != "/v1/chat/completions" {
		return fail(http.StatusNotFound, "invalid_request_error", &chatError{msg: fmt.Sprintf("Invalid URL (%s %s)", hr.Method, hr.URL.Path)})
	}
	if e := s.authenticateBearer(hr); e != nil {
		return fail(http.StatusUnauthorized, "invalid_request_error", e)
	}
	body, err := io.ReadAll(io.LimitReader(hr.Body, MaxBodyBytes+1))
	if err != nil {
		return fail(http.StatusBadRequest, "invalid_request_error", &chatError{msg: "could not read the request body: " + err.Error()})
	}
	req.Body = body
	if len(body) > MaxBodyBytes {
		return fail(http.StatusRequestEntityTooLarge, "invalid_request_error", &chatError{msg: "Request too large."})
	}
	if !json.Valid(body) || !bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")) {
		return fail(http.StatusBadRequest, "invalid_request_error", &chatError{msg: chatUnparsable})
	}
	params, e := parseChatRequest(body)
	if e != nil {
		return fail(http.StatusBadRequest, "invalid_request_error", e)
	}
	req.Chat = params
	req.Kind = s.opts.Classify(req)
	if e := validateChat(params); e != nil {
		return fail(http.StatusBadRequest, "invalid_request_error", e)
	}
	req.InputTokens = s.countChatInput(params)
	step, err := s.step(req)
	if err != nil {
		msg := err.Error()
		if e, ok := err.(*APIError); ok {
			msg = e.Message
		}
		return fail(http.StatusInternalServerError, "server_error", &chatError{msg: msg})
	}
	resp, err := runStep(step, req)
	if err != nil {
		return fail(http.StatusInternalServerError, "server_error",
			&chatError{msg: fmt.Sprintf("modelserver: step for request %d (%s) failed: %v", req.Seq, req.Kind, err)})
	}
	if resp.Error != nil {
		s.writeResponsesError(w, resp.Error)
		return resp.Error.Status, &answerError{APIError: resp.Error, scripted: true}
	}
	resp = s.completeCalls(resp)
	req.Response = resp
	if params.Stream {
		s.writeChatStream(w, newPacer(hr.Context(), resp.Pace), params, req.InputTokens, resp)
	} else {
		s.writeChatCompletion(w, params, req.InputTokens, resp)
	}
	return http.StatusOK, nil
}

// chatID returns a fresh completion id, such as chatcmpl-mdl000000000000004
// (the API's are chatcmpl- and 29 random characters).
func (s *Server) chatID() string {
	return strings.Replace(s.newID("chatcmpl"), "_", "-", 1)
}

// authenticateBearer checks the key the way OpenAI does, in the
// Authorization header alone, and returns the refusal, or nil.
func (s *Server) authenticateBearer(hr *http.Request) *chatError {
	key := ""
	if b, ok := strings.CutPrefix(hr.Header.Get("Authorization"), "Bearer "); ok {
		key = strings.TrimSpace(b)
	}
	switch {
	case key == "":
		return &chatError{msg: "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth " +
			"(i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank username) if you're accessing the API from your browser " +
			"and are prompted for a username and password. You can obtain an API key from https://platform.openai.com/account/api-keys."}
	case s.opts.APIKey != "" && key != s.opts.APIKey:
		return &chatError{msg: fmt.Sprintf("Incorrect API key provided: %s. You can find your API key at https://platform.openai.com/account/api-keys.",
			maskKey(key)), code: "invalid_api_key"}
	}
	return nil
}

// maskKey hides all of a key but its first three and last four
// characters, as the API's message does.
func maskKey(key string) string {
	if len(key) <= 8 {
		return strings.Repeat("*", len(key))
	}
	return key[:3] + strings.Repeat("*", len(key)-7) + key[len(key)-4:]
}

// chatFinishReason is the finish_reason of a reply: tool_calls when it
// calls a tool, else stop. A StopReason the script set is translated
// (end_turn, tool_use, max_tokens) or, if OpenAI's own (length,
// content_filter, …), sent as is.
func chatFinishReason(resp Response) string {
	switch resp.StopReason {
	case "":
		for _, b := range resp.Content {
			if b.Type == "tool_use" {
				return "tool_calls"
			}
		}
		return "stop"
	case "end_turn", "stop_sequence":
		return "stop"
	case "tool_use":
		return "tool_calls"
	case "max_tokens":
		return "length"
	default:
		return resp.StopReason
	}
}

// chatContent is a reply's text blocks joined by blank lines, and whether
// it has any.
func chatContent(resp Response) (string, bool) {
	var texts []string
	for _, b := range resp.Content {
		if b.Type == "text" {
			texts = append(texts, b.Text)
		}
	}
	return strings.Join(texts, "\n\n"), len(texts) > 0
}

// chatToolCalls are a reply's tool_use blocks as the API's tool_calls.
func chatToolCalls(resp Response) []map[string]any {
	var calls []map[string]any
	for _, b := range resp.Content {
		if b.Type == "tool_use" {
			calls = append(calls, map[string]any{"id": b.ID, "type": "function",
				"function": map[string]any{"name": b.Name, "arguments": string(b.Input)}})
		}
	}
	return calls
}

// chatUsage is the usage object of a reply.
func (s *Server) chatUsage(inputTokens int, resp Response) map[string]any {
	out := s.countOutput(resp)
	return map[string]any{
		"prompt_tokens": inputTokens, "completion_tokens": out, "total_tokens": inputTokens + out,
		"prompt_tokens_details": map[string]int{"cached_tokens": 0, "audio_tokens": 0},
		"completion_tokens_details": map[string]int{"reasoning_tokens": 0, "audio_tokens": 0,
			"accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
	}
}

func (s *Server) writeChatCompletion(w http.ResponseWriter, p *ChatRequest, inputTokens int, resp Response) {
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil, "annotations": []any{}}
	if text, ok := chatContent(resp); ok {
		msg["content"] = text
	}
	if calls := chatToolCalls(resp); len(calls) > 0 {
		msg["tool_calls"] = calls
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Request-Id", s.newID("req"))
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": s.chatID(), "object": "chat.completion", "created": time.Now().Unix(), "model": p.Model,
		"choices": []map[string]any{{"index": 0, "message": msg, "logprobs": nil, "finish_reason": chatFinishReason(resp)}},
		"usage":   s.chatUsage(inputTokens, resp), "service_tier": "default", "system_fingerprint": chatFingerprint,
	})
}

// writeChatStream sends the reply as the API's server-sent events, each a
// data: line with a chat.completion.chunk (no event: lines): a first
// chunk with the role (and content "", or the first tool call), the
// content in a few pieces, per tool call a chunk with its index, id, type
// and name and arguments "", then its arguments in a few pieces; a chunk
// with an empty delta and the finish_reason; with
// stream_options.include_usage a chunk with no choices and the usage
// (every other chunk then has "usage": null); and data: [DONE]. Chunks
// with a delta carry an "obfuscation" pad, as the API's do unless
// stream_options.include_obfuscation is false.
func (s *Server) writeChatStream(w http.ResponseWriter, pace *pacer, p *ChatRequest, inputTokens int, resp Response) {
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Request-Id", s.newID("req"))
	w.WriteHeader(http.StatusOK)
	id, created := s.chatID(), time.Now().Unix()
	send := func(data string) {
		pace.wait()
		fmt.Fprintf(w, "data: %s\n\n", data)
		if flusher != nil {
			flusher.Flush()
		}
	}
	chunk := func(choices []map[string]any, usage any) {
		c := map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": p.Model,
			"service_tier": "default", "system_fingerprint": chatFingerprint, "choices": choices}
		if p.IncludeUsage {
			c["usage"] = usage
		}
		if len(choices) > 0 && !p.NoObfuscation {
			// The API pads delta chunks to hide their sizes; a fixed pad
			// here, so a stream is the same every run.
			c["obfuscation"] = "mdl"
		}
		b, _ := json.Marshal(c)
		send(string(b))
	}
	delta := func(d map[string]any, finish any) {
		chunk([]map[string]any{{"index": 0, "delta": d, "logprobs": nil, "finish_reason": finish}}, nil)
	}

	first := map[string]any{"role": "assistant", "content": "", "refusal": nil}
	if text, ok := chatContent(resp); ok {
		delta(first, nil)
		for _, piece := range pieces(text, 3) {
			delta(map[string]any{"content": piece}, nil)
		}
		first = nil
	}
	for i, call := range chatToolCalls(resp) {
		fn := call["function"].(map[string]any)
		args := fn["arguments"].(string)
		start := map[string]any{"tool_calls": []map[string]any{{"index": i, "id": call["id"], "type": "function",
			"function": map[string]any{"name": fn["name"], "arguments": ""}}}}
		if first != nil {
			// A reply without text starts with its first call, content null.
			first["content"], first["tool_calls"] = nil, start["tool_calls"]
			start, first = first, nil
		}
		delta(start, nil)
		for _, piece := range pieces(args, 3) {
			delta(map[string]any{"tool_calls": []map[string]any{{"index": i, "function": map[string]any{"arguments": piece}}}}, nil)
		}
	}
	if first != nil { // an empty reply
		delta(first, nil)
	}
	delta(map[string]any{}, chatFinishReason(resp))
	if p.IncludeUsage {
		chunk([]map[string]any{}, s.chatUsage(inputTokens, resp))
	}
	send("[DONE]")
}

// countChatInput approximates usage.prompt_tokens as countInput does: the
// tool definitions and every message's text, tool calls and results,
// counted with o200k_base (OpenAI's own tokenizer, so the count is
// close), with a few tokens of framing per message.
func (s *Server) countChatInput(p *ChatRequest) int {
	n := 0
	if t, ok := p.Raw["tools"]; ok {
		n += s.enc.Count(string(t))
	}
	for _, m := range p.Messages {
		n += 4 // role and framing
		for _, part := range m.Content {
			switch part.Type {
			case "text", "refusal":
				n += s.enc.Count(part.Text)
			case "image_url":
				n += 765 // the API's count for a 1024×1024 image in high detail
			default:
				n += s.enc.Count(string(part.Raw))
			}
		}
		for _, c := range m.ToolCalls {
			n += s.enc.Count(c.Function.Name) + s.enc.Count(c.Function.Arguments)
		}
	}
	return n
}

// chatLastUserText is the text of a chat request's last user message, for
// messages about it.
func chatLastUserText(p *ChatRequest) string {
	if p == nil {
		return ""
	}
	if u := p.LastUser(); u != nil {
		return u.Text()
	}
	return ""
}
