package httpapi

import (
	"bytes"
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/mcpserver"
	"github.com/engramhq/engram/internal/metrics"
	"github.com/engramhq/engram/internal/store"
)

// What every request passes before a route sees it, in order:
//
//  1. Host: the name the request was sent to must be one the server
//     answers to (loopback's names, the bind address, Options.AllowedHosts).
//     A page on evil.example whose name the attacker re-points at 127.0.0.1
//     (DNS rebinding) sends Host: evil.example, and is refused.
//  2. Origin: a browser names the page that sent a request; only the
//     server's own origin and Options.AllowedOrigins are let in, and a
//     request a browser marks cross-site (Sec-Fetch-Site) is refused, as
//     is one from the same site (another port) but a navigation.
//  3. Credentials: the operator's token, or an agent's key
//     (Authorization: Bearer, the scheme in any case), or the dashboard's
//     session cookie (login.go), which reads only: what the JSON API
//     serves to GET and HEAD, and POST /v1/retrieve; no other POST (recall
//     takes @arch:store:) and no MCP. Loopback is not trusted unless
//     Options.TrustLoopback says so.
//  4. Content type: a write (POST, PUT, PATCH) must be JSON, which a
//     browser's "simple" cross-site request cannot send.
//     A query string must be read whole: url.Values drops what it cannot
//     read (a ";", a bad escape), and a filter would go unseen.
//  5. Admission: at most MaxInFlight requests are served at once and
//     MaxQueue wait for a slot, each at most QueueWait; the rest are
//     answered 503 with Retry-After at once, rather than all of them
//     slowly.
//
// Refusals are logged (never with the credential) and counted by reason.

// principal is who a request is: the operator, or one agent.
type principal struct {
	operator bool
	agent    *archive.Handle // the agent whose key the request carries
	// reader: signed in by the dashboard's cookie, which may read what
	// the operator may, and write nothing; cookie is the cookie's nonce
	// (one browser's sign-in).
	reader bool
	cookie string
}

// streamer names the principal for the event streams' bounds: an agent,
// one browser's sign-in, or the operator's token.
func (p principal) streamer() string {
	if p.reader {
		return "reader:" + p.cookie
	}
	return p.holder()
}

// holder names who holds the principal's credential, for the bounds on
// what one may hold open (event streams, MCP sessions): an agent's key
// and the keys of the sub-agents it registered are one holder, as they
// share their rate limits, so that registering agents cannot multiply
// the bounds.
func (p principal) holder() string {
	if p.agent != nil {
		ag := p.agent.Agent()
		return "agent:" + cmp.Or(ag.Credential, ag.ID)
	}
	return p.id()
}

// id names the principal for the MCP SDK's session-hijacking check: a
// session opened with one credential answers no other.
func (p principal) id() string {
	if p.agent != nil {
		return "agent:" + p.agent.Agent().ID
	}
	if p.reader {
		return "reader"
	}
	return "operator"
}

type principalKey struct{}

func principalOf(ctx context.Context) (principal, bool) {
	p, ok := ctx.Value(principalKey{}).(principal)
	return p, ok
}

// guard implements the checks above for one project's handler.
type guard struct {
	opts    Options
	eng     *engine.Engine
	log     *slog.Logger
	metrics *metrics.Metrics
	hosts   hostSet
	origins map[string]bool
	adm     *Admission
	// bodyTime is bodyReadTime when the guard was made.
	bodyTime time.Duration
	logins   *Logins
}

func newGuard(eng *engine.Engine, opts Options, log *slog.Logger) *guard {
	g := &guard{opts: opts, eng: eng, log: log, metrics: opts.Metrics, hosts: newHostSet(opts.AllowedHosts),
		origins: map[string]bool{}, adm: opts.Admission, bodyTime: bodyReadTime}
	for _, o := range opts.AllowedOrigins {
		g.origins[strings.TrimSuffix(strings.ToLower(o), "/")] = true
	}
	if g.adm == nil {
		g.adm = NewAdmission(0, 0, 0)
	}
	if g.logins = opts.Logins; g.logins == nil {
		g.logins = NewLogins()
	}
	return g
}

// refuse answers a refused request and logs and counts it.
func (g *guard) refuse(w http.ResponseWriter, r *http.Request, status int, reason, code, msg string) {
	g.metrics.Refused(reason)
	g.log.Warn("request refused", "reason", reason, "status", status, "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path,
		"host", r.Host, "origin", r.Header.Get("Origin"), "detail", detail(msg))
	writeError(w, status, code, msg)
}

// detail is the first clause of a refusal's message, for the log.
func detail(msg string) string {
	if i := strings.IndexAny(msg, ":;"); i > 0 {
		return msg[:i]
	}
	return msg
}

// checkSite refuses requests for a foreign Host or from a foreign Origin;
// it reports whether the request may go on.
func (g *guard) checkSite(w http.ResponseWriter, r *http.Request) bool {
	if !g.hosts.allows(r.Host) {
		g.refuse(w, r, http.StatusForbidden, "host", "forbidden_host",
			fmt.Sprintf("this server does not answer to the host %q; allow it with serve.allowed_hosts if it is yours", r.Host))
		return false
	}
	if origin := r.Header.Get("Origin"); origin != "" && !g.originAllowed(origin, r.Host) {
		g.refuse(w, r, http.StatusForbidden, "origin", "forbidden_origin",
			fmt.Sprintf("requests from the page origin %q are refused; allow it with serve.allowed_origins if it is yours", origin))
		return false
	}
	// Without an Origin (a no-cors GET, a navigation), the browser's
	// Sec-Fetch-Site says where the request comes from. Another port of
	// the same host is the same site, and gets the session cookie: a
	// page there may follow a link here, no more (it could not read an
	// answer, but could tell a 200 from a 404).
	switch site := r.Header.Get("Sec-Fetch-Site"); {
	case r.Header.Get("Origin") != "":
	case site == "cross-site", site == "same-site" && (r.Header.Get("Sec-Fetch-Mode") != "navigate" || r.Header.Get("Sec-Fetch-Dest") != "document"):
		// (An iframe's load is a navigation too, to an iframe.)
		g.refuse(w, r, http.StatusForbidden, "origin", "forbidden_origin", site+" requests are refused")
		return false
	}
	return true
}

// originAllowed reports whether a browser origin may call: the server's
// own (the scheme's host and port equal to Host), or one configured.
func (g *guard) originAllowed(origin, host string) bool {
	o := strings.TrimSuffix(strings.ToLower(origin), "/")
	if g.origins[o] || g.origins["*"] {
		return true
	}
	return ownOrigin(o, host, g.hosts)
}

// ownOrigin reports whether a browser origin is the server's own: its
// scheme's host and port are the request's Host, a name it answers to.
func ownOrigin(origin, host string, hosts hostSet) bool {
	u, err := url.Parse(strings.TrimSuffix(strings.ToLower(origin), "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false
	}
	return strings.EqualFold(u.Host, host) && hosts.allows(u.Host)
}

// authenticate returns the request's principal, or answers 401 and
// reports false.
func (g *guard) authenticate(w http.ResponseWriter, r *http.Request) (principal, bool) {
	p, why, err := g.credential(r)
	switch {
	case err != nil:
		g.log.Error("authenticate an agent key", "err", err)
		if errors.Is(err, store.ErrUnavailable) {
			writeUnavailable(w)
		} else {
			writeError(w, http.StatusInternalServerError, "internal", "internal error; the server's log has the details")
		}
		return principal{}, false
	case why != "":
		g.unauthorized(w, r, why)
		return principal{}, false
	}
	return p, true
}

// credential returns the principal of the credential r carries, or why
// it is refused; err is a failure to check it (the store's).
func (g *guard) credential(r *http.Request) (p principal, why string, err error) {
	hdr := r.Header.Get("Authorization")
	if hdr == "" {
		nonce, why := g.sessionCookie(r)
		if nonce != "" {
			return principal{operator: true, reader: true, cookie: nonce}, "", nil
		}
		// A page of another origin, even one let in, is no trusted
		// loopback caller: a browser on this machine sends its requests
		// from loopback (with allowed_origins "*", any web page would
		// have been the operator).
		origin := r.Header.Get("Origin")
		if g.opts.TrustLoopback && remoteLoopback(r.RemoteAddr) && (origin == "" || ownOrigin(origin, r.Host, g.hosts)) {
			return principal{operator: true}, "", nil
		}
		return principal{}, firstOf(why, "missing token"), nil
	}
	scheme, cred, _ := strings.Cut(strings.TrimSpace(hdr), " ")
	cred = strings.TrimSpace(cred)
	if !strings.EqualFold(scheme, "bearer") || cred == "" {
		return principal{}, "not a bearer token", nil
	}
	if g.opts.Token != "" && subtle.ConstantTimeCompare([]byte(cred), []byte(g.opts.Token)) == 1 {
		return principal{operator: true}, "", nil
	}
	if archive.IsKey(cred) {
		arc, err := g.eng.Archive(r.Context())
		if err != nil {
			return principal{}, "", err
		}
		h, err := arc.Authenticate(r.Context(), cred)
		if err == nil {
			return principal{agent: h}, "", nil
		}
		if !errors.Is(err, archive.ErrBadKey) {
			return principal{}, "", err
		}
		return principal{}, "unknown agent key", nil
	}
	return principal{}, "wrong token", nil
}

// stillValid reports whether the credential r was admitted with still
// is: a request that lasts (an event stream) asks again now and then, so
// that a sign-out, an expired cookie or an agent's new key ends it.
//
// A failure to check (the store's, passing) keeps the stream: it is
// logged, and the next check decides.
func (g *guard) stillValid(r *http.Request) bool {
	_, why, err := g.credential(r)
	if err != nil {
		g.log.Warn("event stream: check its credential again", "err", err)
		return true
	}
	return why == ""
}

func (g *guard) unauthorized(w http.ResponseWriter, r *http.Request, reason string) {
	w.Header().Set("WWW-Authenticate", bearerChallenge(r, reason))
	g.refuse(w, r, http.StatusUnauthorized, "token", "unauthorized",
		reason+": send Authorization: Bearer <token> (engram token prints the server's; an agent sends the key it was registered with)")
}

// checkJSON refuses a write whose body is not declared JSON.
func (g *guard) checkJSON(w http.ResponseWriter, r *http.Request) bool {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		return true
	}
	if r.ContentLength == 0 && r.Header.Get("Content-Type") == "" {
		// No body, none declared (a POST that only acts, such as a key's
		// rotation): nothing a form could have sent.
		return true
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err == nil && (mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")) {
		return true
	}
	g.refuse(w, r, http.StatusUnsupportedMediaType, "content_type", "unsupported_media_type",
		fmt.Sprintf("send the body as JSON with Content-Type: application/json (got %q)", r.Header.Get("Content-Type")))
	return false
}

// checkQuery refuses a request whose query string cannot be read whole:
// url.Values keeps the parameters it can read and drops the rest without
// a word (a pair with ";" or a bad escape, every pair past Go's 10,000),
// so that GET /v1/windows?session=s1; listed every session's windows.
func (g *guard) checkQuery(w http.ResponseWriter, r *http.Request) bool {
	if _, err := url.ParseQuery(r.URL.RawQuery); err != nil {
		g.refuse(w, r, http.StatusBadRequest, "query", "validation",
			fmt.Sprintf("the query string cannot be read: %v (separate parameters with &, and escape %% as %%25 and ; as %%3B)", err))
		return false
	}
	return true
}

// site returns next behind the Host and Origin checks, which apply to
// every route, health included.
func (g *guard) site(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.checkSite(w, r) {
			return
		}
		if g.cors(w, r) {
			return
		}
		next.ServeHTTP(w, r)
	})
}

// cors lets a page of an origin configured (serve.allowed_origins) call
// the API, as the browser asks (CORS): its answers say the origin may
// read them, and its preflight (OPTIONS, no credential) is answered
// here, with the methods and headers the API takes. No cookie goes with
// such a request (no Allow-Credentials): the page sends a token or an
// agent's key. It reports whether it answered the request.
func (g *guard) cors(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	o := strings.TrimSuffix(strings.ToLower(origin), "/")
	if origin == "" || !g.origins[o] && !g.origins["*"] {
		return false
	}
	h := w.Header()
	h.Add("Vary", "Origin")
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Expose-Headers", "ETag, Retry-After, Mcp-Session-Id, Idempotent-Replayed, Allow")
	if r.Method != http.MethodOptions || r.Header.Get("Access-Control-Request-Method") == "" {
		return false
	}
	h.Add("Vary", "Access-Control-Request-Method, Access-Control-Request-Headers")
	h.Set("Access-Control-Allow-Methods", "GET, HEAD, POST, PUT, DELETE")
	h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Idempotency-Key, If-None-Match, Last-Event-ID, "+
		"Mcp-Session-Id, Mcp-Protocol-Version, X-Engram-Session, X-Engram-Agent, X-Engram-Model")
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
	return true
}

// wrap returns next behind the credential and content-type checks and,
// for the requests admit selects, admission.
func (g *guard) wrap(next http.Handler, admit func(*http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := g.authenticate(w, r)
		if !ok || !g.checkJSON(w, r) || !g.checkQuery(w, r) {
			return
		}
		// Of the query POSTs the reader runs only retrieve: recall takes
		// @arch:store:, and prefetch needs no page.
		if p.reader && (isWrite(r) || r.Method == http.MethodPost && r.Pattern != "POST /v1/retrieve") {
			g.refuse(w, r, http.StatusForbidden, "reader", "read_only",
				"the dashboard's sign-in reads only: "+r.Method+" needs the token (Authorization: Bearer)")
			return
		}
		if admit(r) {
			overloaded := func() {
				w.Header().Set("Retry-After", strconv.Itoa(int(g.adm.retryAfter().Seconds())))
				g.refuse(w, r, http.StatusServiceUnavailable, "overloaded", "overloaded",
					"the server is busy with other requests; retry after the time Retry-After gives")
			}
			// Refused at once when nothing could take the request, its
			// body unread, as before bodies were read first.
			if g.adm.saturated() {
				overloaded()
				return
			}
			done, ok := g.readBody(w, r, p, overloaded)
			if !ok {
				return
			}
			defer done()
			release, ok := g.adm.acquire(r.Context())
			if !ok {
				if r.Context().Err() != nil {
					return
				}
				overloaded()
				return
			}
			defer release()
			// A store that stops answering (a database host frozen) would
			// hold the request, and its slot, for good.
			ctx, cancel := context.WithTimeout(r.Context(), cmp.Or(g.opts.RequestTimeout, DefaultRequestTimeout))
			defer cancel()
			r = r.WithContext(ctx)
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// DefaultRequestTimeout bounds an admitted request's work (not an event
// stream's): a store that stops answering would hold it, and its slot,
// for good.
const DefaultRequestTimeout = 2 * time.Minute

// bodyReadTime is how long a request's body has to arrive once its
// headers have (a variable for tests: a guard takes it when made).
var bodyReadTime = 30 * time.Second

// readBody reads a request's body whole, within the size cap, before the
// request takes an admission slot: a slot is for work, and a client that
// sends its body slowly (or never) would hold one, and with a few
// connections stall the server. A body declared over the cap is refused
// before any of it is read; the bodies read at once are bounded in bytes
// (Admission), each taking its room as its bytes arrive, past which a
// request is overloaded(), or 429 when its credential (p's, unless the
// operator's) has its share on the way; a body has bodyReadTime to
// arrive. done gives the body's bytes back, when the request is over.
//
// Room is taken as bytes arrive, not as declared: bodies declared large
// and never sent (16 connections of an agent's key, each a chunked POST's
// headers) took the whole budget, and every write on the server was
// refused.
func (g *guard) readBody(w http.ResponseWriter, r *http.Request, p principal, overloaded func()) (done func(), ok bool) {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		return func() {}, true
	}
	limit := g.opts.MaxBodyBytes
	tooLarge := func() (func(), bool) {
		g.refuse(w, r, http.StatusRequestEntityTooLarge, "too_large", "too_large", fmt.Sprintf("the body is over %d bytes", limit))
		return nil, false
	}
	if r.ContentLength > limit {
		return tooLarge()
	}
	holder := ""
	if p.agent != nil || p.reader {
		holder = p.streamer()
	}
	hold := g.adm.holdBody(holder, limit)
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(g.bodyTime))
	var buf bytes.Buffer
	buf.Grow(int(min(max(r.ContentLength, 0), bodyStep)))
	_, err := io.Copy(&buf, &heldReader{r: http.MaxBytesReader(w, r.Body, limit), hold: hold})
	if err == nil {
		_ = rc.SetReadDeadline(time.Time{})
		r.Body = io.NopCloser(bytes.NewReader(buf.Bytes()))
		return hold.release, true
	}
	// The body is not read whole: the connection closes after the
	// answer. The read deadline stays, so that the server's own read of
	// what is left (before it answers) does not wait for a client that
	// sends nothing more: with it cleared, a 408 was never sent.
	hold.release()
	w.Header().Set("Connection", "close")
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.Is(err, errNoBodyRoom):
		overloaded()
		return nil, false
	case errors.Is(err, errHolderBodies):
		w.Header().Set("Retry-After", strconv.Itoa(int(g.adm.retryAfter().Seconds())))
		g.refuse(w, r, http.StatusTooManyRequests, "bodies", "rate_limited",
			fmt.Sprintf("this credential's requests are sending %d bytes at once, its share of the server's room for bodies: retry once they are sent", g.adm.bodiesHeld(holder)))
		return nil, false
	case errors.As(err, &mbe):
		return tooLarge()
	case errors.As(err, &ne) && ne.Timeout():
		g.refuse(w, r, http.StatusRequestTimeout, "body", "body_incomplete",
			fmt.Sprintf("the body did not arrive whole in %v (%d bytes read)", g.bodyTime, buf.Len()))
		return nil, false
	default:
		g.refuse(w, r, http.StatusBadRequest, "body", "body_incomplete",
			fmt.Sprintf("the body could not be read whole (%d bytes read): it ended before its length, or its chunked encoding is malformed", buf.Len()))
		return nil, false
	}
}

// bodyStep is the room a body takes at a time among the bodies read at
// once, as its bytes arrive.
const bodyStep = 4 << 10

// heldReader reads a body, taking room for its bytes in hold as they
// arrive; it fails with errNoBodyRoom or errHolderBodies when there is
// none.
type heldReader struct {
	r    io.Reader
	hold *bodyHold
	n    int64
}

func (h *heldReader) Read(p []byte) (int, error) {
	k, err := h.r.Read(p)
	h.n += int64(k)
	if err := h.hold.grow(h.n); err != nil {
		return k, err
	}
	return k, err
}

// remoteLoopback reports whether a request's peer address is loopback.
func remoteLoopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// hostSet holds the host names (lower case, no port, no trailing dot) a
// server answers to.
type hostSet struct {
	names map[string]bool
	any   bool
}

// loopbackNames are always allowed: a request for them can only come from
// this machine, as DNS rebinding cannot make a foreign name look like one.
var loopbackNames = []string{"localhost", "127.0.0.1", "::1"}

func newHostSet(extra []string) hostSet {
	hs := hostSet{names: map[string]bool{}}
	for _, n := range append(append([]string(nil), loopbackNames...), extra...) {
		if n == "*" {
			hs.any = true
			continue
		}
		hs.names[normHost(n)] = true
	}
	return hs
}

func (hs hostSet) allows(host string) bool {
	if host == "" {
		return false
	}
	if hs.any {
		return true
	}
	h := normHost(host)
	return hs.names[h] || strings.HasSuffix(h, ".localhost")
}

// normHost returns the name of a Host value: lower case, without its port,
// brackets or trailing dot.
func normHost(host string) string {
	h := strings.ToLower(strings.TrimSpace(host))
	if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.TrimSuffix(h, ".")
}

// Admission bounds the work a server does at once: MaxInFlight requests
// are served, up to MaxQueue more wait for a slot at most QueueWait each,
// and the rest are refused at once. One Admission may be shared by the
// handlers of several projects, so that they share the machine's cores.
type Admission struct {
	slots   chan struct{}
	waiting atomic.Int64
	queue   int64
	wait    time.Duration
	// The bytes of request bodies read or held at once are bounded
	// (bodyBudget of them), as bodies are read before a slot is taken;
	// held counts them, and heldBy and bounded those of the holders of
	// agents' keys and dashboard sign-ins (bodyShare).
	mu         sync.Mutex
	bodyBudget int64
	held       int64
	heldBy     map[string]int64
	bounded    int64
}

// Admission defaults: four requests in flight per core, 32 times as many
// waiting, for at most two seconds: what waits longer is answered 503.
const (
	DefaultQueueWait = 2 * time.Second
)

// NewAdmission returns an Admission; zero values take the defaults, and a
// negative queue means none: what finds no free slot is refused at once.
func NewAdmission(inFlight, queue int, wait time.Duration) *Admission {
	if inFlight <= 0 {
		inFlight = 4 * runtime.GOMAXPROCS(0)
	}
	switch {
	case queue == 0:
		queue = 32 * inFlight
	case queue < 0:
		queue = 0
	}
	if wait <= 0 {
		wait = DefaultQueueWait
	}
	// Twice what the requests in flight may send: room for those waiting.
	budget := 2 * int64(inFlight) * MaxBodyBytes
	return &Admission{slots: make(chan struct{}, inFlight), queue: int64(queue), wait: wait,
		bodyBudget: budget, heldBy: map[string]int64{}}
}

// saturated reports whether a request would find neither a slot nor a
// place in the queue.
func (a *Admission) saturated() bool {
	return len(a.slots) == cap(a.slots) && a.waiting.Load() >= a.queue
}

// A bodyHold is the room one body takes among the bodies read at once.
type bodyHold struct {
	a *Admission
	// holder names who holds the request's credential when its bodies
	// are bounded (bodyShare); "" for the operator's.
	holder string
	limit  int64 // the body limit of the request's server
	held   int64
}

// holdBody returns an empty hold for a body about to be read under a
// limit of limit bytes, for a request of holder ("" when unbounded).
func (a *Admission) holdBody(holder string, limit int64) *bodyHold {
	return &bodyHold{a: a, holder: holder, limit: limit}
}

// Bodies' shares of the budget (bodyBudget) held at once by the holders
// of bounded credentials: each of them at most 1/bodyShare (and always
// room for a body at its server's limit), all of them together at most
// boundedShare: one agent's key sending bodies slowly (each connection
// may take bodyReadTime) neither keeps out the others' writes nor, with
// every agent's, the operator's.
const (
	bodyShare    = 8
	boundedShare = 0.75
)

var (
	// errNoBodyRoom says that the bodies being read take all the room
	// there is for them.
	errNoBodyRoom = errors.New("no room among the bodies read at once")
	// errHolderBodies says that the bodies of the request's credential
	// being read take all of its share.
	errHolderBodies = errors.New("no room among this credential's bodies read at once")
)

// grow makes the hold room for n bytes in all, in steps of bodyStep; an
// error when there is none now. A body larger than the whole budget takes
// all of it.
func (h *bodyHold) grow(n int64) error {
	a := h.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if n <= h.held || h.held >= a.bodyBudget {
		return nil
	}
	step := min(max(n-h.held, bodyStep), a.bodyBudget-h.held)
	if a.held+step > a.bodyBudget {
		return errNoBodyRoom
	}
	if h.holder != "" {
		// Room for one whole body at least, its last step rounded up.
		whole := h.limit + bodyStep
		if a.heldBy[h.holder]+step > max(a.bodyBudget/bodyShare, whole) {
			return errHolderBodies
		}
		if a.bounded+step > max(int64(boundedShare*float64(a.bodyBudget)), whole) {
			return errNoBodyRoom
		}
		a.heldBy[h.holder] += step
		a.bounded += step
	}
	a.held += step
	h.held += step
	return nil
}

// release gives the hold's room back.
func (h *bodyHold) release() {
	a := h.a
	a.mu.Lock()
	defer a.mu.Unlock()
	a.held -= h.held
	if h.holder != "" {
		a.bounded -= h.held
		if a.heldBy[h.holder] -= h.held; a.heldBy[h.holder] == 0 {
			delete(a.heldBy, h.holder)
		}
	}
	h.held = 0
}

// bodiesHeld returns the bytes of the bodies of holder being read.
func (a *Admission) bodiesHeld(holder string) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.heldBy[holder]
}

// allowBodies makes room among the bodies read at once for twice what the
// requests in flight may send under a body limit of limit bytes (a server
// whose limit is raised above MaxBodyBytes).
func (a *Admission) allowBodies(limit int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.bodyBudget = max(a.bodyBudget, 2*int64(cap(a.slots))*limit)
}

// acquire takes a slot, waiting in the queue if there is room in it; it
// reports false when there is none, or the wait ran out.
func (a *Admission) acquire(ctx context.Context) (release func(), ok bool) {
	release = func() { <-a.slots }
	select {
	case a.slots <- struct{}{}:
		return release, true
	default:
	}
	if a.waiting.Add(1) > a.queue {
		a.waiting.Add(-1)
		return nil, false
	}
	defer a.waiting.Add(-1)
	t := time.NewTimer(a.wait)
	defer t.Stop()
	select {
	case a.slots <- struct{}{}:
		return release, true
	case <-t.C:
		return nil, false
	case <-ctx.Done():
		return nil, false
	}
}

func (a *Admission) retryAfter() time.Duration { return max(time.Second, a.wait/2) }

// mcpSessions counts the MCP sessions open over HTTP, to refuse new ones
// past a cap: max in all, max/16 (at least one) with one agent's key, and
// three quarters of max with agents' keys together, so that one agent,
// or all of them, cannot lock the operator out (254 sessions opened with
// one agent's key did). A credential at a cap that concerns it reclaims
// its own session that has been idle longest, if for at least reclaim:
// a client that went away without ending its sessions (no DELETE) would
// otherwise hold them until the idle timeout (30 minutes), and its next
// run be refused. The reclaimed session's client gets 404 at its next
// request, which the MCP specification says means: start a new one.
type mcpSessions struct {
	max     int
	reclaim time.Duration
	metrics *metrics.Metrics
	mu      sync.Mutex
	open    map[string]*mcpSession
	each    map[string]int // sessions open by credential (principal.id)
	agents  int            // sessions open with agents' keys
}

type mcpSession struct {
	ss   *mcp.ServerSession
	who  string
	busy int       // requests in flight (a GET's event stream among them)
	last time.Time // when the last request began or ended
}

// closeAll ends every session (the server is shutting down): their
// streams end with them.
func (m *mcpSessions) closeAll() {
	m.mu.Lock()
	var open []*mcp.ServerSession
	for _, s := range m.open {
		open = append(open, s.ss)
	}
	m.mu.Unlock()
	for _, ss := range open {
		_ = ss.Close()
	}
}

// track counts ss, opened by credential who, until it ends.
func (m *mcpSessions) track(ss *mcp.ServerSession, who string) {
	id := ss.ID()
	m.mu.Lock()
	if _, ok := m.open[id]; ok {
		m.mu.Unlock()
		return
	}
	m.open[id] = &mcpSession{ss: ss, who: who, last: time.Now()}
	m.each[who]++
	if strings.HasPrefix(who, "agent:") {
		m.agents++
	}
	n := len(m.open)
	m.mu.Unlock()
	m.metrics.MCPSessions(n)
	go func() {
		_ = ss.Wait()
		m.mu.Lock()
		m.forget(id)
		n := len(m.open)
		m.mu.Unlock()
		m.metrics.MCPSessions(n)
	}()
}

// forget stops counting session id, if it still is; m.mu is held.
func (m *mcpSessions) forget(id string) {
	s, ok := m.open[id]
	if !ok {
		return
	}
	delete(m.open, id)
	if m.each[s.who]--; m.each[s.who] <= 0 {
		delete(m.each, s.who)
	}
	if strings.HasPrefix(s.who, "agent:") {
		m.agents--
	}
}

// enter counts a request to session id in flight until the returned func
// is called; a session unknown here (ended, or not yet begun) is left to
// the SDK to answer.
func (m *mcpSessions) enter(id string) (leave func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.open[id]
	if !ok {
		return func() {}
	}
	s.busy++
	s.last = time.Now()
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		s.busy--
		s.last = time.Now()
	}
}

// admit says whether credential who may open a new session now, making
// room by reclaiming its own idlest session if it is at a cap; when it
// may not, why, and when to try again.
func (m *mcpSessions) admit(who string) (why string, retry time.Duration) {
	m.mu.Lock()
	why = m.full(who)
	if why == "" {
		m.mu.Unlock()
		return "", 0
	}
	var idlest *mcpSession
	var idlestID string
	for id, s := range m.open {
		if s.who == who && s.busy == 0 && (idlest == nil || s.last.Before(idlest.last)) {
			idlest, idlestID = s, id
		}
	}
	if idlest == nil {
		m.mu.Unlock()
		return why, time.Minute
	}
	if idle := time.Since(idlest.last); idle < m.reclaim {
		m.mu.Unlock()
		return why, m.reclaim - idle
	}
	// Counted out now, so that two new sessions at once do not both
	// take its place; its Wait finds it gone.
	m.forget(idlestID)
	n := len(m.open)
	m.mu.Unlock()
	m.metrics.MCPSessions(n)
	_ = idlest.ss.Close()
	return "", 0
}

// full says why credential who may open no new session now; "" when it
// may. m.mu is held.
func (m *mcpSessions) full(who string) string {
	if len(m.open) >= m.max {
		return fmt.Sprintf("%d MCP sessions are open, the most this server keeps", m.max)
	}
	if !strings.HasPrefix(who, "agent:") {
		return ""
	}
	if each := max(1, m.max/16); m.each[who] >= each {
		return fmt.Sprintf("%d MCP sessions are open with this agent's key and its sub-agents', the most one keeps", each)
	}
	if all := max(1, m.max*3/4); m.agents >= all {
		return fmt.Sprintf("%d MCP sessions are open with agents' keys, the most they keep together", all)
	}
	return ""
}

// mcp returns the MCP endpoint behind the checks particular to it: an
// agent's key speaks for its own session and agent only; a new session
// past the cap is refused; and each session answers only the credential
// that opened it (the SDK's check of the token's user, which this sets).
func (g *guard) mcp(next http.Handler, sessions *mcpSessions) http.Handler {
	hijack := auth.RequireBearerToken(func(ctx context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		p, _ := principalOf(r.Context())
		return &auth.TokenInfo{UserID: p.id()}, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := principalOf(r.Context())
		if p.reader {
			g.refuse(w, r, http.StatusForbidden, "reader", "read_only", "the dashboard's sign-in does not open MCP sessions: send the token or an agent's key")
			return
		}
		if p.agent != nil {
			session := firstOf(r.Header.Get("X-Engram-Session"), r.URL.Query().Get("session"))
			agent := firstOf(r.Header.Get("X-Engram-Agent"), r.URL.Query().Get("agent"))
			if session != "" && session != p.agent.Session() || agent != "" && agent != p.agent.Agent().ID {
				g.forbid(w, r, p, firstOf(session, p.agent.Session()), "to open an MCP session as "+firstOf(agent, p.agent.Agent().ID))
				return
			}
		}
		if r.Method == http.MethodPost && !g.checkRPC(w, r) {
			return
		}
		if id := r.Header.Get("Mcp-Session-Id"); id != "" {
			defer sessions.enter(id)()
		} else if r.Method == http.MethodPost {
			if why, retry := sessions.admit(p.holder()); why != "" {
				w.Header().Set("Retry-After", strconv.Itoa(int(max(time.Second, retry).Round(time.Second)/time.Second)))
				g.refuse(w, r, http.StatusServiceUnavailable, "mcp_sessions", "overloaded", why+": close one (DELETE) or retry later")
				return
			}
		}
		if r.Header.Get("Authorization") == "" {
			next.ServeHTTP(w, r) // a trusted loopback caller: no token to bind the session to
			return
		}
		hijack.ServeHTTP(w, r)
	})
}

// checkRPC refuses a JSON-RPC message whose id the SDK would answer as
// another (1.5 as 1) or not at all (mcpserver.CheckHTTPMessage), with the
// JSON-RPC error a client reads; the body, read whole by readBody, is
// put back for the SDK.
func (g *guard) checkRPC(w http.ResponseWriter, r *http.Request) bool {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return true // the SDK says what is wrong with it
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	answer := mcpserver.CheckHTTPMessage(body)
	if answer == nil {
		return true
	}
	g.metrics.Refused("rpc")
	g.log.Warn("request refused", "reason", "rpc", "status", http.StatusBadRequest, "remote", r.RemoteAddr, "method", r.Method,
		"path", r.URL.Path, "detail", "a JSON-RPC id the SDK cannot answer as sent")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(answer)
	return false
}

// forbid refuses an agent's request for another session's state or
// identity, auditing it in the archive's event log.
func (g *guard) forbid(w http.ResponseWriter, r *http.Request, p principal, session, what string) {
	msg := fmt.Sprintf("agent %s's key may act only as itself, in its session %s", p.agent.Agent().ID, p.agent.Session())
	if arc, err := g.eng.Archive(r.Context()); err == nil {
		if ierr := arc.Refuse(r.Context(), p.agent.Agent(), session, what); ierr != nil {
			msg = ierr.Error() + "; " + msg
		}
	}
	g.refuse(w, r, http.StatusForbidden, "forbidden", "other_session", msg)
}
