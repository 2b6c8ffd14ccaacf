package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/httpapi"
	"github.com/engramhq/engram/internal/index"
	"github.com/engramhq/engram/internal/metrics"
	"github.com/engramhq/engram/internal/proxy"
	"github.com/engramhq/engram/internal/window"
)

// checkAddr refuses an --addr that is not host:port, before anything is
// opened: net.Listen's own error names neither the flag nor the form.
func checkAddr(addr, example string) error {
	_, port, err := net.SplitHostPort(addr)
	if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
		return usagef("--addr: %q is not host:port, such as %s", addr, example)
	}
	return nil
}

// listen listens on addr; an address in use says so and names --addr.
func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("%s is in use, by another engram or another program: stop it, or listen elsewhere with --addr (such as --addr 127.0.0.1:0 for any free port)", addr)
	}
	return ln, err
}

// DefaultAddr is where engram serve listens by default.
const DefaultAddr = "127.0.0.1:7411"

func (a *app) serveCmd() *cobra.Command {
	var (
		addr, token, tokenFile string
		noIndex, yes, noEmbed  bool
		maxBody                int64
		noProxy                bool
		upstreams              proxy.Options
	)
	cmd := &cobra.Command{
		Use:   "serve [DIR...]",
		Short: "Index the project, keep the index current, and serve it over HTTP (MCP at /mcp, JSON at /v1)",
		Long: `Run engram for a project as one long-lived process: index the repository if
it has no index yet (the first time it needs your permission: --yes, or run
engram index on a terminal), keep the index current as files change, and
serve over HTTP:

  /         the dashboard, for a browser: windows, savings, memory, search,
            the index, live (sign in with the login link it prints at start,
            or one engram token login prints)
  /mcp      the MCP endpoint, streamable HTTP: the tools of engram mcp
  /v1/...   the JSON API over the same operations (see the README)
  /metrics  Prometheus metrics
  /healthz  health, without a token
  /v1/messages, /v1/messages/count_tokens, /v1/chat/completions, /v1/responses
            the model APIs, as engram proxy serves them (--no-proxy: not)

It binds to loopback (127.0.0.1:7411) by default. Every request but
/healthz, the dashboard's page, assets and login link (which hold no data;
what the page asks for needs one) and POST /register (an OAuth client's
registration, refused: engram takes a token) needs a credential
(Authorization: Bearer ...): the operator's token, made on the first run
and kept with mode 0600 in the data directory (engram token prints it;
--token or ENGRAM_TOKEN give another), or the key
of an agent registered through POST /v1/agents, which may write its own
session only. Requests naming a host other than loopback's or the address
served, or sent by a web page of another origin, are refused
(serve.allowed_hosts, serve.allowed_origins). MCP clients holding the token
name their session and agent with the X-Engram-Session and X-Engram-Agent
headers; a connection that names none gets a session of its own. Ctrl-C or SIGTERM stops it gracefully.

The model APIs are engram proxy's, so that a harness can point its base URL
here (engram proxy --print-config claude-code --addr 127.0.0.1:7411 prints
the configuration): each request goes to the vendor (--anthropic, --openai)
with the vendor's credential (Authorization, x-api-key) untouched, and is
stored and laid out in the project's windows. engram's token goes in
X-Engram-Token instead, loopback included (serve.trust_loopback does not
apply, agents' keys are not taken); bodies may be up to --proxy-max-body,
and the requests in flight are not bounded, as an answer streams for
minutes.

With directories as arguments, it serves each as a project of its own (its
own store, index and settings) from the one process: one directory is served
as above; several are served under /p/NAME/ (/p/NAME/mcp, /p/NAME/v1/...,
/p/NAME/metrics, /p/NAME/v1/messages, ...), NAME being the directory's base
name, with /healthz listing them and one token for all.`,
		Example: `  engram serve --yes                  # the project of the current directory
  engram serve --yes ~/src/api ~/src/web   # two projects: /p/api/mcp and /p/web/mcp`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := checkAddr(addr, DefaultAddr); err != nil {
				return err
			}
			projects, err := a.serveProjects(args)
			if err != nil {
				return err
			}
			for _, p := range projects {
				p.migrates = true // servers bring a team's database to their schema
			}
			defer func() {
				for _, p := range projects[1:] {
					_ = p.close()
				}
			}()
			if token == "" {
				token = a.getenv("ENGRAM_TOKEN")
			}
			if token == "" {
				if tokenFile == "" {
					tokenFile = a.tokenFile()
				}
				if token, err = httpapi.LoadToken(tokenFile); err != nil {
					return err
				}
			}
			sv := a.cfg.Serve
			if sv.TrustLoopback && !httpapi.IsLoopback(addr) {
				return usagef("serve.trust_loopback is for a loopback --addr only; %s is reachable from other machines", addr)
			}
			ln, err := listen(addr)
			if err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			v, _ := versionInfo()
			stopping := make(chan struct{})
			// Spent login links and signed-out sessions, kept beside the
			// token so that they hold after a restart.
			logins, err := httpapi.OpenLogins(a.tokenFile() + ".logins")
			if err != nil {
				// The API serves all the same; the dashboard's sign-outs
				// hold until a restart.
				fmt.Fprintf(a.stderr, "warning: the dashboard's sign-ins are kept in memory only: %v\n", err)
				logins = httpapi.NewLogins()
			}
			opts := httpapi.Options{Token: token, TrustLoopback: sv.TrustLoopback, Version: v, MaxBodyBytes: maxBody, Logger: a.log,
				AllowedHosts: append(servedHosts(ln.Addr().String()), sv.AllowedHosts...), AllowedOrigins: sv.AllowedOrigins,
				Admission:      httpapi.NewAdmission(sv.MaxInFlight, sv.MaxQueue, sv.QueueWait.Duration),
				MCPSessionIdle: sv.MCPIdle.Duration, MaxMCPSessions: sv.MaxMCPSessions, MCPStructured: a.cfg.MCP.Structured,
				// One for every project: a link spent through one is spent.
				Logins: logins, Done: stopping}
			var handler http.Handler
			mounts := map[string]http.Handler{}
			pmetrics := make([]*metrics.Metrics, len(projects))
			// pindex are the watchers' live states, which GET /v1/index
			// reports: none when the server does not index.
			pindex := make([]*index.Activity, len(projects))
			var models *proxy.Proxy // a project's proxy, for its upstreams
			var proxies []*proxy.Proxy
			for i, p := range projects {
				eng, err := p.engine(ctx, false)
				if err != nil {
					return fmt.Errorf("%s: %w", p.cfg.Project, err)
				}
				popts := opts
				popts.Metrics = metrics.New(eng)
				if popts.Windows, err = p.windowManager(eng); err != nil {
					return fmt.Errorf("%s: %w", p.cfg.Project, err)
				}
				if popts.Assembler, err = p.assembler(eng, popts.Windows); err != nil {
					return fmt.Errorf("%s: %w", p.cfg.Project, err)
				}
				if !noProxy {
					po := upstreams
					po.Token, po.Logger = token, a.log
					if po.Catalog, err = p.cfg.Catalog(); err != nil {
						return fmt.Errorf("%s: %w", p.cfg.Project, err)
					}
					px, err := proxy.New(eng, popts.Windows, po)
					if err != nil {
						return usagef("%v", err)
					}
					popts.Proxy, models = px, px
					proxies = append(proxies, px)
					popts.Metrics.Proxy(px.Stats)
				}
				pmetrics[i] = popts.Metrics
				if !noIndex {
					popts.Index = index.NewActivity()
					pindex[i] = popts.Index
				}
				handler = httpapi.Handler(eng, popts)
				mounts[filepath.Base(p.cfg.Project)] = handler
			}
			if len(projects) > 1 {
				handler = httpapi.Projects(mounts, opts)
			}
			srv := &http.Server{
				Handler: handler,
				// A slow client gets 10 s for its headers and a minute for its
				// body; responses (MCP event streams) have no write deadline.
				ReadHeaderTimeout: 10 * time.Second,
				ReadTimeout:       time.Minute,
				IdleTimeout:       2 * time.Minute,
			}
			if len(projects) == 1 {
				fmt.Fprintf(a.stderr, "engram serving %s on http://%s (MCP at /mcp, JSON API at /v1)\n", projects[0].cfg.Project, ln.Addr())
			} else {
				fmt.Fprintf(a.stderr, "engram serving %d projects on http://%s\n", len(projects), ln.Addr())
				for _, p := range projects {
					fmt.Fprintf(a.stderr, "  %s at /p/%s/ (MCP at /p/%[2]s/mcp, JSON API at /p/%[2]s/v1)\n", p.cfg.Project, filepath.Base(p.cfg.Project))
				}
			}
			if err := a.printLogin(pageBase(ln.Addr().String(), projects), token); err != nil {
				return err
			}
			if models != nil {
				prefix := ""
				if len(projects) > 1 {
					prefix = "/p/NAME"
				}
				fmt.Fprintf(a.stderr, "model APIs at %s/v1/messages (to %s), %[1]s/v1/chat/completions and %[1]s/v1/responses (to %[3]s); they need X-Engram-Token\n",
					prefix, models.Upstream("anthropic"), models.Upstream("openai"))
			}
			switch {
			case sv.TrustLoopback:
				fmt.Fprintln(a.stderr, "requests from loopback without a token are trusted (serve.trust_loopback); others need the token")
			case tokenFile != "":
				fmt.Fprintf(a.stderr, "requests need the bearer token in %s (engram token prints it)\n", tokenFile)
			default:
				fmt.Fprintln(a.stderr, "requests need the bearer token given by --token or $ENGRAM_TOKEN")
			}

			var wg sync.WaitGroup
			ictx, stopIndex := context.WithCancel(ctx)
			defer func() {
				stopIndex()
				wg.Wait()
			}()
			for _, p := range projects {
				if eng, err := p.engine(ctx, false); err == nil {
					wg.Go(func() { p.retainLoop(ictx, eng) })
				}
			}
			for i, p := range projects {
				if noIndex {
					// What agents store is embedded all the same (the
					// watcher does it when it runs). On PostgreSQL the
					// server that indexes embeds for every server: the
					// others, started with --no-index as the README says,
					// would each embed the same chunks at once.
					if _, err := p.engine(ctx, false); err == nil && !noEmbed && !p.cfg.Store.Postgres() {
						wg.Go(func() { p.embedLoop(ictx, nil) })
					}
					continue
				}
				wg.Go(func() {
					err := p.runIndex(ictx, nil, index.Options{}, indexRun{yes: yes, embed: !noEmbed, watch: true, metrics: pmetrics[i], activity: pindex[i]})
					if err != nil && ictx.Err() == nil {
						fmt.Fprintf(a.stderr, "not indexing %s: %v\n", p.cfg.Project, err)
						// GET /v1/index says why too: a watcher that never
						// ran reads as one with nothing to do.
						pindex[i].Updated(index.Summary{}, fmt.Errorf("not indexing: %w", err))
					}
				})
			}
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ln) }()
			select {
			case err := <-served:
				return fmt.Errorf("serve: %w", err)
			case <-ctx.Done():
			}
			fmt.Fprintln(a.stderr, "stopping: waiting up to 10s for requests in flight")
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			close(stopping) // event streams and MCP sessions end: they would never go idle
			err = srv.Shutdown(sctx)
			for _, px := range proxies {
				px.Wait() // what they store after answering
			}
			if err != nil {
				return fmt.Errorf("shutdown: %w", err)
			}
			if err := <-served; !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", DefaultAddr, "host:port to listen on")
	f.StringVar(&token, "token", "", "the bearer token (default $ENGRAM_TOKEN, else the token file)")
	f.StringVar(&tokenFile, "token-file", "", "where the token is kept (default serve.token in the data directory)")
	f.BoolVar(&noIndex, "no-index", false, "serve without indexing or watching the project")
	f.BoolVarP(&yes, "yes", "y", false, "grant permission to read the project without asking")
	f.BoolVar(&noEmbed, "no-embed", false, "do not embed new chunks, indexed or stored by agents (engram embed does it later)")
	f.Int64Var(&maxBody, "max-body", httpapi.MaxBodyBytes, "largest request body accepted, in bytes (413 beyond); the model APIs' is --proxy-max-body")
	f.BoolVar(&noProxy, "no-proxy", false, "do not serve the model APIs (/v1/messages, /v1/chat/completions, /v1/responses)")
	f.StringVar(&upstreams.Anthropic, "anthropic", proxy.DefaultAnthropic, "the Anthropic API's base URL, where /v1/messages goes")
	f.StringVar(&upstreams.OpenAI, "openai", proxy.DefaultOpenAI, "the OpenAI API's base URL, where /v1/chat/completions and /v1/responses go")
	f.Int64Var(&upstreams.MaxBody, "proxy-max-body", proxy.DefaultMaxBody, "the largest model API request body, in bytes (above the vendors' own)")
	f.StringVar(&upstreams.Role, "proxy-role", window.ToolLoopRole, "the role of the model APIs' windows, which picks their eviction policy (a built-in role or one of [window.roles])")
	return cmd
}

// serveProjects returns the apps of the projects engram serve serves: a
// itself for the project of the command line when no directory is given,
// else one per directory, each with the configuration it would have as
// --project. The first is a; the caller closes the others.
func (a *app) serveProjects(dirs []string) ([]*app, error) {
	if len(dirs) == 0 {
		return []*app{a}, nil
	}
	if len(dirs) > 1 && (a.flags.Store != "" || a.getenv("ENGRAM_STORE") != "") {
		return nil, usagef("--store or ENGRAM_STORE names one store; several projects need one each")
	}
	var out []*app
	byName := map[string]string{}
	for i, dir := range dirs {
		flags := a.flags
		flags.Project = dir
		cfg, err := loadConfig(".", a.getenv, flags)
		if err != nil {
			return nil, err
		}
		name := filepath.Base(cfg.Project)
		if prev, ok := byName[name]; ok {
			return nil, usagef("two projects named %s: %s and %s (they would share /p/%s/)", name, prev, cfg.Project, name)
		}
		byName[name] = cfg.Project
		if i == 0 {
			a.cfg = cfg
			out = append(out, a)
			continue
		}
		out = append(out, &app{stdin: a.stdin, stdout: a.stdout, stderr: a.stderr, getenv: a.getenv, flags: flags, cfg: cfg, log: a.log})
	}
	return out, nil
}

// tokenFile is where the operator's token is kept: serve.token in the data
// directory, shared by every project served from it.
func (a *app) tokenFile() string { return filepath.Join(a.cfg.DataDir, "serve.token") }

// servedHosts returns the host names a server bound to addr answers to,
// besides loopback's: the address itself, or for a wildcard bind the
// machine's name and the addresses of its interfaces.
func servedHosts(addr string) []string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsUnspecified() {
		return []string{host}
	}
	var out []string
	if name, err := os.Hostname(); err == nil {
		out = append(out, name)
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				out = append(out, n.IP.String())
			}
		}
	}
	return out
}

// pageBase returns the dashboard's address on a server listening at
// addr: loopback's for a wildcard bind (a browser on this machine can reach
// it there), the first project's page when there are several.
func pageBase(addr string, projects []*app) string {
	host, port, err := net.SplitHostPort(addr)
	if err == nil {
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			host = "127.0.0.1"
		}
		addr = net.JoinHostPort(host, port)
	}
	base := "http://" + addr + "/"
	if len(projects) > 1 {
		base += "p/" + filepath.Base(projects[0].cfg.Project) + "/"
	}
	return base
}

// printLogin prints a login link to the dashboard at base.
func (a *app) printLogin(base, token string) error {
	if token == "" {
		return nil
	}
	link, err := httpapi.LoginURL(base, token, httpapi.LoginTTL)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "dashboard at %s; sign in once with (for an hour; engram token login prints another):\n  %s\n", base, link)
	return nil
}

func (a *app) tokenCmd() *cobra.Command {
	var path bool
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Print the operator's token that engram serve requires (made if there is none)",
		Long: `Print the bearer token engram serve requires of the operator: $ENGRAM_TOKEN
when it is set (serve takes it over the file too), else the token file's,
making it (mode 0600, in the data directory) if there is none yet; --path
prints where the file is. Scripts send it as Authorization: Bearer <token>:

  curl -H "Authorization: Bearer $(engram token)" http://127.0.0.1:7411/v1/search?q=retry

Anyone holding it can read and write the store; agents should get keys of
their own (POST /v1/agents, or engram agents register --key).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if path {
				fmt.Fprintln(a.stdout, a.tokenFile())
				return nil
			}
			if tok := a.getenv("ENGRAM_TOKEN"); tok != "" {
				// What serve requires when it is set; the file's would
				// be refused.
				fmt.Fprintln(a.stdout, tok)
				return nil
			}
			tok, err := httpapi.LoadToken(a.tokenFile())
			if err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, tok)
			return nil
		},
	}
	cmd.Flags().BoolVar(&path, "path", false, "print the token file's path instead")
	cmd.AddCommand(a.tokenLoginCmd())
	return cmd
}

func (a *app) tokenLoginCmd() *cobra.Command {
	var (
		addr    string
		project string
		ttl     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Print a link that signs a browser in to engram serve's dashboard",
		Long: `Print a login link to the dashboard of engram serve, signed with the
operator's token: opening it sets a cookie (HttpOnly, SameSite=Strict) that
lets the browser read the server's data, never write it. Each link works once,
for --ttl; the cookie lasts a week, across server restarts, and ends when the
token changes. Give --addr as engram serve's, and --project NAME when it
serves several projects.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			tok := a.getenv("ENGRAM_TOKEN")
			if tok == "" {
				var err error
				if tok, err = httpapi.LoadToken(a.tokenFile()); err != nil {
					return err
				}
			}
			if ttl <= 0 || ttl > 24*time.Hour {
				return usagef("--ttl is %v; it must be more than 0 and at most 24h", ttl)
			}
			if _, _, err := net.SplitHostPort(addr); err != nil {
				return usagef("--addr %q is not host:port: %v", addr, err)
			}
			base := "http://" + addr + "/"
			if project != "" {
				base += "p/" + url.PathEscape(project) + "/"
			}
			link, err := httpapi.LoginURL(base, tok, ttl)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, link)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", DefaultAddr, "host:port engram serve listens on")
	f.StringVar(&project, "project", "", "the project's name, when the server serves several (its page is /p/NAME/)")
	f.DurationVar(&ttl, "ttl", httpapi.LoginTTL, "how long the link can be used")
	return cmd
}
