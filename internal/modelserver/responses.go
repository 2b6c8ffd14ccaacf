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

// The Responses API (POST /v1/responses), as Codex speaks it. A scripted
// Response is sent as output items: a text block as a message with one
// output_text part, a tool_use block as a function_call (its Input the
// arguments, its ID the call_id), a thinking block as a reasoning item
// with one summary_text part (its Signature the encrypted_content).

// answerResponses answers a POST /v1/responses; see answer.
func (s *Server) answerResponses(w http.ResponseWriter, hr *http.Request, req *Request) (int, *answerError) {
	fail := func(status int, typ, code, param, msg string) (int, *answerError) {
		e := &APIError{Status: status, Type: typ, Code: code, Param: param, Message: msg}
		s.writeResponsesError(w, e)
		return status, &answerError{APIError: e}
	}
	if hr.Method != http.MethodPost || hr.URL.Path != "/v1/responses" {
		return fail(http.StatusNotFound, "invalid_request_error", "", "", fmt.Sprintf("Invalid URL (%s %s)", hr.Method, hr.URL.Path))
	}
	if msg := s.authenticate(hr); msg != "" {
		return fail(http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "",
			"You didn't provide an API key, or it is not the one expected: "+msg)
	}
	body, err := io.ReadAll(io.LimitReader(hr.Body, MaxBodyBytes+1))
	if err != nil {
		return fail(http.StatusBadRequest, "invalid_request_error", "", "", "could not read the request body: "+err.Error())
	}
	req.Body = body
	if len(body) > MaxBodyBytes {
		return fail(http.StatusRequestEntityTooLarge, "invalid_request_error", "", "", "Request too large.")
	}
	if !json.Valid(body) || !bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")) {
		return fail(http.StatusBadRequest, "invalid_request_error", "", "", "We could not parse the JSON body of your request.")
	}
	params, msg := parseResponsesRequest(body)
	if msg != "" {
		return fail(http.StatusBadRequest, "invalid_request_error", "", "", msg)
	}
	req.Responses = params
	req.Kind = s.opts.Classify(req)
	s.mu.Lock()
	msg, param := validateResponses(params, s.reasoned)
	s.mu.Unlock()
	if msg != "" {
		return fail(http.StatusBadRequest, "invalid_request_error", "", param, msg)
	}
	req.InputTokens = s.countResponsesInput(params)
	step, err := s.step(req)
	if err != nil {
		msg := err.Error()
		if e, ok := err.(*APIError); ok {
			msg = e.Message
		}
		return fail(http.StatusInternalServerError, "server_error", "", "", msg)
	}
	resp, err := runStep(step, req)
	if err != nil {
		return fail(http.StatusInternalServerError, "server_error", "", "",
			fmt.Sprintf("modelserver: step for request %d (%s) failed: %v", req.Seq, req.Kind, err))
	}
	if resp.Error != nil {
		s.writeResponsesError(w, resp.Error)
		return resp.Error.Status, &answerError{APIError: resp.Error, scripted: true}
	}
	resp = s.completeCalls(resp)
	req.Response = resp
	if params.Stream {
		s.writeResponsesStream(w, newPacer(hr.Context(), resp.Pace), params, req.InputTokens, resp)
	} else {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Id", s.newID("req"))
		_ = json.NewEncoder(w).Encode(s.responseObject(params, s.newID("resp"), s.outputItems(resp), s.responsesUsage(req.InputTokens, resp)))
	}
	return http.StatusOK, nil
}

// completeCalls fills what a scripted reply to an OpenAI request leaves
// out: call ids (call_mdl…) and arguments. (Item ids are made when the
// items are, see outputItems.)
func (s *Server) completeCalls(resp Response) Response {
	resp.Content = append([]Block(nil), resp.Content...)
	for i, b := range resp.Content {
		if b.Type == "tool_use" {
			if b.ID == "" {
				resp.Content[i].ID = s.newID("call")
			}
			if len(b.Input) == 0 {
				resp.Content[i].Input = json.RawMessage("{}")
			}
		}
	}
	return resp
}

// outputItems are a reply's blocks as the API's output items, complete.
// The item after a reasoning item is noted as requiring it, as the API
// notes the items it makes (see validateReasoning).
func (s *Server) outputItems(resp Response) []map[string]any {
	items := s.makeItems(resp)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 1; i < len(items); i++ {
		if items[i-1]["type"] == "reasoning" && items[i]["type"] != "reasoning" {
			if s.reasoned == nil {
				s.reasoned = map[string]string{}
			}
			s.reasoned[items[i]["id"].(string)] = items[i-1]["id"].(string)
		}
	}
	return items
}

// makeItems are a reply's blocks as the API's output items.
func (s *Server) makeItems(resp Response) []map[string]any {
	items := make([]map[string]any, 0, len(resp.Content))
	for _, b := range resp.Content {
		switch b.Type {
		case "tool_use":
			item := map[string]any{"type": "function_call", "id": s.newID("fc"), "status": "completed",
				"name": b.Name, "arguments": string(b.Input), "call_id": b.ID}
			if b.Namespace != "" {
				item["namespace"] = b.Namespace
			}
			items = append(items, item)
		case "thinking":
			enc := b.Signature
			if enc == "" {
				enc = "modelserver-reasoning"
			}
			items = append(items, map[string]any{"type": "reasoning", "id": s.newID("rs"),
				"summary": []map[string]any{{"type": "summary_text", "text": b.Thinking}}, "encrypted_content": enc})
		default:
			items = append(items, map[string]any{"type": "message", "id": s.newID("msg"), "status": "completed", "role": "assistant",
				"content": []map[string]any{{"type": "output_text", "text": b.Text, "annotations": []any{}, "logprobs": []any{}}}})
		}
	}
	return items
}

// responsesUsage is the usage object of a response.
func (s *Server) responsesUsage(inputTokens int, resp Response) map[string]any {
	out := s.countOutput(resp)
	return map[string]any{
		"input_tokens": inputTokens, "input_tokens_details": map[string]int{"cached_tokens": 0},
		"output_tokens": out, "output_tokens_details": map[string]int{"reasoning_tokens": 0},
		"total_tokens": inputTokens + out,
	}
}

// responseObject is the API's response object: completed with its
// output and usage, in progress when usage is nil.
func (s *Server) responseObject(p *ResponsesRequest, id string, output []map[string]any, usage map[string]any) map[string]any {
	status := "completed"
	if usage == nil {
		status, output = "in_progress", []map[string]any{}
	}
	return map[string]any{
		"id": id, "object": "response", "created_at": time.Now().Unix(), "status": status,
		"model": p.Model, "output": output, "usage": usage, "error": nil, "incomplete_details": nil,
		"instructions": nilIfEmpty(p.Instructions), "parallel_tool_calls": true, "store": false,
	}
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// writeResponsesStream sends the reply as the API's server-sent events:
// response.created and response.in_progress; per item
// response.output_item.added, its parts and deltas (content_part.added,
// output_text.delta in a few pieces, output_text.done, content_part.done;
// function_call_arguments.delta and .done; reasoning_summary_part.added,
// reasoning_summary_text.delta and .done, reasoning_summary_part.done) and
// response.output_item.done; then response.completed with the whole
// response and its usage. Every event has a sequence_number.
func (s *Server) writeResponsesStream(w http.ResponseWriter, pace *pacer, p *ResponsesRequest, inputTokens int, resp Response) {
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Request-Id", s.newID("req"))
	w.WriteHeader(http.StatusOK)
	seq := 0
	event := func(name string, data map[string]any) {
		pace.wait()
		data["type"] = name
		data["sequence_number"] = seq
		seq++
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	id := s.newID("resp")
	started := s.responseObject(p, id, nil, nil)
	event("response.created", map[string]any{"response": started})
	event("response.in_progress", map[string]any{"response": started})
	items := s.outputItems(resp)
	for i, item := range items {
		itemID := item["id"]
		added := map[string]any{}
		for k, v := range item {
			added[k] = v
		}
		added["status"] = "in_progress"
		switch item["type"] {
		case "function_call":
			added["arguments"] = ""
			event("response.output_item.added", map[string]any{"output_index": i, "item": added})
			args := item["arguments"].(string)
			for _, piece := range pieces(args, 3) {
				event("response.function_call_arguments.delta", map[string]any{"item_id": itemID, "output_index": i, "delta": piece})
			}
			event("response.function_call_arguments.done", map[string]any{"item_id": itemID, "output_index": i, "arguments": args})
		case "reasoning":
			delete(added, "status")
			added["summary"] = []any{}
			event("response.output_item.added", map[string]any{"output_index": i, "item": added})
			text := resp.Content[i].Thinking
			part := map[string]any{"type": "summary_text", "text": ""}
			event("response.reasoning_summary_part.added", map[string]any{"item_id": itemID, "output_index": i, "summary_index": 0, "part": part})
			for _, piece := range pieces(text, 3) {
				event("response.reasoning_summary_text.delta", map[string]any{"item_id": itemID, "output_index": i, "summary_index": 0, "delta": piece})
			}
			event("response.reasoning_summary_text.done", map[string]any{"item_id": itemID, "output_index": i, "summary_index": 0, "text": text})
			event("response.reasoning_summary_part.done", map[string]any{"item_id": itemID, "output_index": i, "summary_index": 0,
				"part": map[string]any{"type": "summary_text", "text": text}})
		default:
			added["content"] = []any{}
			event("response.output_item.added", map[string]any{"output_index": i, "item": added})
			text := resp.Content[i].Text
			empty := map[string]any{"type": "output_text", "text": "", "annotations": []any{}, "logprobs": []any{}}
			event("response.content_part.added", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0, "part": empty})
			for _, piece := range pieces(text, 3) {
				event("response.output_text.delta", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0, "delta": piece, "logprobs": []any{}})
			}
			event("response.output_text.done", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0, "text": text, "logprobs": []any{}})
			event("response.content_part.done", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0,
				"part": map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}})
		}
		event("response.output_item.done", map[string]any{"output_index": i, "item": item})
	}
	event("response.completed", map[string]any{"response": s.responseObject(p, id, items, s.responsesUsage(inputTokens, resp))})
}

// writeResponsesError answers an error in OpenAI's shape:
// {"error":{"message","type","param","code"}}.
func (s *Server) writeResponsesError(w http.ResponseWriter, e *APIError) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Request-Id", s.newID("req"))
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"message": e.Message, "type": e.Type, "param": nilIfEmpty(e.Param), "code": nilIfEmpty(e.Code)}})
}

// countResponsesInput approximates usage.input_tokens as countInput does:
// the instructions, the tool definitions and every item's text, arguments
// and outputs, counted with o200k_base (OpenAI's own tokenizer, so this
// count is close).
func (s *Server) countResponsesInput(p *ResponsesRequest) int {
	var sb strings.Builder
	sb.WriteString(p.Instructions)
	if t, ok := p.Raw["tools"]; ok {
		sb.Write(t)
	}
	n := s.enc.Count(sb.String())
	for _, it := range p.Input {
		n += 4 // type and framing
		switch it.Type {
		case "message":
			n += s.enc.Count(it.Text())
		case "function_call":
			n += s.enc.Count(it.Name) + s.enc.Count(it.Arguments)
		case "custom_tool_call":
			n += s.enc.Count(it.Name) + s.enc.Count(it.Input)
		case "function_call_output", "custom_tool_call_output":
			n += s.enc.Count(it.OutputText())
		case "reasoning":
			for _, p := range it.Summary {
				n += s.enc.Count(p.Text)
			}
		default:
			n += s.enc.Count(string(it.Raw))
		}
	}
	return n
}

// responsesLastUserText is the text of a responses request's last user
// message, for messages about it.
func responsesLastUserText(p *ResponsesRequest) string {
	if p == nil {
		return ""
	}
	if u := p.LastUser(); u != nil {
		return u.Text()
	}
	return ""
}
