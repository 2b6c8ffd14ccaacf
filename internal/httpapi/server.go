// Package httpapi is engram's HTTP front end, what `engram serve` serves:
// the MCP endpoint over streamable HTTP (/mcp), the JSON API (/v1/...),
// health (/healthz), and a bearer-token check in front of everything but
// health.
//
// Each MCP session gets its own mcpserver.Server, identified by the
// X-Engram-Session and X-Engram-Agent headers (or the session and agent
// query parameters) of the request that opens it.
package httpapi

import (
	"crypto/rand"
	"crypto/subtle"
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
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/mcpserver"
	"github.com/engramhq/engram/internal/metrics"
)

// Options configure the handler.
type Options struct {
	// Token, if set, is the bearer token requests must carry.
	Token string
	// RequireToken refuses requests without the token; when false (a
	// loopback bind), a request without one is let in, but a wrong one
	// is still refused.
	RequireToken bool
	// MaxBodyBytes bounds a request body (JSON API and MCP); zero means
	// MaxBodyBytes.
	MaxBodyBytes int64
	// Metrics, if set, records requests and tool calls and is served at
	// /metrics.
	Metrics *metrics.Metrics
	Version string
	Logger  *slog.Logger
}

// Handler returns engram's HTTP handler over eng.
func Handler(eng *engine.Engine, opts Options) http.Handler {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "version": opts.Version})
	})
	mcpHandler := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		session := firstOf(r.Header.Get("X-Engram-Session"), r.URL.Query().Get("session"))
		agent := firstOf(r.Header.Get("X-Engram-Agent"), r.URL.Query().Get("agent"))
		return mcpserver.New(eng, mcpserver.Options{Session: session, Agent: agent,
			Model: r.Header.Get("X-Engram-Model"), Version: opts.Version, Metrics: opts.Metrics, Logger: log}).MCP()
	}, &mcp.StreamableHTTPOptions{Logger: log})
	maxBody := opts.MaxBodyBytes
	if maxBody <= 0 {
		maxBody = MaxBodyBytes
	}
	mux.Handle("/mcp", auth(limitBody(mcpHandler, maxBody), opts, log))
	v := &v1{eng: eng, log: log, maxBody: maxBody, metrics: opts.Metrics}
	v.routes(mux, func(h http.Handler) http.Handler { return auth(h, opts, log) })
	mux.Handle("/v1/", auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such route: "+r.Method+" "+r.URL.Path)
	}), opts, log))
	if opts.Metrics == nil {
		return mux
	}
	mux.Handle("GET /metrics", auth(opts.Metrics.Handler(), opts, log))
	return observe(mux, opts.Metrics)
}

// Projects serves several projects from one server: each project's
// handler (Handler) under /p/NAME/, and /healthz, without a token, listing
// them. Anything else gets a 404 that names the projects.
func Projects(handlers map[string]http.Handler, opts Options) http.Handler {
	names := make([]string, 0, len(handlers))
	mux := http.NewServeMux()
	for name, h := range handlers {
		names = append(names, name)
		mux.Handle("/p/"+name+"/", http.StripPrefix("/p/"+name, h))
	}
	slices.Sort(names)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "version": opts.Version, "projects": names})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no such route: %s %s; projects are served under /p/NAME/, NAME one of %s",
			r.Method, r.URL.Path, strings.Join(names, ", ")))
	})
	return mux
}

// observe records every request: its route (the pattern it matched), method,
// status and latency.
func observe(next http.Handler, m *metrics.Metrics) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(sw, r)
		route := r.Pattern
		if route == "" {
			route = "other"
		}
		m.Request(route, r.Method, sw.code, time.Since(start))
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

// auth checks the bearer token: missing is refused when required, wrong
// is always refused. The token itself is never logged.
func auth(next http.Handler, opts Options, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, has := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		switch {
		case opts.Token == "":
		case has && subtle.ConstantTimeCompare([]byte(got), []byte(opts.Token)) == 1:
		case !has && !opts.RequireToken && r.Header.Get("Authorization") == "":
		default:
			reason := "missing token"
			if r.Header.Get("Authorization") != "" {
				reason = "wrong token"
			}
			log.Warn("unauthorized request", "reason", reason, "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path)
			w.Header().Set("WWW-Authenticate", `Bearer realm="engram"`)
			writeError(w, http.StatusUnauthorized, "unauthorized", reason+": send Authorization: Bearer <token> (engram serve prints where the token is)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// writeError writes the API's error shape.
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
