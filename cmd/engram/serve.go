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
		Use:   "serve",
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
X-Engram-Agent headers. Ctrl-C or SIGTERM stops it gracefully.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			eng, err := a.engine(ctx, false)
			if err != nil {
				return err
			}
			if token == "" {
				token = a.getenv("ENGRAM_TOKEN")
			}
			if token == "" {
				if tokenFile == "" {
					tokenFile = filepath.Join(filepath.Dir(a.cfg.Store.Path), "serve.token")
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
			srv := &http.Server{
				Handler: httpapi.Handler(eng, httpapi.Options{Token: token, RequireToken: require, Version: v,
					MaxBodyBytes: maxBody, Metrics: metrics.New(eng), Logger: a.log}),
				// A slow client gets 10 s for its headers and a minute for its
				// body; responses (MCP event streams) have no write deadline.
				ReadHeaderTimeout: 10 * time.Second,
				ReadTimeout:       time.Minute,
				IdleTimeout:       2 * time.Minute,
			}
			fmt.Fprintf(a.stderr, "engram serving %s on http://%s (MCP at /mcp, JSON API at /v1)\n", a.cfg.Project, ln.Addr())
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
			if !noIndex {
				wg.Go(func() {
					err := a.runIndex(ictx, nil, index.Options{}, indexRun{yes: yes, embed: !noEmbed, watch: true})
					if err != nil && ictx.Err() == nil {
						fmt.Fprintf(a.stderr, "not indexing: %v\n", err)
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
