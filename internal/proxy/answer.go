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
}

func newAssembler(contentType string) assembler {
	if strings.HasPrefix(contentType, "text/event-stream") {
		return &sseAssembler{}
	}
	return &jsonAssembler{}
}

// jsonAssembler reads a whole (non-streamed) answer.
type jsonAssembler struct{ buf bytes.Buffer }

func (a *jsonAssembler) write(p []byte) { a.buf.Write(p) }

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

// sseAssembler follows Anthropic's stream: message_start, then for each
// content block its start, deltas (text, a tool's input JSON in pieces,
// thinking and its signature) and stop.
type sseAssembler struct {
	pending []byte
	id      string
	blocks  []*sseBlock
}

type sseBlock struct {
	fields map[string]json.RawMessage
	text   strings.Builder
	json   strings.Builder
	think  strings.Builder
	sig    strings.Builder
}

func (a *sseAssembler) write(p []byte) {
	a.pending = append(a.pending, p...)
	for {
		i := bytes.IndexByte(a.pending, '\n')
		if i < 0 {
			return
		}
		line := bytes.TrimRight(a.pending[:i], "\r")
		a.pending = a.pending[i+1:]
		if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			a.event(bytes.TrimSpace(data))
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
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	switch ev.Type {
	case "message_start":
		a.id = ev.Message.ID
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
	return err
}
