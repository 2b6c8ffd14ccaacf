// Package llm talks to optional chat-model providers. engram works fully
// without one; a configured provider improves what rules do offline, such
// as classifying the questions the archivalist is asked.
//
// One wire format covers the providers people run: OpenAI-compatible
// /chat/completions with tool calls, which OpenAI, Ollama (at /v1),
// vLLM, llama.cpp's server, LM Studio and most gateways speak.
package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/engramhq/engram/internal/httpx"
)

// Defaults for Options.
const (
	DefaultTimeout = 20 * time.Second
	DefaultRetries = 2
	DefaultBackoff = 500 * time.Millisecond
	maxBackoff     = 10 * time.Second
	maxAnswerBytes = 4 << 20
)

// Options configure a Client.
type Options struct {
	// URL is the API's base URL, such as https://api.openai.com/v1 or
	// http://localhost:11434/v1; /chat/completions is added.
	URL    string
	Model  string
	APIKey string
	// Timeout bounds each request; Retries is how many times a request
	// that failed for a passing reason (network, timeout, 429, 5xx) is
	// tried again, after Backoff doubled each time or Retry-After.
	Timeout time.Duration
	Retries int
	Backoff time.Duration
	Client  *http.Client
}

// Client is an OpenAI-compatible chat client. It is safe for concurrent use.
type Client struct {
	opts     Options
	endpoint string
}

// New returns a client; URL and Model are required.
func New(opts Options) (*Client, error) {
	if opts.URL == "" || opts.Model == "" {
		return nil, errors.New("llm: a provider needs a URL and a model")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Retries < 0 {
		opts.Retries = 0
	} else if opts.Retries == 0 {
		opts.Retries = DefaultRetries
	}
	if opts.Backoff <= 0 {
		opts.Backoff = DefaultBackoff
	}
	if opts.Client == nil {
		opts.Client = &http.Client{}
	}
	return &Client{opts: opts, endpoint: strings.TrimRight(opts.URL, "/") + "/chat/completions"}, nil
}

// Model returns the model the client asks.
func (c *Client) Model() string { return c.opts.Model }

// Tool is a function the model may call, with a JSON Schema for its
// arguments.
type Tool struct {
	Name        string
	Description string
	Parameters  map[string]any
}

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Call asks the model, which must answer by calling tool: it returns the
// call's arguments as JSON.
func (c *Client) Call(ctx context.Context, messages []Message, tool Tool) (json.RawMessage, error) {
	payload, err := json.Marshal(map[string]any{
		"model":       c.opts.Model,
		"messages":    messages,
		"temperature": 0,
		"tools": []any{map[string]any{"type": "function", "function": map[string]any{
			"name": tool.Name, "description": tool.Description, "parameters": tool.Parameters,
		}}},
		"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": tool.Name}},
	})
	if err != nil {
		return nil, err
	}
	passing := func(err error) bool {
		var se *StatusError
		if errors.As(err, &se) {
			return se.Temporary()
		}
		return !errors.Is(err, ErrBadAnswer)
	}
	return httpx.Retry(ctx, c.opts.Retries, c.opts.Backoff, maxBackoff, passing, func() (json.RawMessage, time.Duration, error) {
		return c.once(ctx, payload, tool.Name)
	})
}

// ErrBadAnswer is returned when the model's answer cannot be used.
var ErrBadAnswer = errors.New("llm: unusable answer")

// StatusError is an HTTP error from the provider.
type StatusError = httpx.StatusError

func (c *Client) once(ctx context.Context, payload []byte, tool string) (json.RawMessage, time.Duration, error) {
	body, after, err := httpx.PostJSON(ctx, c.opts.Client, c.endpoint, c.opts.APIKey, payload, c.opts.Timeout, maxAnswerBytes)
	if err != nil {
		return nil, after, fmt.Errorf("llm: %w", err)
	}
	var ans struct {
		Choices []struct {
			Message struct {
				ToolCalls []struct {
					Type     string `json:"type"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return nil, 0, fmt.Errorf("%w: %v", ErrBadAnswer, err)
	}
	for _, ch := range ans.Choices {
		for _, tc := range ch.Message.ToolCalls {
			if tc.Function.Name != tool {
				continue
			}
			args := json.RawMessage(tc.Function.Arguments)
			if !json.Valid(args) {
				return nil, 0, fmt.Errorf("%w: the arguments of %s are not JSON", ErrBadAnswer, tool)
			}
			return args, 0, nil
		}
	}
	return nil, 0, fmt.Errorf("%w: no call of %s in the answer", ErrBadAnswer, tool)
}
