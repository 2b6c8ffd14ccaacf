package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/engramhq/engram/internal/window"
)

// responsesAPI is OpenAI's Responses API, as Codex speaks it: the
// conversation is the request's input items (messages, function calls and
// their outputs, encrypted reasoning), each a window message; the
// instructions, when given, are its system prompt. A request that
// continues a conversation the server holds (previous_response_id), or
// whose input is a plain string, is stored as seen and goes upstream
// untouched.
type responsesAPI struct{}

func (responsesAPI) route() string { return "responses" }
func (responsesAPI) field() string { return "input" }

func (responsesAPI) read(body []byte, h http.Header) (*conversation, error) {
	f, err := splitObject(body)
	if err != nil {
		return nil, fmt.Errorf("not a Responses request: %w", err)
	}
	var req struct{ Model, PreviousResponseID, PromptCacheKey string }
	if err := decodeFields(f, map[string]any{"model": &req.Model, "previous_response_id": &req.PreviousResponseID,
		"prompt_cache_key": &req.PromptCacheKey}); err != nil {
		return nil, fmt.Errorf("not a Responses request: %w", err)
	}
	c := &conversation{model: req.Model, tools: f["tools"], stateful: req.PreviousResponseID != ""}
	input := f["input"]
	var text string
	switch {
	case !present(input):
		return nil, errNoMessages
	case input[0] == '"':
		if err := json.Unmarshal(input, &text); err != nil {
			return nil, fmt.Errorf("not a Responses request: input: %w", err)
		}
		m, _ := json.Marshal(map[string]string{"role": "user", "content": text})
		c.raws, c.stateful = []json.RawMessage{m}, true
	default:
		c.list = input
		if c.raws, err = listOf(input); err != nil {
			return nil, fmt.Errorf("not a Responses request: input is neither a string nor a list of items: %w", err)
		}
	}
	if present(f["instructions"]) {
		sys, _ := json.Marshal(map[string]json.RawMessage{"role": json.RawMessage(`"system"`), "content": f["instructions"]})
		c.raws, c.off = append([]json.RawMessage{sys}, c.raws...), 1
	}
	c.session = req.PromptCacheKey
	if c.session == "" {
		c.session = h.Get("Session-Id")
	}
	if strings.HasPrefix(h.Get("User-Agent"), "codex") || strings.HasPrefix(h.Get("Originator"), "codex") {
		c.agent = "codex"
	}
	return c, mapAll(c, window.FromResponses)
}

func (responsesAPI) note(text string) json.RawMessage {
	m, _ := json.Marshal(map[string]any{"type": "message", "role": "user",
		"content": []map[string]string{{"type": "input_text", "text": text}}})
	return m
}

func (responsesAPI) assembler(contentType string) assembler {
	if strings.HasPrefix(contentType, "text/event-stream") {
		return &responsesStreamAssembler{items: map[int]*outputItem{}}
	}
	return &responsesJSONAssembler{}
}

// The answer of the Responses API is stored as {"role": "assistant",
// "output": [items]}, the items as the model sent them.
func responsesAnswer(items []json.RawMessage) []byte {
	if len(items) == 0 {
		return nil
	}
	b, _ := json.Marshal(map[string]any{"role": "assistant", "output": items})
	return b
}

// responsesJSONAssembler reads a whole Responses answer.
type responsesJSONAssembler struct{ buf bytes.Buffer }

func (a *responsesJSONAssembler) write(p []byte) { a.buf.Write(p) }

// whole: a response whose status is not completed (incomplete, failed)
// is not the whole answer.
func (a *responsesJSONAssembler) whole() bool {
	var r struct {
		Status string `json:"status"`
	}
	return json.Unmarshal(a.buf.Bytes(), &r) == nil && (r.Status == "" || r.Status == "completed")
}

func (a *responsesJSONAssembler) message() ([]byte, string) {
	var r struct {
		ID     string            `json:"id"`
		Output []json.RawMessage `json:"output"`
	}
	if json.Unmarshal(a.buf.Bytes(), &r) != nil {
		return nil, ""
	}
	return responsesAnswer(r.Output), r.ID
}

// responsesStreamAssembler follows a Responses stream: each output item
// whole at response.output_item.done (or, cut short, as it was added with
// the text and arguments that arrived since).
type responsesStreamAssembler struct {
	lines sseLines
	id    string
	items map[int]*outputItem
	// completed is set by response.completed; a stream that ends with
	// response.failed, response.incomplete or an error event, or with
	// none of them, is not whole.
	completed bool
}

type outputItem struct {
	added, done json.RawMessage
	text, args  strings.Builder
}

func (a *responsesStreamAssembler) write(p []byte) { a.lines.write(p, a.event) }

func (a *responsesStreamAssembler) whole() bool { return a.completed }

func (a *responsesStreamAssembler) event(data []byte) {
	var ev struct {
		Type     string `json:"type"`
		Response struct {
			ID string `json:"id"`
		} `json:"response"`
		OutputIndex int             `json:"output_index"`
		Item        json.RawMessage `json:"item"`
		Delta       string          `json:"delta"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	if ev.OutputIndex < 0 || ev.OutputIndex > 4096 {
		return
	}
	it := a.items[ev.OutputIndex]
	if it == nil && strings.HasPrefix(ev.Type, "response.output_") {
		it = &outputItem{}
		a.items[ev.OutputIndex] = it
	}
	switch ev.Type {
	case "response.created", "response.in_progress":
		if a.id == "" {
			a.id = ev.Response.ID
		}
	case "response.completed":
		a.completed = true
	case "response.failed", "response.incomplete", "error":
		a.completed = false
	case "response.output_item.added":
		it.added = ev.Item
	case "response.output_item.done":
		it.done = ev.Item
	case "response.output_text.delta":
		it.text.WriteString(ev.Delta)
	case "response.function_call_arguments.delta":
		it.args.WriteString(ev.Delta)
	}
}

func (a *responsesStreamAssembler) message() ([]byte, string) {
	idx := make([]int, 0, len(a.items))
	for i := range a.items {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var out []json.RawMessage
	for _, i := range idx {
		it := a.items[i]
		switch {
		case it.done != nil:
			out = append(out, it.done)
		case it.added != nil:
			// Cut short: the item as it began, with what arrived of it.
			var f map[string]any
			if json.Unmarshal(it.added, &f) != nil {
				continue
			}
			if it.text.Len() > 0 {
				f["content"] = []map[string]any{{"type": "output_text", "text": it.text.String()}}
			}
			if it.args.Len() > 0 {
				f["arguments"] = it.args.String()
			}
			f["status"] = "incomplete"
			b, _ := json.Marshal(f)
			out = append(out, b)
		}
	}
	return responsesAnswer(out), a.id
}
