// Package proxy puts engram between an agent harness and its model: the
// harness points its model base URL at engram, engram forwards each
// request to the vendor's API and the answer back as it arrives, and
// stores what it saw on the way.
//
//   - Routes. Anthropic Messages (POST /v1/messages, streaming and not),
//     OpenAI Chat Completions (POST /v1/chat/completions) and OpenAI
//     Responses (POST /v1/responses, responses.go) are read, stored and
//     laid out (protocol.go); a count of tokens (POST
//     /v1/messages/count_tokens) is laid out as its conversation would be
//     sent, and not stored; every other path goes through untouched, to
//     the Anthropic upstream when the request carries Anthropic's headers
//     (x-api-key, anthropic-version), else to the OpenAI one.
//   - Credentials. The caller's vendor credentials are forwarded as
//     given, never read, stored or logged. engram's own token, when one
//     is configured, travels in X-Engram-Token, which is not forwarded. A
//     request a browser sends from another site is refused.
//   - Windows (conversation.go). Each request is mapped to a window: the
//     session of X-Engram-Session, else the session the harness names
//     (Claude Code's metadata.user_id), else a hash of the conversation's
//     start. The harness resends the whole history every turn; the proxy
//     keeps, per window, a hash of each message it appended (what the
//     harness moves between requests, cache_control and Claude Code's
//     billing header, left out), and appends only the new tail; it reads
//     the window again when its version says that another server over
//     the same store (behind a load balancer) changed it. A history
//     the harness edited in place (the same roles and tool ids, every user
//     prompt unchanged: Claude Code clears old tool results) is followed:
//     the window keeps the bytes it stored and the edit goes upstream as
//     sent. A conversation started over under the same session (a
//     /compact, a rewind, a prompt asked again, a side request) gets a
//     window of its own, the agent's next (claude-code-2, ...). The window's context is the
//     model's (or Options.Limit) less the request's tool schemas. The
//     assistant's message is reassembled from the answer (streamed or
//     not) and stored as an entry; it joins the window when the harness
//     sends it back with the next request, as the harness keeps it.
//   - Virtualization. Once the window has evicted (at its threshold, down
//     to its target, whole units: a tool call stays with its results), the
//     request goes upstream with the window's layout: the messages it
//     shows, as the harness sent them this time (their cache_control
//     where the harness put them), and a user message of markers where
//     each evicted run stood; the turn's own messages (the last, and the
//     calls its tool results answer, signed thinking included) always go
//     whole. The layout changes only when the window evicts again, so the
//     rewritten prefix stays byte-stable between evictions and the
//     provider's prompt cache keeps hitting. Under the threshold the
//     request goes as it came.
//   - Forward first. The body is split (split.go), not decoded, and each
//     message known by a hash of its bytes: only the new tail is decoded.
//     When the window's layout with the new messages stays within its
//     budget, the request leaves at once; the append, the body validated
//     first, follows, holding the conversation's lock. The answer is
//     stored after the client has it; Wait waits for both. Idle for
//     Options.ReleaseIdle, the proxy returns its free memory to the system.
//   - Fail open. An error of engram's before the request is forwarded
//     (a body it cannot read, a store that fails) is logged and counted
//     (Stats), and the request goes on unchanged. Upstream answers, errors
//     included, reach the client verbatim with their status codes, and
//     streams are passed on as they arrive, flushed event by event. A
//     client that leaves mid-stream cancels the upstream request; what
//     arrived of the answer is stored, marked partial, as is an answer
//     that did not reach its end (an error event, a failed or incomplete
//     response, a stream without its end event).
//   - Refusals. What engram refuses (no token, a web page, a body over
//     MaxBody) is answered in the error shape of the API the client
//     speaks and with X-Should-Retry: false, so that the harness shows
//     engram's message and does not send the same request again.
package proxy

import (
	"bytes"
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/secrets"
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
	// DefaultReleaseIdle is Options.ReleaseIdle's default: longer than a
	// harness's pause between turns (its tools run), so that a session's
	// turns pay no forced collection.
	DefaultReleaseIdle = 30 * time.Second
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
	Limit int
	// Role is the windows' role, which picks their policy (window.Policies,
	// or the Manager's [window.roles]); empty is window.ToolLoopRole, the
	// policy measured on real agents' runs: a harness is a tool loop.
	Role   string
	Logger *slog.Logger
	// Transport reaches the upstreams; nil is a clone of the default.
	Transport http.RoundTripper
	// ReleaseIdle is how long the proxy waits, once no request is in
	// flight and nothing is being stored, before it returns the memory
	// its requests used to the operating system (zero: DefaultReleaseIdle;
	// negative: never). Go's runtime keeps freed memory for reuse, so a
	// burst of large requests would otherwise leave the process at its
	// peak.
	ReleaseIdle time.Duration
	// StoreTimeout bounds what the proxy does with a request before it
	// forwards it (reading the session's windows, storing the turn); past
	// it, the request goes as it came. Zero means DefaultStoreTimeout.
	StoreTimeout time.Duration
}

// Proxy is the handler.
type Proxy struct {
	eng     *engine.Engine
	windows *window.Manager
	opts    Options
	client  *http.Client
	log     *slog.Logger

	catalog *tokens.Catalog
	count   *counters
	busy    idleRelease // handlers and the stores they leave behind (Wait)

	mu     sync.Mutex
	states map[store.WindowKey]*winState
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
	if opts.Role == "" {
		opts.Role = window.ToolLoopRole
	}
	if !windows.KnownRole(opts.Role) {
		// Nobody would be told that the windows took the default's policy.
		return nil, fmt.Errorf("role %q names no window policy: the roles are %s (a [window.roles] table in the config adds one)",
			opts.Role, strings.Join(windows.Roles(), ", "))
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.ReleaseIdle == 0 {
		opts.ReleaseIdle = DefaultReleaseIdle
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
	cat := opts.Catalog
	if cat == nil {
		var err error
		if cat, err = tokens.NewCatalog(); err != nil {
			return nil, err
		}
	}
	return &Proxy{eng: eng, windows: windows, opts: opts, log: log.With("component", "proxy"), catalog: cat,
		client: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		states: map[store.WindowKey]*winState{}, count: newCounters()}, nil
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
	p.busy.enter()
	defer p.busy.leave(p.opts.ReleaseIdle)
	if r.Method == http.MethodHead && r.URL.Path == "/" && r.Header.Get("Origin") == "" {
		// Claude Code's check that its base URL answers, at start, sent
		// without its custom headers (so without the token): answered
		// here, holding nothing, rather than refused and logged at every
		// start.
		w.WriteHeader(http.StatusOK)
		return
	}
	if !p.allowed(w, r) {
		return
	}
	tooLarge := func() {
		add(p.count.refused, "too_large")
		p.fail(w, r, http.StatusRequestEntityTooLarge, "request_too_large",
			fmt.Sprintf("the request body is over the proxy's limit of %d bytes (engram proxy --max-body, engram serve --proxy-max-body)", p.opts.MaxBody))
	}
	if r.ContentLength > p.opts.MaxBody {
		tooLarge() // before the body is asked for
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.opts.MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			tooLarge()
			return
		}
		add(p.count.refused, "unreadable")
		p.fail(w, r, http.StatusBadRequest, "invalid_request_error", "cannot read the request body: "+err.Error())
		return
	}
	base := p.opts.OpenAI
	if anthropicRequest(r) {
		base = p.opts.Anthropic
	}
	proto, store := routeOf(r)
	route := "other"
	if proto != nil {
		route = proto.route()
		if !store {
			route = "count_tokens"
		}
	}
	add(p.count.requests, route)
	var seen *exchange
	if proto != nil {
		// Fail open: what engram cannot take, it forwards as it came.
		// A store that stops answering must not hold the harness: past
		// StoreTimeout the request goes as it came.
		tctx, cancel := context.WithTimeout(r.Context(), cmp.Or(p.opts.StoreTimeout, DefaultStoreTimeout))
		seen, err = p.take(tctx, proto, r.Header, body, store)
		cancel()
		if err != nil {
			p.count.failedOpen.Add(1)
			// The error may quote the request: never a secret in the log.
			why, _ := secrets.Redact(err.Error())
			p.log.Warn("forwarding a request engram could not store", "path", r.URL.Path, "err", why)
			seen = nil
		}
		if !store {
			if seen != nil && seen.body != nil {
				body = seen.body
			}
			seen = nil // nothing of an answer to keep
		}
	}
	if seen != nil && seen.body != nil {
		body = seen.body
	}
	if seen != nil && seen.later != nil {
		later := seen.later
		p.busy.enter()
		go func() {
			defer p.busy.leave(p.opts.ReleaseIdle)
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Minute)
			defer cancel()
			later(ctx)
		}()
	}
	p.forward(w, r, base, body, seen, proto)
}

// DefaultStoreTimeout is Options.StoreTimeout's default: a first sight
// of 10,000 messages takes a few seconds; a store that stops answering
// (a database host frozen) must not hold the harness longer.
const DefaultStoreTimeout = 20 * time.Second

// Wait waits for the requests in flight and for what the proxy stores
// once it has forwarded a request: the turn's messages when it sent the
// request first, and the answers. A server stopping calls it after its
// last request.
func (p *Proxy) Wait() { p.busy.wait() }

// routeOf is the protocol of a request engram reads, and whether it
// stores it (a count of tokens it lays out only); nil for a request it
// passes on untouched.
func routeOf(r *http.Request) (protocol, bool) {
	if r.Method != http.MethodPost {
		return nil, false
	}
	switch r.URL.Path {
	case "/v1/messages":
		return messagesAPI{}, true
	case "/v1/messages/count_tokens":
		return messagesAPI{}, false
	case "/v1/chat/completions":
		return chatAPI{}, true
	case "/v1/responses":
		return responsesAPI{}, true
	}
	return nil, false
}

// allowed refuses what a browser sends from another site, and a request
// without engram's token when one is configured.
func (p *Proxy) allowed(w http.ResponseWriter, r *http.Request) bool {
	refuse := func(reason string, status int, typ, msg string) bool {
		add(p.count.refused, reason)
		// Logged as engram serve logs its refusals, never with a credential.
		p.log.Warn("request refused", "reason", reason, "status", status, "remote", r.RemoteAddr, "method", r.Method,
			"path", r.URL.Path, "host", r.Host, "origin", r.Header.Get("Origin"))
		p.fail(w, r, status, typ, msg)
		return false
	}
	if r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return refuse("origin", http.StatusForbidden, "permission_error", "engram's proxy takes no requests from web pages")
	}
	if host, _, err := net.SplitHostPort(r.Host); err == nil && !loopbackName(host) && p.opts.Token == "" {
		return refuse("host", http.StatusForbidden, "permission_error", "engram's proxy answers loopback names only unless a token is configured")
	}
	if p.opts.Token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Engram-Token")), []byte(p.opts.Token)) != 1 {
		return refuse("token", http.StatusUnauthorized, "authentication_error",
			"engram's proxy needs its token in X-Engram-Token (Claude Code: ANTHROPIC_CUSTOM_HEADERS=\"X-Engram-Token: …\")")
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

// anthropicRequest reports whether r speaks Anthropic's API: its
// headers, or the Messages API's path.
func anthropicRequest(r *http.Request) bool {
	return r.Header.Get("X-Api-Key") != "" || r.Header.Get("Anthropic-Version") != "" ||
		strings.HasPrefix(r.URL.Path, "/v1/messages")
}

// fail answers with an error of engram's own, in the shape of the API
// the caller speaks (Anthropic's error event, or OpenAI's error object),
// whose message the harnesses show, said to come from engram. A refusal
// (a 4xx: no token, a web page, a body over the limit or unreadable)
// carries X-Should-Retry: false, which the vendors' SDKs and Claude Code
// obey before their own rules (Claude Code retries a 401 up to ten
// times): the same request would be refused again. Codex 0.171 does not
// read it. An upstream that did not answer (a 5xx) may answer next time,
// and the client's own rules decide.
func (p *Proxy) fail(w http.ResponseWriter, r *http.Request, status int, typ, msg string) {
	msg = "engram proxy: " + msg
	w.Header().Set("Content-Type", "application/json")
	if status < 500 {
		w.Header().Set("X-Should-Retry", "false")
	}
	w.WriteHeader(status)
	if anthropicRequest(r) {
		_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}})
}

// forward sends the request upstream and passes the answer on as it
// arrives; with seen, it reassembles the assistant's message and stores
// it.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, base string, body []byte, seen *exchange, proto protocol) {
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
	if seen != nil {
		// The answer is read to be stored: it is asked for plain, so that
		// what is read is the JSON or the event stream, not gzip's bytes
		// (the client gets it plain too).
		up.Header.Set("Accept-Encoding", "identity")
	}
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
		if status == http.StatusGatewayTimeout {
			add(p.count.upstream, "timeout")
		} else {
			add(p.count.upstream, "unreachable")
		}
		// The URL's query may hold a credential: say what failed, not
		// the request.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		why := err.Error()
		switch {
		case status == http.StatusGatewayTimeout:
			why = fmt.Sprintf("no answer within the proxy's timeout (%v)", p.opts.Timeout)
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			why = "it closed the connection without an answer"
		}
		p.log.Warn("upstream failed", "url", base, "err", err)
		p.fail(w, r, status, "api_error", "the upstream "+base+" did not answer: "+why)
		return
	}
	defer resp.Body.Close()
	add(p.count.upstream, upstreamClass(resp.StatusCode))
	copyHeaders(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	var asm assembler
	if seen != nil && resp.StatusCode == http.StatusOK {
		if ce := resp.Header.Get("Content-Encoding"); ce != "" && ce != "identity" {
			// Compressed all the same: passed on, not stored.
			p.log.Warn("the upstream compressed an answer asked for plain: not stored", "encoding", ce, "path", r.URL.Path)
		} else {
			asm = proto.assembler(resp.Header.Get("Content-Type"))
		}
	}
	fl, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	var copyErr error
	cut := false // the upstream's answer ended before its end
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
				copyErr, cut = err, true
			}
			break
		}
	}
	if asm != nil {
		msg, id := asm.message()
		// Cut short for the connection (the client left, the upstream
		// broke off) or for the answer (an error event, a response that
		// failed, no end event): what arrived is stored, marked partial.
		partial := copyErr != nil || !asm.whole()
		// Stored apart from the request: the client is answered already.
		p.busy.enter()
		go func() {
			defer p.busy.leave(p.opts.ReleaseIdle)
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Minute)
			defer cancel()
			if err := p.keepAnswer(ctx, seen, msg, id, partial); err != nil {
				p.log.Warn("cannot store the answer", "session", seen.key.SessionID, "err", err)
			}
		}()
	}
	if copyErr != nil {
		p.log.Info("stream ended early", "path", r.URL.Path, "err", copyErr)
	}
	if cut {
		// The client must not take a cut answer for a whole one (a Chat
		// Completions stream has no end event to miss): its connection
		// is broken off, as the upstream's was.
		panic(http.ErrAbortHandler)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
