// Package mcpserver is engram's MCP front end: tools, resources and a
// prompt over the engine, for agents that speak the Model Context Protocol
// (Claude Code, Codex, Cursor and others), over stdio or streamable HTTP.
//
// It is thin: decode the arguments, call the engine or the archivalist,
// answer with compact text for the model and the same data as structured
// content; retrieve_context sends the pictures its text shows beside it,
// as image contents (retrieveContext). Errors are tool errors with short messages, never protocol
// failures; a call whose arguments give a member twice in one object is
// one (guard), as the SDK's decoding would keep only the last value. A result over MaxResultBytes is replaced by a tool error that
// says how to narrow the call. A server serves one identity, a session and
// an agent: the agent's writes go to its session only.
package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/engramhq/engram/internal/api"
	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/metrics"
	"github.com/engramhq/engram/internal/window"
)

// Options say who the server's client is.
type Options struct {
	// Session is the session the client's writes go to; empty means the
	// client's name and the time the process began (see Distinct).
	Session string
	// Distinct, when Session is empty, gives the connection a session of
	// its own: the client's name, the time the connection began and a
	// random suffix. A server of many connections (engram serve) sets it,
	// or every client of one name would write to one session.
	Distinct bool
	// Agent is the archivalist agent writing; empty means the session's
	// agent mcp@SESSION. An unknown agent is registered in Session.
	Agent string
	// Follow, if set, names the session and agent of each call: those of
	// the harness's hooks, whose session changes under a running server
	// (a resume, a /clear). false falls back to Session and Agent.
	Follow func(ctx context.Context) (session, agent string, ok bool)
	// Model is the model the agent runs on, if known.
	Model string
	// Version is engram's version, reported to clients.
	Version string
	// Metrics, if set, records tool calls, searches, briefings and tokens.
	Metrics *metrics.Metrics
	// Windows keeps the context windows of the engine's store; nil means
	// the built-in models and defaults.
	Windows *window.Manager
	Logger  *slog.Logger
	// OnInitialize, if set, is called with the session of each initialize
	// request the server answers: a front end that caps open sessions
	// counts them from it (ServerSession.Wait says when one ends).
	OnInitialize func(*mcp.ServerSession)
	// Structured sends each tool result's data as structured content
	// beside its text, under an output schema. Off, results are text
	// alone: Claude Code and Codex show the model the structured content
	// when there is any, at about twice the text's tokens.
	Structured bool
	// MaxPictureBytes bounds the pictures of a tool result together, as
	// base64; 0 means DefaultMaxPictureBytes.
	MaxPictureBytes int
}

// Server is engram's MCP server for one client.
type Server struct {
	eng  *engine.Engine
	opts Options
	log  *slog.Logger
	mcp  *mcp.Server
	// began is the time the session's name gives when the client names
	// none: the process's start, or the connection's with Distinct.
	began time.Time

	mu     sync.Mutex // guards handle
	handle *archive.Handle
}

var startTime = time.Now()

// schemas caches the tools' schemas, inferred from their Go types and
// resolved once for every server: engram serve makes a server per MCP
// session, and inferring them each time cost 21 ms and 270 KB a session.
var schemas = mcp.NewSchemaCache()

// New returns the server; serve it with Run or through MCP().
func New(eng *engine.Engine, opts Options) *Server {
	s := &Server{eng: eng, opts: opts, log: opts.Logger, began: startTime}
	if opts.Distinct {
		s.began = time.Now()
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "engram", Title: "engram: context engine and shared memory",
		Version: opts.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       s.log,
		SchemaCache:  schemas,
	})
	s.addTools()
	s.addResources()
	s.mcp.AddReceivingMiddleware(s.guard) // inside observe, which sees what the guard answers
	if opts.Metrics != nil {
		s.mcp.AddReceivingMiddleware(s.observe)
	}
	if opts.OnInitialize != nil {
		s.mcp.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
			return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
				res, err := next(ctx, method, req)
				if ss, ok := req.GetSession().(*mcp.ServerSession); ok && method == "initialize" && err == nil {
					opts.OnInitialize(ss)
				}
				return res, err
			}
		})
	}
	return s
}

// observe records tool calls in the metrics.
func (s *Server) observe(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" {
			return next(ctx, method, req)
		}
		start := time.Now()
		res, err := next(ctx, method, req)
		name := ""
		if ctr, ok := req.(*mcp.CallToolRequest); ok && ctr.Params != nil {
			name = ctr.Params.Name
		}
		failed := err != nil
		if r, ok := res.(*mcp.CallToolResult); ok && r != nil {
			failed = failed || r.IsError
			for _, c := range r.Content {
				if tc, ok := c.(*mcp.TextContent); ok {
					s.opts.Metrics.Served(name, s.eng.Encoding().Count(tc.Text))
				}
			}
		}
		s.opts.Metrics.ToolCall(name, failed, time.Since(start))
		return res, err
	}
}

// instructions tell the model what the server is for, in a few lines.
const instructions = `engram keeps everything this project's agents saw (code, messages, tool results) and a shared memory of patterns, failures, decisions and session state.
Start with briefing. Before trying an approach, recall failures; after learning something, record it. search finds code and past conversation; get_file reads indexed files; retrieve_context expands [CTX-REF:...] markers.`

// MCP returns the underlying MCP server.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Run serves the client over t until it disconnects or ctx ends.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error { return s.mcp.Run(ctx, t) }

// session returns the session the client writes to.
func (s *Server) session(req *mcp.CallToolRequest) string {
	if session, _, ok := s.follow(); ok {
		return session
	}
	if s.opts.Session != "" {
		return s.opts.Session
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.handle != nil {
		return s.handle.Session()
	}
	name := "mcp"
	if req != nil && req.Session != nil {
		if p := req.Session.InitializeParams(); p != nil && p.ClientInfo != nil && p.ClientInfo.Name != "" {
			name = sanitize(p.ClientInfo.Name)
		}
	}
	s.opts.Session = name + "-" + s.began.Format("20060102-150405")
	if s.opts.Distinct {
		var b [4]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand)
		s.opts.Session += "-" + hex.EncodeToString(b[:])
	}
	return s.opts.Session
}

// follow asks Options.Follow for the hooks' session and agent.
func (s *Server) follow() (session, agent string, ok bool) {
	if s.opts.Follow == nil {
		return "", "", false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.opts.Follow(ctx)
}

// agent returns the agent the client writes as in session.
func (s *Server) agent(req *mcp.CallToolRequest) string {
	if _, agent, ok := s.follow(); ok {
		return agent
	}
	if s.opts.Agent != "" {
		return s.opts.Agent
	}
	return archive.AgentIDFor("mcp", s.session(req))
}

// archiveHandle returns the client's agent handle, registering the agent
// in its session on first use (and again when the session it follows
// changes).
func (s *Server) archiveHandle(ctx context.Context, req *mcp.CallToolRequest) (*archive.Handle, error) {
	session, agent := s.session(req), s.agent(req)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.handle != nil && s.handle.Session() == session && s.handle.Agent().ID == agent {
		return s.handle, nil
	}
	arc, err := s.eng.Archive(ctx)
	if err != nil {
		return nil, err
	}
	role := "mcp"
	if s.opts.Follow != nil {
		role = ""
	}
	h, err := arc.Connect(ctx, archive.AgentSpec{ID: agent, SessionID: session, Model: s.opts.Model, Role: role})
	if err != nil {
		return nil, err
	}
	s.handle = h
	return h, nil
}

// ops returns the operations for the client of req.
func (s *Server) ops(req *mcp.CallToolRequest) *api.Ops {
	return &api.Ops{Eng: s.eng, Agent: s.agent(req), Metrics: s.opts.Metrics, Windows: s.opts.Windows, Session: func() string { return s.session(req) },
		Handle: func(ctx context.Context) (*archive.Handle, error) { return s.archiveHandle(ctx, req) }}
}

func sanitize(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	if b.Len() == 0 || b.Len() > 40 {
		return "mcp"
	}
	return b.String()
}
