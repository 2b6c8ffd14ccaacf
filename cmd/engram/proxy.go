package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/httpapi"
	"github.com/engramhq/engram/internal/metrics"
	"github.com/engramhq/engram/internal/proxy"
	"github.com/engramhq/engram/internal/window"
)

func (a *app) proxyCmd() *cobra.Command {
	var (
		addr, printConfig string
		opts              proxy.Options
		timeout           time.Duration
	)
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Stand between an agent harness and its model: forward its requests, store what it saw",
		Long: `Serve the model APIs on --addr (loopback by default) and forward each request
to the vendor's (--anthropic, --openai), passing the answer back as it
arrives, streams included. The caller's vendor credentials go through as
given, never stored or logged; engram's own token (engram token) is required
in the X-Engram-Token header.

Anthropic Messages, OpenAI Chat Completions and OpenAI Responses requests
are stored and laid out: each conversation is a context window (the session
of X-Engram-Session, else the session the harness names, else a hash of the
conversation's start) that takes only the new messages of each resent
history, and the model's answers are stored as they arrived. A history the
harness edits in place (Claude Code clears old tool results) is followed:
the window keeps what it stored, and the edit goes upstream as sent. Other
paths go through untouched. What engram cannot store goes through as it
came.

Over the window's threshold (its model's context, or --window), older
runs reach the model as [CTX-REF] markers, which engram's MCP tool
retrieve_context expands; the rewritten part stays the same bytes until
the window evicts again, so the provider's prompt cache keeps hitting.
Windows take the tool_loop role's policy (--role): the newest step kept
whole, eviction down to 40 %, and a digest of the lines of evicted tool
output that name what the agent learned.

--print-config claude-code|codex prints, without starting the proxy, what
wires the harness to it (at --addr) and to engram's MCP server in one step,
with a reference to engram's token, never the token itself ($ENGRAM_TOKEN
when set, else the token file, read when used):

  claude-code  shell lines: the model API's URL and engram's header, and
               the MCP server as engram hooks install claude-code writes it
                 eval "$(engram proxy --print-config claude-code)"
                 claude --mcp-config "$ENGRAM_MCP_CONFIG"
  codex        a config.toml: a model provider "engram" (Responses API,
               the token from $ENGRAM_TOKEN) and the MCP server, as a profile
                 mkdir -p ~/.codex
                 engram proxy --print-config codex > ~/.codex/engram.config.toml
                 export ENGRAM_TOKEN="$(engram token)"; codex --profile engram

GET /metrics on the same address reports the proxy's counters (requests
by route, layouts, refusals, upstream answers, stored answers, edited
histories) and the store's figures to Prometheus: it needs engram's token,
in X-Engram-Token or Authorization: Bearer, and a loopback name or the
address bound. Every other path goes upstream.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if printConfig != "" {
				return a.printProxyConfig(printConfig, addr)
			}
			if err := checkAddr(addr, DefaultProxyAddr); err != nil {
				return err
			}
			if opts.MaxBody < 0 || opts.Limit < 0 {
				return usagef("--max-body and --window must not be negative")
			}
			ctx := cmd.Context()
			a.migrates = true // a server, as engram serve
			eng, err := a.engine(ctx, false)
			if err != nil {
				return err
			}
			m, err := a.windowManager(eng)
			if err != nil {
				return err
			}
			if opts.Catalog, err = a.cfg.Catalog(); err != nil {
				return err
			}
			if opts.Token = a.getenv("ENGRAM_TOKEN"); opts.Token == "" {
				if opts.Token, err = httpapi.LoadToken(a.tokenFile()); err != nil {
					return err
				}
			}
			opts.Timeout, opts.Logger = timeout, a.log
			p, err := proxy.New(eng, m, opts)
			if err != nil {
				return usagef("%v", err)
			}
			ln, err := listen(addr)
			if err != nil {
				return fmt.Errorf("proxy: %w", err)
			}
			met := metrics.New(eng)
			met.Proxy(p.Stats)
			// The proxy passes every path it does not serve upstream:
			// /metrics goes in front of it. Not a ServeMux, which would
			// clean and redirect the paths the proxy passes on as they are.
			scrape := metricsGuard(met.Handler(), opts.Token, servedHosts(ln.Addr().String()), a.log)
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/metrics" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
					scrape.ServeHTTP(w, r)
					return
				}
				p.ServeHTTP(w, r)
			})
			// A request's body has two minutes to arrive (a connection
			// that sends it slowly, or never, is closed), an idle
			// connection as long; answers, streamed for as long as the
			// model takes, have no bound.
			srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute}
			fmt.Fprintf(a.stderr, "engram proxy on http://%s: Anthropic to %s, OpenAI to %s; requests need X-Engram-Token (engram token prints it)\n",
				ln.Addr(), p.Upstream("anthropic"), p.Upstream("openai"))
			var shutdown sync.WaitGroup
			shutdown.Add(1)
			go func() {
				defer shutdown.Done()
				<-ctx.Done()
				sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = srv.Shutdown(sctx)
			}()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			// Serve returns when Shutdown begins: wait for the requests in
			// flight, then for what the proxy stores after answering.
			<-ctx.Done()
			shutdown.Wait()
			p.Wait()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", DefaultProxyAddr, "address to listen on")
	f.StringVar(&printConfig, "print-config", "", "print what wires claude-code or codex to the proxy at --addr and to engram's MCP server, and exit")
	f.StringVar(&opts.Anthropic, "anthropic", proxy.DefaultAnthropic, "the Anthropic API's base URL")
	f.StringVar(&opts.OpenAI, "openai", proxy.DefaultOpenAI, "the OpenAI API's base URL")
	f.Int64Var(&opts.MaxBody, "max-body", proxy.DefaultMaxBody, "the largest request body, in bytes (above the vendors' own)")
	f.DurationVar(&timeout, "timeout", proxy.DefaultTimeout, "how long to wait for an upstream's answer to begin")
	f.DurationVar(&opts.ReleaseIdle, "release-idle", proxy.DefaultReleaseIdle, "return the memory requests used to the system after this long without one (-1s: never)")
	f.IntVar(&opts.Limit, "window", 0, "every window's context in tokens (default: its model's)")
	f.StringVar(&opts.Role, "role", window.ToolLoopRole, "the windows' role, which picks their eviction policy (a built-in role or one of [window.roles])")
	return cmd
}

// metricsGuard serves the proxy's /metrics behind the proxy's own checks,
// and the Host check of engram serve: no request a browser marks as a web
// page's (Origin, Sec-Fetch-Site: cross-site), a Host of loopback's or the
// address served (hosts), and engram's token, in X-Engram-Token as the
// proxy takes it or in Authorization: Bearer as Prometheus sends it.
func metricsGuard(next http.Handler, token string, hosts []string, log *slog.Logger) http.Handler {
	served := map[string]bool{}
	for _, h := range hosts {
		served[hostName(h)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refuse := func(status int, reason, msg string) {
			log.Warn("request refused", "reason", reason, "status", status, "remote", r.RemoteAddr, "path", r.URL.Path, "host", r.Host)
			http.Error(w, "engram proxy: "+msg, status)
		}
		if r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") == "cross-site" {
			refuse(http.StatusForbidden, "origin", "engram's proxy takes no requests from web pages")
			return
		}
		host := hostName(r.Host)
		if host == "" || !loopbackHost(host) && !served[host] {
			refuse(http.StatusForbidden, "host", fmt.Sprintf("this proxy does not answer to the host %q", r.Host))
			return
		}
		cred := r.Header.Get("X-Engram-Token")
		if scheme, bearer, ok := strings.Cut(r.Header.Get("Authorization"), " "); cred == "" && ok && strings.EqualFold(scheme, "bearer") {
			cred = strings.TrimSpace(bearer)
		}
		if token == "" || subtle.ConstantTimeCompare([]byte(cred), []byte(token)) != 1 {
			refuse(http.StatusUnauthorized, "token", "/metrics needs engram's token in X-Engram-Token or Authorization: Bearer (engram token prints it)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostName is the name of a Host value: lower case, without its port,
// brackets or trailing dot.
func hostName(host string) string {
	h := strings.ToLower(strings.TrimSpace(host))
	if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	}
	return strings.TrimSuffix(strings.Trim(h, "[]"), ".")
}

// loopbackHost reports whether a host name can only mean this machine.
func loopbackHost(h string) bool {
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
