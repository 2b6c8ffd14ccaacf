package modelserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/engramhq/engram/internal/tokens"
)

// MaxBodyBytes is the largest request body accepted, as the API's 32 MB
// limit; a larger one is answered 413 request_too_large.
const MaxBodyBytes = 32 << 20

// Options configure a Server. The zero value answers every main request
// with "script exhausted" and side requests with DefaultSide.
type Options struct {
	// Main is the script of the main conversation: the n-th main request
	// (Kind KindMain) is answered by Main[n]. Server.Add appends more.
	Main []Step
	// Side answers every request that is not KindMain. Nil means
	// DefaultSide.
	Side Step
	// Classify tells a request's kind. Nil means Classify.
	Classify func(*Request) Kind
	// APIKey, when set, is the only key accepted (x-api-key or
	// Authorization: Bearer). Empty accepts any non-empty key.
	APIKey string
	// Logger receives a debug line per request. Nil discards them.
	Logger *slog.Logger
	// Forget, when set, keeps no record of the requests answered:
	// Requests returns none (Err and Remaining work as ever). For long
	// runs of large requests, benchmarks, whose record would grow
	// without bound.
	Forget bool
}

// Request is one request the server received, recorded for assertions.
type Request struct {
	// Seq numbers requests from 1 in order of arrival.
	Seq    int
	Method string
	Path   string
	// Header is the request's headers without credentials (x-api-key,
	// Authorization).
	Header http.Header
	// Body is the raw body; Params its decoding, nil when it is not a
	// messages request or did not decode; Responses the decoding of a
	// Responses API request, Chat of a Chat Completions request.
	Body      []byte
	Params    *MessagesRequest
	Responses *ResponsesRequest
	Chat      *ChatRequest
	Kind      Kind
	// Step is the index in the main script that answered it, or -1.
	Step int
	// InputTokens is the usage.input_tokens answered.
	InputTokens int
	// Status is the HTTP status answered; Response the reply sent when it
	// was 200 (for count_tokens: none), Error the error message otherwise.
	Status   int
	Response Response
	Error    string
}

// Server is a scripted model server speaking the Anthropic Messages API:
// POST /v1/messages (JSON or server-sent events when "stream" is true) and
// POST /v1/messages/count_tokens; and OpenAI's Responses API (POST
// /v1/responses) and Chat Completions API (POST /v1/chat/completions). It
// is an http.Handler; Start serves it on a loopback port. Its methods are
// safe for concurrent use.
type Server struct {
	opts Options
	enc  *tokens.Encoding
	log  *slog.Logger
	http *httptest.Server

	// mu guards the script's progress, the record and the id counters.
	mu   sync.Mutex
	main []Step
	next int
	seq  int
	ids  int
	reqs []*Request
	errs []error
	// busy counts the requests being answered; done is signalled when one
	// ends. A client has read a response before its handler records it,
	// so the readers of the record wait for busy to be zero.
	busy int
	done *sync.Cond
	// reasoned maps the id of each Responses item the server made right
	// after a reasoning item to that item's id: the API refuses the one
	// without the other.
	reasoned map[string]string
}

// New returns a Server that is not listening; use it as an http.Handler.
func New(opts Options) *Server {
	if opts.Side == nil {
		opts.Side = DefaultSide
	}
	if opts.Classify == nil {
		opts.Classify = Classify
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv := &Server{opts: opts, enc: tokens.MustGet("o200k_base"), log: log, main: slices.Clone(opts.Main)}
	srv.done = sync.NewCond(&srv.mu)
	return srv
}

// Start returns a Server listening on a loopback port; URL is its base
// URL (for ANTHROPIC_BASE_URL) and Close stops it.
func Start(opts Options) *Server {
	s := New(opts)
	s.http = httptest.NewServer(s)
	return s
}

// URL is the base URL of a started Server, such as http://127.0.0.1:41234,
// or "" when it was made with New.
func (s *Server) URL() string {
	if s.http == nil {
		return ""
	}
	return s.http.URL
}

// Close stops a started Server, waiting for requests in flight.
func (s *Server) Close() {
	if s.http != nil {
		s.http.Close()
	}
}

// Add appends steps to the main script.
func (s *Server) Add(steps ...Step) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.main = append(s.main, steps...)
}

// Remaining is how many main steps are not used yet.
func (s *Server) Remaining() int {
	s.lockSettled()
	defer s.mu.Unlock()
	return len(s.main) - s.next
}

// Requests returns copies of every request answered so far, in order of
// arrival; with kinds, only those of these kinds.
func (s *Server) Requests(kinds ...Kind) []Request {
	s.lockSettled()
	defer s.mu.Unlock()
	var out []Request
	for _, r := range s.reqs {
		if len(kinds) == 0 || slices.Contains(kinds, r.Kind) {
			out = append(out, *r)
		}
	}
	slices.SortFunc(out, func(a, b Request) int { return a.Seq - b.Seq })
	return out
}

// Err reports every request under /v1/ the server refused or could not
// answer: a request the real API would refuse (400, 401, 404, 413), a main request
// past the end of the script, a step that failed. Errors a script chose
// (Fail) are not reported. Nil means the client behaved and the script
// sufficed.
func (s *Server) Err() error {
	s.lockSettled()
	defer s.mu.Unlock()
	return errors.Join(s.errs...)
}

// lockSettled locks the server once no request is being answered: a
// client returns once it has read a response, which may be before the
// handler has recorded the request. So Requests, Err and Remaining, which
// wait for it, are for after a client's run, never for a Step.
func (s *Server) lockSettled() {
	s.mu.Lock()
	for s.busy > 0 {
		s.done.Wait()
	}
}

// ServeHTTP answers one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, hr *http.Request) {
	req := &Request{Method: hr.Method, Path: hr.URL.Path, Header: hr.Header.Clone(), Step: -1}
	req.Header.Del("X-Api-Key")
	req.Header.Del("Authorization")
	s.mu.Lock()
	s.seq++
	req.Seq = s.seq
	s.busy++
	s.mu.Unlock()

	status, apiErr := s.answer(w, hr, req)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.done.Broadcast()
	s.busy--
	req.Status = status
	if apiErr != nil {
		req.Error = apiErr.Message
		// A request outside /v1 is a client's connectivity probe (Claude
		// Code sends HEAD / at start): answered 404 as the API does, but
		// not a refusal to report.
		if !apiErr.scripted && strings.HasPrefix(req.Path, "/v1/") {
			s.errs = append(s.errs, fmt.Errorf("request %d %s %s (%s): %d %s: %s",
				req.Seq, req.Method, req.Path, req.Kind, apiErr.Status, apiErr.Type, apiErr.Message))
		}
	}
	if !s.opts.Forget {
		s.reqs = append(s.reqs, req)
	}
	s.log.Debug("model request", "seq", req.Seq, "path", req.Path, "kind", req.Kind,
		"step", req.Step, "status", status, "input_tokens", req.InputTokens)
}

// answerError is an APIError with whether the script chose it.
type answerError struct {
	*APIError
	scripted bool
}

// answer routes, validates and answers; it writes the response and returns
// its status and, for a non-200, the error sent.
func (s *Server) answer(w http.ResponseWriter, hr *http.Request, req *Request) (int, *answerError) {
	fail := func(status int, typ, msg string) (int, *answerError) {
		e := &APIError{Status: status, Type: typ, Message: msg}
		s.writeError(w, e)
		return status, &answerError{APIError: e}
	}
	if strings.HasPrefix(hr.URL.Path, "/v1/responses") {
		return s.answerResponses(w, hr, req)
	}
	if strings.HasPrefix(hr.URL.Path, "/v1/chat/") {
		return s.answerChat(w, hr, req)
	}
	count := hr.URL.Path == "/v1/messages/count_tokens"
	if hr.Method != http.MethodPost || (hr.URL.Path != "/v1/messages" && !count) {
		return fail(http.StatusNotFound, "not_found_error", "Not Found")
	}
	if msg := s.authenticate(hr); msg != "" {
		return fail(http.StatusUnauthorized, "authentication_error", msg)
	}
	body, err := io.ReadAll(io.LimitReader(hr.Body, MaxBodyBytes+1))
	if err != nil {
		return fail(http.StatusBadRequest, "invalid_request_error", "could not read the request body: "+err.Error())
	}
	req.Body = body
	if len(body) > MaxBodyBytes {
		return fail(http.StatusRequestEntityTooLarge, "request_too_large", "Request exceeds the maximum allowed number of bytes.")
	}
	if hr.Header.Get("anthropic-version") == "" {
		return fail(http.StatusBadRequest, "invalid_request_error", "anthropic-version: header is required")
	}
	if !json.Valid(body) || !bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")) {
		return fail(http.StatusBadRequest, "invalid_request_error", "There was an issue with your request body: it is not a valid JSON object")
	}
	params, err := parseRequest(body)
	if err != nil {
		return fail(http.StatusBadRequest, "invalid_request_error", err.Error())
	}
	req.Params = params
	req.Kind = s.opts.Classify(req)
	if msg := validate(params, count); msg != "" {
		return fail(http.StatusBadRequest, "invalid_request_error", msg)
	}
	req.InputTokens = s.countInput(params)
	if count {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]int{"input_tokens": req.InputTokens})
		return http.StatusOK, nil
	}

	step, err := s.step(req)
	if err != nil {
		return fail(http.StatusInternalServerError, "api_error", err.Error())
	}
	resp, err := runStep(step, req)
	if err != nil {
		return fail(http.StatusInternalServerError, "api_error",
			fmt.Sprintf("modelserver: step for request %d (%s) failed: %v", req.Seq, req.Kind, err))
	}
	if resp.Error != nil {
		s.writeError(w, resp.Error)
		return resp.Error.Status, &answerError{APIError: resp.Error, scripted: true}
	}
	resp = s.complete(resp)
	req.Response = resp
	if params.Stream {
		s.writeStream(w, newPacer(hr.Context(), resp.Pace), params.Model, req.InputTokens, resp)
	} else {
		s.writeMessage(w, params.Model, req.InputTokens, resp)
	}
	return http.StatusOK, nil
}

// authenticate returns the authentication_error message, or "".
func (s *Server) authenticate(hr *http.Request) string {
	key := hr.Header.Get("X-Api-Key")
	if key == "" {
		if b, ok := strings.CutPrefix(hr.Header.Get("Authorization"), "Bearer "); ok {
			key = strings.TrimSpace(b)
		}
	}
	switch {
	case key == "":
		return "x-api-key header is required"
	case s.opts.APIKey != "" && key != s.opts.APIKey:
		return "invalid x-api-key"
	}
	return ""
}

// step picks the step answering req: the next main step, or Side.
func (s *Server) step(req *Request) (Step, error) {
	if req.Kind != KindMain {
		return s.opts.Side, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next >= len(s.main) {
		return nil, errScriptDone(req)
	}
	req.Step = s.next
	s.next++
	return s.main[req.Step], nil
}

// runStep calls step, turning a panic into an error.
func runStep(step Step, req *Request) (resp Response, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return step(req)
}

// complete fills what a scripted reply leaves out: tool_use ids and the
// stop reason.
func (s *Server) complete(resp Response) Response {
	resp.Content = slices.Clone(resp.Content)
	hasTool := false
	s.mu.Lock()
	for i, b := range resp.Content {
		if b.Type != "tool_use" {
			continue
		}
		hasTool = true
		if b.ID == "" {
			s.ids++
			resp.Content[i].ID = fmt.Sprintf("toolu_mdl%015d", s.ids)
		}
		if len(b.Input) == 0 {
			resp.Content[i].Input = json.RawMessage("{}")
		}
	}
	s.mu.Unlock()
	if resp.StopReason == "" {
		resp.StopReason = "end_turn"
		if hasTool {
			resp.StopReason = "tool_use"
		}
	}
	return resp
}

// countInput approximates usage.input_tokens: the system prompt, the tool
// definitions and every message's text, tool inputs and results, counted
// with o200k_base. Anthropic's tokenizer is not public; this count comes
// within some tens of percent of it, enough for a harness to see a context
// as large as it is and to compact when it really is large.
func (s *Server) countInput(p *MessagesRequest) int {
	var sb strings.Builder
	sb.WriteString(p.SystemText())
	for _, t := range p.Tools {
		sb.WriteString(t.Name)
		sb.WriteString(t.Description)
		sb.Write(t.InputSchema)
	}
	n := s.enc.Count(sb.String())
	for _, m := range p.Messages {
		n += 4 // role and framing
		for _, b := range m.Content {
			n += s.countBlock(b)
		}
	}
	return n
}

func (s *Server) countBlock(b Block) int {
	switch b.Type {
	case "text":
		return s.enc.Count(b.Text)
	case "thinking":
		return s.enc.Count(b.Thinking)
	case "tool_use":
		return s.enc.Count(b.Name) + s.enc.Count(string(b.Input))
	case "tool_result":
		nested, _, _ := decodeBlocks(b.Content)
		n := 4
		for _, c := range nested {
			n += s.countBlock(c)
		}
		return n
	case "image", "document":
		return 1500 // the API's estimate for a typical page or picture
	default:
		return s.enc.Count(string(b.Raw))
	}
}

func (s *Server) countOutput(resp Response) int {
	n := 0
	for _, b := range resp.Content {
		n += s.countBlock(b)
	}
	return max(n, 1)
}

// newID returns a fresh id with prefix, such as msg_mdl000000000000003.
func (s *Server) newID(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids++
	return fmt.Sprintf("%s_mdl%015d", prefix, s.ids)
}

func (s *Server) writeError(w http.ResponseWriter, e *APIError) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", s.newID("req"))
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type":       "error",
		"error":      map[string]string{"type": e.Type, "message": e.Message},
		"request_id": w.Header().Get("Request-Id"),
	})
}

// usage is the usage object of a reply.
type usage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
}

// wireBlock is a reply block as the API sends it.
func wireBlock(b Block) map[string]any {
	switch b.Type {
	case "tool_use":
		return map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": b.Input}
	case "thinking":
		return map[string]any{"type": "thinking", "thinking": b.Thinking, "signature": b.Signature}
	default:
		return map[string]any{"type": "text", "text": b.Text}
	}
}

func (s *Server) writeMessage(w http.ResponseWriter, model string, inputTokens int, resp Response) {
	content := make([]map[string]any, len(resp.Content))
	for i, b := range resp.Content {
		content[i] = wireBlock(b)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", s.newID("req"))
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": s.newID("msg"), "type": "message", "role": "assistant", "model": model,
		"content": content, "stop_reason": resp.StopReason, "stop_sequence": nil,
		"usage": usage{InputTokens: inputTokens, OutputTokens: s.countOutput(resp)},
	})
}

// writeStream sends the reply as the API's server-sent events: message_start,
// per block content_block_start, deltas (text_delta, input_json_delta in a
// few partial_json pieces, thinking_delta and signature_delta) and
// content_block_stop, a ping after the first block starts, then
// message_delta with the stop reason and usage, and message_stop.
func (s *Server) writeStream(w http.ResponseWriter, pace *pacer, model string, inputTokens int, resp Response) {
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Request-Id", s.newID("req"))
	w.WriteHeader(http.StatusOK)
	event := func(name string, data any) {
		pace.wait()
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": s.newID("msg"), "type": "message", "role": "assistant", "model": model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": usage{InputTokens: inputTokens, OutputTokens: 1},
	}})
	for i, b := range resp.Content {
		start := wireBlock(b)
		var deltas []map[string]any
		switch b.Type {
		case "tool_use":
			start["input"] = map[string]any{}
			for _, p := range append([]string{""}, pieces(string(b.Input), 3)...) {
				deltas = append(deltas, map[string]any{"type": "input_json_delta", "partial_json": p})
			}
		case "thinking":
			start["thinking"], start["signature"] = "", ""
			for _, p := range pieces(b.Thinking, 3) {
				deltas = append(deltas, map[string]any{"type": "thinking_delta", "thinking": p})
			}
			deltas = append(deltas, map[string]any{"type": "signature_delta", "signature": b.Signature})
		default:
			start["text"] = ""
			for _, p := range pieces(b.Text, 3) {
				deltas = append(deltas, map[string]any{"type": "text_delta", "text": p})
			}
		}
		event("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": start})
		if i == 0 {
			event("ping", map[string]any{"type": "ping"})
		}
		for _, d := range deltas {
			event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": d})
		}
		event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": resp.StopReason, "stop_sequence": nil},
		"usage": usage{InputTokens: inputTokens, OutputTokens: s.countOutput(resp)}})
	event("message_stop", map[string]any{"type": "message_stop"})
}

// pacer spaces a stream's events by a Response's Pace.
type pacer struct {
	ctx     context.Context
	every   time.Duration
	started bool
}

func newPacer(ctx context.Context, every time.Duration) *pacer {
	return &pacer{ctx: ctx, every: every}
}

// wait returns at once before the first event, else after the pace, or
// as soon as the client has gone.
func (p *pacer) wait() {
	if p.every <= 0 {
		return
	}
	if !p.started {
		p.started = true
		return
	}
	t := time.NewTimer(p.every)
	defer t.Stop()
	select {
	case <-t.C:
	case <-p.ctx.Done():
	}
}

// pieces splits s into at most n non-empty pieces at rune boundaries, as
// a stream sends text and tool input in parts.
func pieces(s string, n int) []string {
	if s == "" {
		return nil
	}
	size := max(len(s)/n, 1)
	var out []string
	for len(s) > 0 {
		cut := min(size, len(s))
		if len(out) == n-1 {
			cut = len(s)
		}
		for cut < len(s) && !utf8.RuneStart(s[cut]) {
			cut++
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	return out
}
