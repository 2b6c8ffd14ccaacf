// Package httpapi is engram's HTTP front end, what `engram serve` serves:
// the MCP endpoint over streamable HTTP (/mcp), the JSON API (/v1/...,
// its event stream in events.go), the dashboard's page (dashboard.go,
// login.go), /metrics, health (/healthz), and, for a server of several
// projects, each project's handler under /p/NAME/ (Projects). Every
// request passes the site's checks (guard.go: Host, Origin); a credential
// (the bearer token, an agent's key, or the dashboard's sign-in cookie as
// a reader) is asked of everything but what holds no data (health, the
// page and its assets, the login link, sign-out, and the refusal of an
// OAuth client's registration, oauth.go) and the model APIs a proxy serves
// (Options.Proxy), which check their own.
//
// Each MCP session gets its own mcpserver.Server, identified by the
// X-Engram-Session and X-Engram-Agent headers (or the session and agent
// query parameters) of the request that opens it; one that names no
// session gets an engram session of its own.
package httpapi

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/engramhq/engram/internal/assemble"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/index"
	"github.com/engramhq/engram/internal/mcpserver"
	"github.com/engramhq/engram/internal/metrics"
	"github.com/engramhq/engram/internal/window"
)

// Options configure the handler.
type Options struct {
	// Token is the operator's bearer token: it may do anything. Requests
	// carry it, or an agent's key (which may write only its own session's
	// state), or are refused.
	Token string
	// TrustLoopback lets a request that carries no credential in as the
	// operator when it comes from a loopback address. Off by default: any
	// web page the user opens can send requests to loopback.
	TrustLoopback bool
	// AllowedHosts are the host names (or addresses) requests may name in
	// their Host header besides localhost, 127.0.0.1 and ::1; "*" allows
	// any. engram serve adds the address it binds.
	AllowedHosts []string
	// AllowedOrigins are the browser origins (scheme://host[:port]) let in
	// besides the server's own; "*" allows any.
	AllowedOrigins []string
	// MaxBodyBytes bounds a request body (JSON API and MCP); zero means
	// MaxBodyBytes.
	MaxBodyBytes int64
	// Admission bounds the requests served at once; nil means a new one
	// with the defaults. Share one between the projects of a server.
	Admission *Admission
	// MCPSessionIdle closes an MCP session that has had no request for
	// this long; zero means DefaultMCPSessionIdle.
	MCPSessionIdle time.Duration
	// RequestTimeout bounds an admitted request's work (not an event
	// stream's): past it, 503 with Retry-After. Zero means
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// MaxMCPSessions bounds the MCP sessions open at once (503 for an
	// initialize past it); zero means DefaultMaxMCPSessions.
	MaxMCPSessions int
	// MCPStructured sends MCP tool results' structured content beside
	// their text (mcpserver.Options.Structured).
	MCPStructured bool
	// mcpReclaim is how long a session must have been idle for its
	// credential, at a cap, to reclaim it; zero means mcpReclaim (tests
	// shorten it).
	mcpReclaim time.Duration
	// Metrics, if set, records requests and tool calls and is served at
	// /metrics.
	Metrics *metrics.Metrics
	// Windows keeps the context windows of the engine's store, configured
	// (its models and policies); nil means the built-in models and
	// defaults.
	Windows *window.Manager
	// Assembler assembles turns' contexts over Windows, keeping its
	// summarizer's work between requests; nil makes one per request.
	Assembler *assemble.Assembler
	// Proxy, if set, serves the model APIs (POST /v1/messages,
	// /v1/messages/count_tokens, /v1/chat/completions, /v1/responses), so
	// that a harness can point its base URL at the server (engram proxy's
	// handler). Those requests carry the vendor's credential in
	// Authorization, which is not engram's and must go upstream untouched,
	// and engram's token in X-Engram-Token, which Proxy must check
	// itself: the guard checks their Host and Origin as every route's,
	// but neither their credential, nor their body (Proxy bounds it,
	// above the vendors' limits), nor admission (an answer streams for
	// minutes, and would hold the slots of engram's own requests).
	Proxy http.Handler
	// Index, if set, is the live state of this server's watcher, which
	// GET /v1/index reports; nil when the server does not index.
	Index *index.Activity
	// Logins spends the dashboard's login links and keeps its signed-out
	// sessions; share one between the projects of a server (nil: one of
	// its own).
	Logins *Logins
	// EventPoll is how often the event stream reads the store while a
	// stream is open; zero means DefaultEventPoll.
	EventPoll time.Duration
	// Done, closed when the server shuts down, ends the requests that
	// would otherwise stay open for good (event streams, MCP sessions'
	// streams), so that http.Server.Shutdown need not wait them out.
	Done    <-chan struct{}
	Version string
	Logger  *slog.Logger
}

// mcpReclaim: a credential at its bound of MCP sessions closes its own
// idlest one if it has had no request for this long.
const mcpReclaim = time.Minute

// Defaults of Options.
const (
	DefaultMCPSessionIdle = 30 * time.Minute
	DefaultMaxMCPSessions = 256
)

// proxyRoutes are the model API routes Options.Proxy serves: Anthropic's
// Messages and its token count, OpenAI's Chat Completions and Responses.
// None is a route of engram's own API.
var proxyRoutes = []string{"POST /v1/messages", "POST /v1/messages/count_tokens", "POST /v1/chat/completions", "POST /v1/responses"}

// Handler returns engram's HTTP handler over eng.
func Handler(eng *engine.Engine, opts Options) http.Handler {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = MaxBodyBytes
	}
	if opts.MCPSessionIdle <= 0 {
		opts.MCPSessionIdle = DefaultMCPSessionIdle
	}
	if opts.MaxMCPSessions <= 0 {
		opts.MaxMCPSessions = DefaultMaxMCPSessions
	}
	g := newGuard(eng, opts, log)
	g.adm.allowBodies(opts.MaxBodyBytes)
	mux := http.NewServeMux()
	hc := &health{ping: eng.Ping, log: log}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if hc.check() != nil {
			w.Header().Set("Retry-After", "5")
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "version": opts.Version, "store": "unavailable"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "version": opts.Version, "store": "ok"})
	})
	sessions := &mcpSessions{max: opts.MaxMCPSessions, reclaim: cmp.Or(opts.mcpReclaim, mcpReclaim), metrics: opts.Metrics,
		open: map[string]*mcpSession{}, each: map[string]int{}}
	mcpHandler := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		session := firstOf(r.Header.Get("X-Engram-Session"), r.URL.Query().Get("session"))
		agent := firstOf(r.Header.Get("X-Engram-Agent"), r.URL.Query().Get("agent"))
		p, _ := principalOf(r.Context())
		if p.agent != nil {
			session, agent = p.agent.Session(), p.agent.Agent().ID
		}
		return mcpserver.New(eng, mcpserver.Options{Session: session, Agent: agent, Distinct: true,
			Model: r.Header.Get("X-Engram-Model"), Version: opts.Version, Metrics: opts.Metrics, Logger: log, Windows: opts.Windows,
			Structured:   opts.MCPStructured,
			OnInitialize: func(ss *mcp.ServerSession) { sessions.track(ss, p.holder()) }}).MCP()
	}, &mcp.StreamableHTTPOptions{Logger: log, SessionTimeout: opts.MCPSessionIdle, MaxRequestBodyBytes: opts.MaxBodyBytes})
	mux.Handle("/mcp", g.wrap(limitBody(g.mcp(mcpHandler, sessions), opts.MaxBodyBytes), func(r *http.Request) bool {
		return r.Method == http.MethodPost // GET holds an event stream open; DELETE ends a session
	}))
	v := &v1{eng: eng, log: log, maxBody: opts.MaxBodyBytes, metrics: opts.Metrics, windows: opts.Windows, assembler: opts.Assembler,
		activity: opts.Index, version: opts.Version, hub: newHub(eng, opts.EventPoll, opts.Version, log, g.stillValid, opts.Done)}
	if opts.Done != nil {
		go func() {
			<-opts.Done
			sessions.closeAll()
		}()
	}
	always := func(*http.Request) bool { return true }
	// An event stream stays open for as long as the page: it would hold an
	// admission slot for good (the hub bounds streams instead).
	notStreams := func(r *http.Request) bool { return r.Pattern != streamRoute }
	v.routes(mux, func(h http.Handler) http.Handler { return g.wrap(h, notStreams) })
	// A path that a route serves with other methods is 405, with Allow,
	// before the credential and content-type checks (which would answer a
	// route that does not exist).
	probe := &routeProbe{}
	routesOnly := http.NewServeMux()
	for _, rt := range v.table() {
		routesOnly.Handle(rt.pattern, probe)
	}
	routesOnly.Handle("GET /v1/openapi.json", probe)
	if opts.Proxy != nil {
		for _, route := range proxyRoutes {
			routesOnly.Handle(route, probe)
		}
	}
	notFound := g.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such route: "+r.Method+" "+r.URL.Path)
	}), always)
	mux.Handle("/v1/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if allow := probe.allowed(routesOnly, r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", fmt.Sprintf("%s %s: this route takes %s", r.Method, r.URL.Path, strings.Join(allow, ", ")))
			return
		}
		notFound.ServeHTTP(w, r)
	}))
	if opts.Metrics != nil {
		mux.Handle("GET /metrics", g.wrap(opts.Metrics.Handler(), func(*http.Request) bool { return false }))
	}
	g.dashboardRoutes(mux)
	mux.HandleFunc(registerRoute, g.noOAuth)
	if opts.Proxy != nil {
		for _, route := range proxyRoutes {
			mux.Handle(route, opts.Proxy)
		}
	}
	// Any other path, or another method on the routes outside /v1: the
	// API's JSON error, where the mux answered plain text. Nothing here
	// holds data, so no credential is asked for.
	others := http.NewServeMux()
	for _, pattern := range []string{"GET /healthz", "GET /{$}", "GET /assets/{file...}", "GET /login", "POST /logout", registerRoute} {
		others.Handle(pattern, probe)
	}
	if opts.Metrics != nil {
		others.Handle("GET /metrics", probe)
	}
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if allow := probe.allowed(others, r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", fmt.Sprintf("%s %s: this route takes %s", r.Method, r.URL.Path, strings.Join(allow, ", ")))
			return
		}
		writeError(w, http.StatusNotFound, "not_found", "no such route: "+r.Method+" "+r.URL.Path)
	}))
	h := g.site(mux)
	if opts.Metrics != nil {
		h = observe(h, opts.Metrics)
	}
	return &project{Handler: h, health: hc}
}

// project is a project's handler, with its health for Projects.
type project struct {
	http.Handler
	health *health
}

// health answers /healthz: whether the store answers a read. The route
// needs no credential, so the store is asked at most once a second
// whatever the rate of requests, and for at most 2 s.
type health struct {
	ping func(ctx context.Context) error
	log  *slog.Logger

	mu  sync.Mutex
	at  time.Time // of the last answer
	err error
}

// healthTTL is how long an answer of the store stands.
const healthTTL = time.Second

func (h *health) check() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.at.IsZero() && time.Since(h.at) < healthTTL {
		return h.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := h.ping(ctx)
	if err != nil && h.err == nil {
		h.log.Error("health: the store does not answer", "err", err)
	} else if err == nil && h.err != nil {
		h.log.Info("health: the store answers again")
	}
	h.at, h.err = time.Now(), err
	return err
}

// routeProbe stands for every route in a mux that only says which
// methods a path takes.
type routeProbe struct{}

func (*routeProbe) ServeHTTP(http.ResponseWriter, *http.Request) {}

// allowed returns the methods routes serve r's path with (HEAD beside
// GET), none when r's own method is one; a redirect to another path is
// not a route.
func (p *routeProbe) allowed(routes *http.ServeMux, r *http.Request) []string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if h, _ := routes.Handler(probe); h == http.Handler(p) {
			if m == r.Method || m == http.MethodGet && r.Method == http.MethodHead {
				return nil
			}
			allow = append(allow, m)
			if m == http.MethodGet {
				allow = append(allow, http.MethodHead)
			}
		}
	}
	return allow
}

// Projects serves several projects from one server: each project's
// handler (Handler) under /p/NAME/, and, without a token, /healthz and a
// page at / (for a person at a browser) listing them, the page with a
// link to each one's dashboard, and the refusal of an OAuth client's
// registration (oauth.go). Anything else gets a 404 that names the
// projects.
func Projects(handlers map[string]http.Handler, opts Options) http.Handler {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := newGuard(nil, opts, log)
	names := make([]string, 0, len(handlers))
	mux := http.NewServeMux()
	for name, h := range handlers {
		names = append(names, name)
		mux.Handle("/p/"+name+"/", http.StripPrefix("/p/"+name, h))
	}
	slices.Sort(names)
	projectsRoutes(mux, names)
	mux.HandleFunc(registerRoute, g.noOAuth) // an MCP client's, after a 401 from /p/NAME/mcp
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		// Each project's store is asked, all at once (2 s at most). A
		// server some of whose stores do not answer still serves the
		// others: it is degraded, and names them (/p/NAME/healthz is
		// each one's 503); with none answering it is unavailable.
		failed := make([]bool, len(names))
		var wg sync.WaitGroup
		for i, name := range names {
			if p, ok := handlers[name].(*project); ok {
				wg.Go(func() { failed[i] = p.health.check() != nil })
			}
		}
		wg.Wait()
		down := []string{}
		for i, name := range names {
			if failed[i] {
				down = append(down, name)
			}
		}
		switch {
		case len(down) == len(names):
			w.Header().Set("Retry-After", "5")
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "version": opts.Version, "projects": names, "unavailable": down})
			return
		case len(down) > 0:
			writeJSON(w, http.StatusOK, map[string]any{"status": "degraded", "version": opts.Version, "projects": names, "unavailable": down})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "version": opts.Version, "projects": names})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no such route: %s %s; projects are served under /p/NAME/, NAME one of %s",
			r.Method, r.URL.Path, strings.Join(names, ", ")))
	})
	return g.site(mux)
}

// observe records every request: its route (the pattern it matched), method,
// status and latency.
func observe(next http.Handler, m *metrics.Metrics) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		// Deferred: a handler that breaks its connection off (the proxy,
		// when the model's stream was cut) panics with ErrAbortHandler,
		// and is still counted.
		defer func() {
			route := r.Pattern
			if route == "" {
				route = "other"
			}
			m.Request(route, r.Method, sw.code, time.Since(start))
		}()
		next.ServeHTTP(sw, r)
	})
}

// statusWriter remembers the status a handler wrote. It passes Flush on,
// which the MCP endpoint's event streams need.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func firstOf(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// limitBody refuses bodies over max with 413 before the handler reads them
// when the length is declared, and cuts them off at max otherwise.
func limitBody(next http.Handler, max int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > max {
			writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the body is over %d bytes", max))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, max)
		next.ServeHTTP(w, r)
	})
}

// writeError writes the API's error shape.
// writeUnavailable answers a request the store could not serve for now
// (store.ErrUnavailable): 503, to be tried again in a few seconds. What
// failed is in the server's log, not in the answer.
func writeUnavailable(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "5")
	writeError(w, http.StatusServiceUnavailable, "store_unavailable",
		"the store is unavailable (its database does not answer, or it is locked); retry later; the server's log has the details")
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

// IsLoopback reports whether addr (host:port) binds only loopback
// interfaces.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// LoadToken returns the token in file, creating the file with a new
// random token (mode 0600) if there is none.
func LoadToken(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err == nil {
		fi, err := os.Stat(file)
		if err != nil {
			return "", err
		}
		if fi.Mode().Perm()&0o077 != 0 {
			return "", fmt.Errorf("token file %s is readable by others (mode %v): chmod 600 it", file, fi.Mode().Perm())
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", fmt.Errorf("token file %s is empty", file)
		}
		return tok, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(raw)
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return "", err
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) { // another process made it first
			return LoadToken(file)
		}
		return "", err
	}
	if _, err := f.WriteString(tok + "\n"); err != nil {
		return "", errors.Join(err, f.Close())
	}
	return tok, f.Close()
}
