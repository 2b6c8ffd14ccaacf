package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/config"
	"github.com/engramhq/engram/internal/httpapi"
	"github.com/engramhq/engram/internal/index"
	"github.com/engramhq/engram/internal/metrics"
)

// DefaultAddr is where engram serve listens by default.
const DefaultAddr = "127.0.0.1:7411"

func (a *app) serveCmd() *cobra.Command {
	var (
		addr, token, tokenFile string
		noIndex, yes, noEmbed  bool
		maxBody                int64
	)
	cmd := &cobra.Command{
		Use:   "serve [DIR...]",
		Short: "Index the project, keep the index current, and serve it over HTTP (MCP at /mcp, JSON at /v1)",
		Long: `Run engram for a project as one long-lived process: index the repository if
it has no index yet (the first time it needs your permission: --yes, or run
engram index on a terminal), keep the index current as files change, and
serve over HTTP:

  /mcp      the MCP endpoint, streamable HTTP: the tools of engram mcp
  /v1/...   the JSON API over the same operations (see the README)
  /metrics  Prometheus metrics
  /healthz  health, without a token

It binds to loopback (127.0.0.1:7411) by default. A bearer token is made on
the first run and kept with mode 0600 beside the store (or given with
--token or ENGRAM_TOKEN); it is required on any other bind, and optional on
loopback, where a request without it is let in and a wrong one refused.
MCP clients name their session and agent with the X-Engram-Session and
X-Engram-Agent headers. Ctrl-C or SIGTERM stops it gracefully.

With directories as arguments, it serves each as a project of its own (its
own store, index and settings) from the one process: one directory is served
as above; several are served under /p/NAME/ (/p/NAME/mcp, /p/NAME/v1/...,
/p/NAME/metrics), NAME being the directory's base name, with /healthz
listing them and one token for all, kept in the data directory.`,
		Example: `  engram serve --yes                  # the project of the current directory
  engram serve --yes ~/src/api ~/src/web   # two projects: /p/api/mcp and /p/web/mcp`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			projects, err := a.serveProjects(args)
			if err != nil {
				return err
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
					tokenFile = filepath.Join(filepath.Dir(projects[0].cfg.Store.Path), "serve.token")
					if len(projects) > 1 {
						tokenFile = filepath.Join(a.cfg.DataDir, "serve.token")
					}
				}
				if token, err = httpapi.LoadToken(tokenFile); err != nil {
					return err
				}
			}
			require := !httpapi.IsLoopback(addr)
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			v, _ := versionInfo()
			opts := httpapi.Options{Token: token, RequireToken: require, Version: v, MaxBodyBytes: maxBody, Logger: a.log}
			var handler http.Handler
			mounts := map[string]http.Handler{}
			pmetrics := make([]*metrics.Metrics, len(projects))
			for i, p := range projects {
				eng, err := p.engine(ctx, false)
				if err != nil {
					return fmt.Errorf("%s: %w", p.cfg.Project, err)
				}
				popts := opts
				popts.Metrics = metrics.New(eng)
				pmetrics[i] = popts.Metrics
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
			switch {
			case tokenFile != "" && require:
				fmt.Fprintf(a.stderr, "bearer token required; it is in %s\n", tokenFile)
			case tokenFile != "":
				fmt.Fprintf(a.stderr, "bearer token optional on loopback; it is in %s\n", tokenFile)
			}

			var wg sync.WaitGroup
			ictx, stopIndex := context.WithCancel(ctx)
			defer func() {
				stopIndex()
				wg.Wait()
			}()
			for i, p := range projects {
				if noIndex {
					break
				}
				wg.Go(func() {
					err := p.runIndex(ictx, nil, index.Options{}, indexRun{yes: yes, embed: !noEmbed, watch: true, metrics: pmetrics[i]})
					if err != nil && ictx.Err() == nil {
						fmt.Fprintf(a.stderr, "not indexing %s: %v\n", p.cfg.Project, err)
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
			if err := srv.Shutdown(sctx); err != nil {
				return fmt.Errorf("shutdown: %w", err)
			}
			if err := <-served; !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", DefaultAddr, "host:port to listen on; a non-loopback address requires the token")
	f.StringVar(&token, "token", "", "the bearer token (default $ENGRAM_TOKEN, else the token file)")
	f.StringVar(&tokenFile, "token-file", "", "where the token is kept (default serve.token beside the store)")
	f.BoolVar(&noIndex, "no-index", false, "serve without indexing or watching the project")
	f.BoolVarP(&yes, "yes", "y", false, "grant permission to read the project without asking")
	f.BoolVar(&noEmbed, "no-embed", false, "do not embed new chunks as they are indexed")
	f.Int64Var(&maxBody, "max-body", httpapi.MaxBodyBytes, "largest request body accepted, in bytes (413 beyond)")
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
		cfg, err := config.Load(".", a.getenv, flags)
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
