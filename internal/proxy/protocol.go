package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/engramhq/engram/internal/window"
)

// protocol is how the proxy reads and writes one of the vendors' request
// formats: Anthropic Messages, OpenAI Chat Completions, OpenAI Responses.
type protocol interface {
	// route names the protocol in Stats.
	route() string
	// read parses a request's conversation.
	read(body []byte, h http.Header) (*conversation, error)
	// note is a user message holding text, in the protocol's shape.
	note(text string) json.RawMessage
	// field is the request's key of the conversation's list.
	field() string
	// assembler rebuilds the assistant's answer from a response with
	// this content type as it passes.
	assembler(contentType string) assembler
}

// conversation is what the proxy reads of a request.
type conversation struct {
	model string
	// raws are the conversation's messages as the request has them, in
	// the window's order: a system prompt the request holds apart from
	// its list first (Anthropic's system, Responses' instructions), then
	// the list's; msgs the same, mapped onto window messages by from, as
	// far as decoded (see decode), and info what the proxy knows of each.
	raws    []json.RawMessage
	msgs    []window.Message
	decoded []bool
	from    func([]byte) (window.Message, error)
	info    []msgInfo
	// off is the place of the list's first message in raws; list is the
	// list's bytes in the body (a slice of it).
	off  int
	list json.RawMessage
	// session is the session the request names itself (Claude Code's
	// metadata, Codex's prompt_cache_key), "" when none; agent the
	// harness, when the request says which.
	session, agent string
	// tools is the request's tool schemas, as sent; toolsSum their hash.
	tools    json.RawMessage
	toolsSum [32]byte
	// stateful: the server holds the conversation (a Responses request
	// with previous_response_id): the list is only what is new, appended
	// as it is, and the request goes upstream untouched.
	stateful bool
}

// errNoMessages is a request with nothing to store.
var errNoMessages = errors.New("no messages")

// present reports whether a JSON field was given and is not null.
func present(r json.RawMessage) bool {
	r = bytes.TrimSpace(r)
	return len(r) > 0 && string(r) != "null"
}

// mapAll readies c to map its raw messages onto window messages with
// from, each when it is needed (decode).
func mapAll(c *conversation, from func([]byte) (window.Message, error)) error {
	c.msgs = make([]window.Message, len(c.raws))
	c.decoded = make([]bool, len(c.raws))
	c.from = from
	return nil
}

// decode maps message i onto a window message, once.
func (c *conversation) decode(i int) (*window.Message, error) {
	if !c.decoded[i] {
		m, err := c.from(c.raws[i])
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i-c.off, err)
		}
		c.msgs[i], c.decoded[i] = m, true
	}
	return &c.msgs[i], nil
}

// decodeFrom maps the messages from i on.
func (c *conversation) decodeFrom(i int) ([]window.Message, error) {
	for j := i; j < len(c.raws); j++ {
		if _, err := c.decode(j); err != nil {
			return nil, err
		}
	}
	return c.msgs[i:], nil
}

// messagesAPI is Anthropic's Messages API.
type messagesAPI struct{}

func (messagesAPI) route() string { return "messages" }
func (messagesAPI) field() string { return "messages" }

func (messagesAPI) read(body []byte, h http.Header) (*conversation, error) {
	f, err := splitObject(body)
	if err != nil {
		return nil, fmt.Errorf("not a Messages request: %w", err)
	}
	var req struct {
		Model    string
		Metadata struct {
			UserID string `json:"user_id"`
		}
	}
	if err := decodeFields(f, map[string]any{"model": &req.Model, "metadata": &req.Metadata}); err != nil {
		return nil, fmt.Errorf("not a Messages request: %w", err)
	}
	msgs, err := listOf(f["messages"])
	if err != nil {
		return nil, fmt.Errorf("not a Messages request: messages: %w", err)
	}
	c := &conversation{model: req.Model, raws: msgs, list: f["messages"], tools: f["tools"], session: claudeSession(req.Metadata.UserID)}
	if c.session == "" {
		// A count_tokens request carries no metadata, but Claude Code
		// names its session on every request it makes in this header
		// (2.1.121: the session_id of metadata.user_id), so that a count
		// is laid out as the session's window would send it.
		c.session = h.Get("X-Claude-Code-Session-Id")
	}
	if present(f["system"]) {
		sys, _ := json.Marshal(map[string]json.RawMessage{"role": json.RawMessage(`"system"`), "content": f["system"]})
		c.raws, c.off = append([]json.RawMessage{sys}, c.raws...), 1
	}
	if c.session != "" || strings.Contains(h.Get("User-Agent"), "claude-cli") {
		c.agent = "claude-code"
	}
	return c, mapAll(c, window.FromAnthropic)
}

// decodeFields decodes the fields of f named in into, those present.
func decodeFields(f map[string]json.RawMessage, into map[string]any) error {
	for k, v := range into {
		if present(f[k]) {
			if err := json.Unmarshal(f[k], v); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
	}
	return nil
}

// listOf is a request's list of messages: at least one.
func listOf(raw json.RawMessage) ([]json.RawMessage, error) {
	if !present(raw) {
		return nil, errNoMessages
	}
	list, err := splitArray(raw)
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, errNoMessages
	}
	return list, nil
}

func (messagesAPI) note(text string) json.RawMessage {
	m, _ := json.Marshal(map[string]any{"role": "user", "content": []map[string]string{{"type": "text", "text": text}}})
	return m
}

func (messagesAPI) assembler(contentType string) assembler {
	if strings.HasPrefix(contentType, "text/event-stream") {
		return &sseAssembler{}
	}
	return &jsonAssembler{}
}

// chatAPI is OpenAI's Chat Completions API.
type chatAPI struct{}

func (chatAPI) route() string { return "chat" }
func (chatAPI) field() string { return "messages" }

func (chatAPI) read(body []byte, h http.Header) (*conversation, error) {
	f, err := splitObject(body)
	if err != nil {
		return nil, fmt.Errorf("not a Chat Completions request: %w", err)
	}
	var model string
	if err := decodeFields(f, map[string]any{"model": &model}); err != nil {
		return nil, fmt.Errorf("not a Chat Completions request: %w", err)
	}
	msgs, err := listOf(f["messages"])
	if err != nil {
		return nil, fmt.Errorf("not a Chat Completions request: messages: %w", err)
	}
	c := &conversation{model: model, raws: msgs, list: f["messages"], tools: f["tools"]}
	return c, mapAll(c, window.FromOpenAI)
}

func (chatAPI) note(text string) json.RawMessage {
	m, _ := json.Marshal(map[string]string{"role": "user", "content": text})
	return m
}

func (chatAPI) assembler(contentType string) assembler {
	if strings.HasPrefix(contentType, "text/event-stream") {
		return &chatStreamAssembler{}
	}
	return &chatJSONAssembler{}
}
