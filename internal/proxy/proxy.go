// Package proxy puts engram between an agent harness and its model: the
// harness points its model base URL at engram, engram forwards each
// request to the vendor's API and the answer back as it arrives, and
// stores what it saw on the way.
//
// As built so far (issue 26, in part):
//
//   - Routes. Anthropic Messages (POST /v1/messages, streaming and not) is
//     read, stored and laid out; every other path (count_tokens, OpenAI's
//     Chat Completions and Responses, anything else) goes through
//     untouched, to the Anthropic upstream when the request carries
//     Anthropic's headers (x-api-key, anthropic-version), else to the
//     OpenAI one.
//   - Credentials. The caller's vendor credentials are forwarded as
//     given, never read, stored or logged. engram's own token, when one
//     is configured, travels in X-Engram-Token, which is not forwarded. A
//     request a browser sends from another site is refused.
//   - Windows. Each Messages request is mapped to a window: the session of
//     X-Engram-Session, else the session Claude Code names in
//     metadata.user_id, else a hash of the conversation's start (its
//     system prompt and first message). The harness resends the whole
//     history every turn; the proxy keeps, per window, a hash of each
//     message it appended (the system prompt first; what the harness moves
//     between requests, cache_control and Claude Code's billing header,
//     left out), and appends only the new tail. The assistant's message
//     is reassembled from the answer (streamed or not) and stored as an
//     entry; it joins the window when the harness sends it back with the
//     next request, as the harness keeps it.
//   - Virtualization. Once the window has evicted (at its threshold, down
//     to its target, whole units: a tool call stays with its results), the
//     request goes upstream with the window's layout: the messages it
//     shows, as the harness sent them this time (their cache_control
//     where the harness put them), and a user message of markers where
//     each evicted run stood. The layout changes only when the window
//     evicts again, so the rewritten prefix stays byte-stable between
//     evictions and the provider's prompt cache keeps hitting. Under the
//     threshold the request goes as it came.
//   - Fail open. An error of engram's before the request is forwarded
//     (a body it cannot read, a store that fails) is logged, and the
//     request goes on unchanged. Upstream answers, errors included, reach
//     the client verbatim with their status codes, and streams are passed
//     on as they arrive, flushed event by event.
//
// Not yet built: a history the harness edits (noted and sent whole, not
// followed), the tool schemas' and system prompt's share of the budget
// (the window counts messages only), the OpenAI formats' storage and
// layout, metrics.
package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// Defaults.
const (
	DefaultAnthropic = "https://api.anthropic.com"
	DefaultOpenAI    = "https://api.openai.com"
	// DefaultMaxBody is above the vendors' own limits (Anthropic takes
	// 32 MB), so that engram never refuses what the vendor would take.
	DefaultMaxBody = 64 << 20
	// DefaultTimeout bounds the wait for an upstream's answer to begin.
	DefaultTimeout = 10 * time.Minute
	// defaultLimit sizes a window whose model the catalog does not know.
	defaultLimit = 200_000
)

// Options configure a Proxy.
type Options struct {
	// Anthropic and OpenAI are the upstreams' base URLs.
	Anthropic, OpenAI string
	// MaxBody bounds a request's body; over it, 413.
	MaxBody int64
	// Timeout bounds the wait for an upstream's headers.
	Timeout time.Duration
	// Token, if set, is required in X-Engram-Token.
	Token string
	// Catalog sizes windows by model; nil is the built-in catalog.
	Catalog *tokens.Catalog
	// Limit, if positive, is every window's context in tokens instead of
	// its model's.
	Limit  int
	Logger *slog.Logger
	// Transport reaches the upstreams; nil is a clone of the default.
	Transport http.RoundTripper
}

// Proxy is the handler.
type Proxy struct {
	eng     *engine.Engine
	windows *window.Manager
	opts    Options
	client  *http.Client
	log     *slog.Logger

	count *counters

	mu    sync.Mutex
	state map[store.WindowKey]*winState
}

// winState is what the proxy keeps of a window: the hash of each message
// it holds, in order, and a lock that keeps a window's requests in order.
type winState struct {
	mu     sync.Mutex
	hashes []string
}

// New returns a proxy storing into eng's store through windows.
func New(eng *engine.Engine, windows *window.Manager, opts Options) (*Proxy, error) {
	if opts.Anthropic == "" {
		opts.Anthropic = DefaultAnthropic
	}
	if opts.OpenAI == "" {
		opts.OpenAI = DefaultOpenAI
	}
	for _, u := range []string{opts.Anthropic, opts.OpenAI} {
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			return nil, fmt.Errorf("upstream %q is not an http or https URL", u)
		}
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = DefaultMaxBody
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tr := opts.Transport
	if tr == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.ResponseHeaderTimeout = opts.Timeout
		// The body is passed on as the client sent it: no gzip of our own.
		t.DisableCompression = true
		tr = t
	}
	return &Proxy{eng: eng, windows: windows, opts: opts, log: log.With("component", "proxy"),
		client: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		state:  map[store.WindowKey]*winState{}, count: newCounters()}, nil
}

// Upstream is the base URL requests of a vendor ("anthropic", "openai")
// go to.
func (p *Proxy) Upstream(vendor string) string {
	if vendor == "anthropic" {
		return p.opts.Anthropic
	}
	return p.opts.OpenAI
}

// hopHeaders are not forwarded either way (RFC 9110 7.6.1), nor engram's
// own.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func copyHeaders(dst, src http.Header) {
	for k, vs := range src {
		if strings.HasPrefix(k, "X-Engram-") {
			continue
		}
		dst[k] = append([]string(nil), vs...)
	}
	for _, h := range hopHeaders {
		dst.Del(h)
	}
	for _, c := range src.Values("Connection") {
		for _, f := range strings.Split(c, ",") {
			dst.Del(strings.TrimSpace(f))
		}
	}
}

// ServeHTTP forwards one request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.allowed(w, r) {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.opts.MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			add(p.count.refused, "too_large")
			p.fail(w, r, http.StatusRequestEntityTooLarge, "request_too_large",
				fmt.Sprintf("the request body is over the proxy's limit of %d bytes (engram proxy --max-body)", p.opts.MaxBody))
			return
		}
		add(p.count.refused, "unreadable")
		p.fail(w, r, http.StatusBadRequest, "invalid_request_error", "cannot read the request body: "+err.Error())
		return
	}
	anthropic := r.Header.Get("X-Api-Key") != "" || r.Header.Get("Anthropic-Version") != "" ||
		strings.HasPrefix(r.URL.Path, "/v1/messages")
	base := p.opts.OpenAI
	if anthropic {
		base = p.opts.Anthropic
	}
	var seen *exchange
	if r.Method == http.MethodPost && r.URL.Path == "/v1/messages" {
		// Fail open: what engram cannot take, it forwards as it came.
		if seen, err = p.take(r.Context(), r.Header, body); err != nil {
			p.log.Warn("forwarding a request engram could not store", "path", r.URL.Path, "err", err)
			seen = nil
		}
	}
	if seen != nil && seen.body != nil {
		body = seen.body
	}
	p.forward(w, r, base, body, seen)
}

// allowed refuses what a browser sends from another site, and a request
// without engram's token when one is configured.
func (p *Proxy) allowed(w http.ResponseWriter, r *http.Request) bool {
	if r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		add(p.count.refused, "origin")
		p.fail(w, r, http.StatusForbidden, "permission_error", "engram's proxy takes no requests from web pages")
		return false
	}
	if host, _, err := net.SplitHostPort(r.Host); err == nil && !loopbackName(host) && p.opts.Token == "" {
		add(p.count.refused, "host")
		p.fail(w, r, http.StatusForbidden, "permission_error", "engram's proxy answers loopback names only unless a token is configured")
		return false
	}
	if p.opts.Token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Engram-Token")), []byte(p.opts.Token)) != 1 {
		add(p.count.refused, "token")
		p.fail(w, r, http.StatusUnauthorized, "authentication_error",
			"engram's proxy needs its token in X-Engram-Token (Claude Code: ANTHROPIC_CUSTOM_HEADERS=\"X-Engram-Token: …\")")
		return false
	}
	return true
}

func loopbackName(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// fail answers with an error of engram's own, in the shape of the
// caller's vendor, said to come from engram.
func (p *Proxy) fail(w http.ResponseWriter, r *http.Request, status int, typ, msg string) {
	msg = "engram proxy: " + msg
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if r.Header.Get("X-Api-Key") != "" || r.Header.Get("Anthropic-Version") != "" {
		_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}})
}

// forward sends the request upstream and passes the answer on as it
// arrives; with seen, it reassembles the assistant's message and stores
// it.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, base string, body []byte, seen *exchange) {
	target := strings.TrimSuffix(base, "/") + r.URL.Path
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	up, err := http.NewRequestWithContext(r.Context(), r.Method, target, bytes.NewReader(body))
	if err != nil {
		p.fail(w, r, http.StatusBadGateway, "api_error", err.Error())
		return
	}
	copyHeaders(up.Header, r.Header)
	up.ContentLength = int64(len(body))
	resp, err := p.client.Do(up)
	if err != nil {
		status := http.StatusBadGateway
		if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			status = http.StatusGatewayTimeout
		}
		if r.Context().Err() != nil {
			return // the client went away
		}
		p.log.Warn("upstream failed", "url", base, "err", err)
		p.fail(w, r, status, "api_error", "the upstream "+base+" did not answer: "+err.Error())
		return
	}
	defer resp.Body.Close()
	copyHeaders(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	var asm assembler
	if seen != nil && resp.StatusCode == http.StatusOK {
		asm = newAssembler(resp.Header.Get("Content-Type"))
	}
	fl, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	var copyErr error
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				copyErr = werr
				break
			}
			if fl != nil {
				fl.Flush()
			}
			if asm != nil {
				asm.write(buf[:n])
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				copyErr = err
			}
			break
		}
	}
	if asm != nil {
		msg, id := asm.message()
		// Stored apart from the request: the client is answered already.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Minute)
		defer cancel()
		if err := p.keepAnswer(ctx, seen, msg, id, copyErr != nil); err != nil {
			p.log.Warn("cannot store the answer", "session", seen.key.SessionID, "err", err)
		}
	}
	if copyErr != nil {
		p.log.Info("stream ended early", "path", r.URL.Path, "err", copyErr)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// exchange is a request the proxy took: its window, and the body to send
// upstream when the window rewrote it (nil: the request as it came).
type exchange struct {
	key  store.WindowKey
	body []byte
}

// messagesRequest is what the proxy reads of a Messages request.
type messagesRequest struct {
	Model    string            `json:"model"`
	System   json.RawMessage   `json:"system"`
	Messages []json.RawMessage `json:"messages"`
	Metadata struct {
		UserID string `json:"user_id"`
	} `json:"metadata"`
}

// take maps a Messages request to its window and appends the messages the
// window does not hold yet.
func (p *Proxy) take(ctx context.Context, h http.Header, body []byte) (*exchange, error) {
	var req messagesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("not a Messages request: %w", err)
	}
	if len(req.Messages) == 0 {
		return nil, errors.New("no messages")
	}
	raws := req.Messages
	if len(bytes.TrimSpace(req.System)) > 0 && string(req.System) != "null" {
		sys, _ := json.Marshal(map[string]json.RawMessage{"role": json.RawMessage(`"system"`), "content": req.System})
		raws = append([]json.RawMessage{sys}, raws...)
	}
	key := store.WindowKey{SessionID: sessionOf(h, req, raws), AgentID: agentOf(h, req)}
	if err := key.Validate(); err != nil {
		return nil, err
	}
	st, err := p.window(ctx, key, req.Model)
	if err != nil {
		return nil, err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	msgs := make([]window.Message, len(raws))
	hashes := make([]string, len(raws))
	for i, raw := range raws {
		m, err := window.FromAnthropic(raw)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		if hashes[i], err = MessageHash(m); err != nil {
			return nil, err
		}
		msgs[i] = m
	}
	k := 0
	for k < len(st.hashes) && k < len(hashes) && st.hashes[k] == hashes[k] {
		k++
	}
	if k < len(st.hashes) {
		// The harness changed what it sent before (Claude Code clears old
		// tool results in place): not followed yet.
		p.log.Info("the harness edited its history; the window keeps what it had", "session", key.SessionID, "at", k, "held", len(st.hashes))
		return &exchange{key: key}, nil
	}
	if k < len(msgs) {
		if _, err := p.windows.Append(ctx, key, msgs[k:]); err != nil {
			return nil, err
		}
		st.hashes = append(st.hashes, hashes[k:]...)
	}
	ex := &exchange{key: key}
	virtual, err := p.virtualize(ctx, key, body, raws, len(raws)-len(req.Messages))
	if err != nil {
		p.log.Warn("sending the request whole: engram could not lay it out", "session", key.SessionID, "err", err)
		return ex, nil
	}
	ex.body = virtual
	return ex, nil
}

// hasToolResult reports whether an Anthropic message holds a tool_result.
func hasToolResult(raw json.RawMessage) bool {
	var m struct {
		Content []struct {
			Type string `json:"type"`
		} `json:"content"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return false
	}
	for _, b := range m.Content {
		if b.Type == "tool_result" {
			return true
		}
	}
	return false
}

// markerNote leads the first markers of a rewritten request.
const markerNote = "[engram: earlier parts of this conversation are stored whole and shown here as markers; to read one, call engram's retrieve_context tool with its ref_id (and a query, to get only the parts that match)]"

// virtualize is the request with the window's layout of its history: the
// messages the window shows whole as the harness sent them this time
// (their cache_control breakpoints where the harness put them), and a
// user message with the marker (or kept excerpt) where each evicted run
// stood. nil when the window shows everything: the request goes as it
// came. off is the ledger's place of the request's first message (1 when
// the system prompt is the ledger's first).
func (p *Proxy) virtualize(ctx context.Context, key store.WindowKey, body []byte, raws []json.RawMessage, off int) ([]byte, error) {
	items, err := p.windows.Context(ctx, key)
	if err != nil {
		return nil, err
	}
	whole := true
	for _, it := range items {
		if it.Message == nil {
			whole = false
			break
		}
	}
	if whole {
		return nil, nil
	}
	var msgs []json.RawMessage
	var notes []string
	told := false
	flush := func() {
		if len(notes) == 0 {
			return
		}
		if !told {
			notes = append([]string{markerNote}, notes...)
			told = true
		}
		m, _ := json.Marshal(map[string]any{"role": "user", "content": []map[string]string{{"type": "text", "text": strings.Join(notes, "\n")}}})
		msgs = append(msgs, m)
		notes = notes[:0]
	}
	// The turn's own message goes whole whatever the window did: the last,
	// and the assistant's before it when the last answers its tool calls.
	protect := len(raws) - 1
	if protect > off && hasToolResult(raws[protect]) {
		protect--
	}
	last := -1
	for _, it := range items {
		if it.Pos >= protect {
			break
		}
		switch {
		case it.Message != nil || it.Excerpt != "":
			// A message the window shows whole, or keeps an excerpt of (a
			// clipped message's head and tail, a digest): sent whole as the
			// harness sent it, so that a tool call keeps its result and
			// the newest messages go as they are.
			if it.Pos < off || it.Pos == last {
				continue // the system prompt is the request's own
			}
			if it.Pos >= len(raws) {
				return nil, fmt.Errorf("the window shows message %d of a request of %d", it.Pos, len(raws))
			}
			flush()
			msgs = append(msgs, raws[it.Pos])
			last = it.Pos
		case it.Marker != "":
			notes = append(notes, it.Marker)
		}
	}
	flush()
	msgs = append(msgs, raws[protect:]...)
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, err
	}
	if obj["messages"], err = json.Marshal(msgs); err != nil {
		return nil, err
	}
	return json.Marshal(obj)
}

// window opens a window the first time this process sees it, and reads
// the hashes of what it holds.
func (p *Proxy) window(ctx context.Context, key store.WindowKey, model string) (*winState, error) {
	p.mu.Lock()
	st, ok := p.state[key]
	if !ok {
		st = &winState{}
		p.state[key] = st
	}
	p.mu.Unlock()
	if ok {
		return st, nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	o := window.OpenOptions{Model: model}
	cat := p.opts.Catalog
	if cat == nil {
		cat, _ = tokens.NewCatalog()
	}
	if _, known := cat.Lookup(model); !known {
		o = window.OpenOptions{Limit: defaultLimit}
	}
	if p.opts.Limit > 0 {
		o = window.OpenOptions{Limit: p.opts.Limit}
	}
	if _, err := p.windows.Status(ctx, key); err != nil {
		if _, err := p.windows.Open(ctx, key, o); err != nil {
			p.forget(key)
			return nil, err
		}
	}
	_, held, _, err := p.windows.Messages(ctx, key)
	if err != nil {
		p.forget(key)
		return nil, err
	}
	for _, m := range held {
		h, err := MessageHash(m)
		if err != nil {
			p.forget(key)
			return nil, err
		}
		st.hashes = append(st.hashes, h)
	}
	return st, nil
}

func (p *Proxy) forget(key store.WindowKey) {
	p.mu.Lock()
	delete(p.state, key)
	p.mu.Unlock()
}

// MessageHash names a message by its Anthropic form as engram writes it
// (equal JSON values give equal bytes), so that a message read back from
// the window and the same message resent by the harness agree; what a
// harness changes in a message it resends without changing the message is
// left out: the cache_control breakpoints (Claude Code moves them to the
// newest messages every turn) and Claude Code's billing header in the
// system prompt (a hash of the request, new every time).
func MessageHash(m window.Message) (string, error) {
	b, err := window.ToAnthropic(m)
	if err != nil {
		return "", err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return "", err
	}
	b, err = json.Marshal(stable(v))
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), nil
}

// stable drops what a harness moves between requests from a decoded
// message.
func stable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		delete(x, "cache_control")
		for k, e := range x {
			x[k] = stable(e)
		}
	case []any:
		out := x[:0]
		for _, e := range x {
			if b, ok := e.(map[string]any); ok {
				if t, _ := b["text"].(string); strings.HasPrefix(t, "x-anthropic-billing-header:") {
					continue
				}
			}
			out = append(out, stable(e))
		}
		return out
	}
	return v
}

// sessionPattern finds the session in Claude Code's older user_id format
// (user_<hash>_account_<uuid>_session_<uuid>).
var sessionPattern = regexp.MustCompile(`session_([0-9A-Fa-f-]{36})`)

// sessionOf is a request's session: X-Engram-Session, else the session
// Claude Code names in metadata.user_id (a JSON object with session_id in
// 2.1; an underscored string before), else a hash of the conversation's
// start, which every later request of it repeats.
func sessionOf(h http.Header, req messagesRequest, raws []json.RawMessage) string {
	if s := h.Get("X-Engram-Session"); s != "" {
		return s
	}
	if s := claudeSession(req.Metadata.UserID); s != "" {
		return s
	}
	sum := sha256.New()
	for _, raw := range raws[:min(2, len(raws))] {
		var c bytes.Buffer
		if json.Compact(&c, raw) == nil {
			sum.Write(c.Bytes())
		} else {
			sum.Write(raw)
		}
		sum.Write([]byte{0})
	}
	return "conv-" + hex.EncodeToString(sum.Sum(nil)[:8])
}

// claudeSession reads the session from Claude Code's metadata.user_id,
// whatever of its known shapes it has; "" when none.
func claudeSession(userID string) string {
	if userID == "" {
		return ""
	}
	var obj struct {
		SessionID string `json:"session_id"`
	}
	if json.Unmarshal([]byte(userID), &obj) == nil && obj.SessionID != "" && len(obj.SessionID) <= store.MaxIdentifierBytes {
		return obj.SessionID
	}
	if m := sessionPattern.FindStringSubmatch(userID); m != nil {
		return m[1]
	}
	return ""
}

// agentOf is the window's agent: the harness's agent, as its hooks name it
// (claude-code@SESSION is the hooks' archive agent; the window's agent is
// the harness itself), else the proxy.
func agentOf(h http.Header, req messagesRequest) string {
	if a := h.Get("X-Engram-Agent"); a != "" {
		return a
	}
	if claudeSession(req.Metadata.UserID) != "" || strings.Contains(h.Get("User-Agent"), "claude-cli") {
		return "claude-code"
	}
	return "proxy"
}
