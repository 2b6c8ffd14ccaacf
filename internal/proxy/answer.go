package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
)

// assembler rebuilds the assistant's message from an answer as it passes.
type assembler interface {
	write(p []byte)
	// message is the assistant's message as Anthropic's JSON
	// ({"role": "assistant", "content": [...]}) and its id; nil when
	// nothing of it arrived.
	message() ([]byte, string)
	// whole reports whether the answer came to its end: a stream can end
	// cleanly for the connection and still be cut short (an error event
	// after some deltas, a response that failed, no end event), and such
	// an answer is stored as partial.
	whole() bool
}

// jsonAssembler reads a whole (non-streamed) answer.
type jsonAssembler struct{ buf bytes.Buffer }

func (a *jsonAssembler) write(p []byte) { a.buf.Write(p) }

// whole: a message that arrived at all is the whole of it.
func (a *jsonAssembler) whole() bool { return true }

func (a *jsonAssembler) message() ([]byte, string) {
	var m struct {
		ID      string          `json:"id"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(a.buf.Bytes(), &m) != nil || len(m.Content) == 0 {
		return nil, ""
	}
	b, _ := json.Marshal(map[string]json.RawMessage{"role": json.RawMessage(`"assistant"`), "content": m.Content})
	return b, m.ID
}

// maxBlockIndex bounds the index of a block (or a Chat tool call) that an
// answer's stream names: the readers grow a list to the index, and a
// stream that names a negative or huge one is not a model's; such an
// event is left out.
const maxBlockIndex = 1024

// sseAssembler follows Anthropic's stream: message_start, then for each
// content block its start, deltas (text, a tool's input JSON in pieces,
// thinking and its signature) and stop.
type sseAssembler struct {
	lines  sseLines
	id     string
	blocks []*sseBlock
	// stopped is set by message_stop, failed by an error event (an
	// overloaded_error mid-stream).
	stopped, failed bool
}

type sseBlock struct {
	fields map[string]json.RawMessage
	text   strings.Builder
	json   strings.Builder
	think  strings.Builder
	sig    strings.Builder
}

func (a *sseAssembler) write(p []byte) { a.lines.write(p, a.event) }

func (a *sseAssembler) whole() bool { return a.stopped && !a.failed }

// sseLines splits a server-sent event stream into its data lines.
type sseLines struct{ pending []byte }

func (s *sseLines) write(p []byte, data func([]byte)) {
	s.pending = append(s.pending, p...)
	for {
		i := bytes.IndexByte(s.pending, '\n')
		if i < 0 {
			return
		}
		line := bytes.TrimRight(s.pending[:i], "\r")
		s.pending = s.pending[i+1:]
		if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			data(bytes.TrimSpace(d))
		}
	}
}

func (a *sseAssembler) event(data []byte) {
	var ev struct {
		Type    string `json:"type"`
		Index   int    `json:"index"`
		Message struct {
			ID string `json:"id"`
		} `json:"message"`
		ContentBlock map[string]json.RawMessage `json:"content_block"`
		Delta        struct {
			Type        string `json:"type"`
			Text        string `json:"text"`
			PartialJSON string `json:"partial_json"`
			Thinking    string `json:"thinking"`
			Signature   string `json:"signature"`
		} `json:"delta"`
	}
	if json.Unmarshal(data, &ev) != nil || ev.Index < 0 || ev.Index > maxBlockIndex {
		return
	}
	switch ev.Type {
	case "message_start":
		a.id = ev.Message.ID
	case "message_stop":
		a.stopped = true
	case "error":
		a.failed = true
	case "content_block_start":
		for len(a.blocks) <= ev.Index {
			a.blocks = append(a.blocks, nil)
		}
		a.blocks[ev.Index] = &sseBlock{fields: ev.ContentBlock}
	case "content_block_delta":
		if ev.Index >= len(a.blocks) || a.blocks[ev.Index] == nil {
			return
		}
		b := a.blocks[ev.Index]
		switch ev.Delta.Type {
		case "text_delta":
			b.text.WriteString(ev.Delta.Text)
		case "input_json_delta":
			b.json.WriteString(ev.Delta.PartialJSON)
		case "thinking_delta":
			b.think.WriteString(ev.Delta.Thinking)
		case "signature_delta":
			b.sig.WriteString(ev.Delta.Signature)
		}
	}
}

func (a *sseAssembler) message() ([]byte, string) {
	var content []json.RawMessage
	for _, b := range a.blocks {
		if b == nil {
			continue
		}
		f := b.fields
		if f == nil {
			f = map[string]json.RawMessage{}
		}
		set := func(k, v string) { f[k], _ = json.Marshal(v) }
		var typ string
		_ = json.Unmarshal(f["type"], &typ)
		switch typ {
		case "text":
			var start string
			_ = json.Unmarshal(f["text"], &start)
			set("text", start+b.text.String())
		case "tool_use", "server_tool_use":
			if in := b.json.String(); in != "" && json.Valid([]byte(in)) {
				f["input"] = json.RawMessage(in)
			} else if in != "" {
				set("input_partial", in) // cut short: kept as it came
			}
		case "thinking":
			var start string
			_ = json.Unmarshal(f["thinking"], &start)
			set("thinking", start+b.think.String())
			if b.sig.Len() > 0 {
				set("signature", b.sig.String())
			}
		}
		raw, err := json.Marshal(f)
		if err == nil {
			content = append(content, raw)
		}
	}
	if len(content) == 0 {
		return nil, a.id
	}
	msg, _ := json.Marshal(map[string]any{"role": "assistant", "content": content})
	return msg, a.id
}

// keepAnswer stores the assistant's message as the model sent it; partial
// when the stream ended early.
func (p *Proxy) keepAnswer(ctx context.Context, seen *exchange, msg []byte, id string, partial bool) error {
	if msg == nil {
		return nil
	}
	meta := map[string]any{"via": "proxy"}
	msgID := id
	if partial {
		meta["partial"] = true
		if msgID != "" {
			msgID += "/partial"
		}
	}
	_, err := p.eng.Add(ctx, []engine.Record{{Session: seen.key.SessionID, Agent: seen.key.AgentID, Type: store.AgentResponse,
		Content: msg, MsgID: msgID, Metadata: meta}})
	if err == nil {
		p.count.answers.Add(1)
		if partial {
			p.count.partial.Add(1)
		}
	}
	return err
}

// chatJSONAssembler reads a whole Chat Completions answer: the first
// choice's message.
type chatJSONAssembler struct{ buf bytes.Buffer }

func (a *chatJSONAssembler) write(p []byte) { a.buf.Write(p) }

func (a *chatJSONAssembler) whole() bool { return true }

func (a *chatJSONAssembler) message() ([]byte, string) {
	var r struct {
		ID      string `json:"id"`
		Choices []struct {
			Message json.RawMessage `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal(a.buf.Bytes(), &r) != nil || len(r.Choices) == 0 || !present(r.Choices[0].Message) {
		return nil, ""
	}
	return r.Choices[0].Message, r.ID
}

// chatStreamAssembler follows a Chat Completions stream: chunks of the
// first choice's delta, its content and its tool calls' names and
// arguments in pieces, indexed.
type chatStreamAssembler struct {
	lines   sseLines
	id      string
	content strings.Builder
	text    bool
	refusal strings.Builder
	calls   []*chatCall
	// done is set by the stream's last event, data: [DONE].
	done bool
}

type chatCall struct {
	id, typ, name string
	args          strings.Builder
}

func (a *chatStreamAssembler) write(p []byte) { a.lines.write(p, a.chunk) }

func (a *chatStreamAssembler) whole() bool { return a.done }

func (a *chatStreamAssembler) chunk(data []byte) {
	var c struct {
		ID      string `json:"id"`
		Choices []struct {
			Index int `json:"index"`
			Delta struct {
				Content   *string `json:"content"`
				Refusal   *string `json:"refusal"`
				ToolCalls []struct {
					Index    int    `json:"index"`
					ID       string `json:"id"`
					Type     string `json:"type"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"delta"`
		} `json:"choices"`
	}
	if string(data) == "[DONE]" {
		a.done = true
		return
	}
	if json.Unmarshal(data, &c) != nil {
		return // what is not a chunk
	}
	if a.id == "" {
		a.id = c.ID
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue
		}
		if d := ch.Delta.Content; d != nil {
			a.content.WriteString(*d)
			a.text = true
		}
		if d := ch.Delta.Refusal; d != nil {
			a.refusal.WriteString(*d)
		}
		for _, tc := range ch.Delta.ToolCalls {
			if tc.Index < 0 || tc.Index > maxBlockIndex {
				continue
			}
			for len(a.calls) <= tc.Index {
				a.calls = append(a.calls, nil)
			}
			call := a.calls[tc.Index]
			if call == nil {
				call = &chatCall{typ: "function"}
				a.calls[tc.Index] = call
			}
			if tc.ID != "" {
				call.id = tc.ID
			}
			if tc.Type != "" {
				call.typ = tc.Type
			}
			call.name += tc.Function.Name
			call.args.WriteString(tc.Function.Arguments)
		}
	}
}

func (a *chatStreamAssembler) message() ([]byte, string) {
	msg := map[string]any{"role": "assistant", "content": nil}
	if a.text {
		msg["content"] = a.content.String()
	}
	if a.refusal.Len() > 0 {
		msg["refusal"] = a.refusal.String()
	}
	var calls []any
	for _, c := range a.calls {
		if c != nil {
			calls = append(calls, map[string]any{"id": c.id, "type": c.typ,
				"function": map[string]string{"name": c.name, "arguments": c.args.String()}})
		}
	}
	if len(calls) > 0 {
		msg["tool_calls"] = calls
	}
	if !a.text && a.refusal.Len() == 0 && len(calls) == 0 {
		return nil, a.id
	}
	b, _ := json.Marshal(msg)
	return b, a.id
}
