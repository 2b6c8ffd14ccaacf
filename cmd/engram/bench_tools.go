package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/mcpserver"
	"github.com/engramhq/engram/internal/tokens"
)

func (a *app) benchToolsCmd() *cobra.Command {
	var (
		compare []string
		dir     string
		results bool
		repo    string
	)
	cmd := &cobra.Command{
		Use:   "tools",
		Short: "Tokens of engram's MCP tool list, against other MCP servers' lists",
		Long: `Count the bytes and tokens (o200k_base) of the tool list engram's MCP server
sends a client, as compact JSON, tool by tool; with --compare, start each given
command as an MCP server over stdio and count its list the same way, so the
cost of engram's tools stands beside another server's measured in the same
run. A --compare value is a command and its arguments, split at spaces.

With --results, also index --repo (default: the project) and its example
session (examples/session.jsonl) into the scratch store, make the typical
call of every tool and count the tokens of each result: its text (what the
model reads, as engram answers by default) and its structured content
(what Claude Code and Codex show the model instead with [mcp] structured).`,
		Example: `  engram bench tools --compare "npx -y @modelcontextprotocol/server-memory"`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
			defer cancel()
			enc, err := tokens.Get("o200k_base")
			if err != nil {
				return err
			}
			_, eng, done, err := scratchStore(ctx, dir, "tools.db")
			if err != nil {
				return err
			}
			defer done()
			st1, st2 := mcp.NewInMemoryTransports()
			v, _ := versionInfo()
			ss, err := mcpserver.New(eng, mcpserver.Options{Session: "bench", Version: v}).MCP().Connect(ctx, st1, nil)
			if err != nil {
				return err
			}
			defer func() { _ = ss.Close() }()
			lists := []struct {
				name string
				t    mcp.Transport
			}{{"engram", st2}}
			for _, c := range compare {
				f := strings.Fields(c)
				if len(f) == 0 {
					return usagef("--compare needs a command")
				}
				lists = append(lists, struct {
					name string
					t    mcp.Transport
				}{c, &mcp.CommandTransport{Command: exec.CommandContext(ctx, f[0], f[1:]...)}})
			}
			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "SERVER\tTOOLS\tBYTES\tTOKENS\tPER TOOL\tLARGEST")
			for _, l := range lists {
				client := mcp.NewClient(&mcp.Implementation{Name: "engram-bench", Version: version}, nil)
				cs, err := client.Connect(ctx, l.t, nil)
				if err != nil {
					return fmt.Errorf("%s: %w", l.name, err)
				}
				res, err := cs.ListTools(ctx, nil)
				_ = cs.Close()
				if err != nil {
					return fmt.Errorf("%s: %w", l.name, err)
				}
				// The tools array is what a client passes on to the model;
				// the result's _meta names the server and its version, which
				// varies with how the binary was built.
				all, err := json.Marshal(res.Tools)
				if err != nil {
					return err
				}
				total := enc.Count(string(all))
				largest, largestN := "", 0
				for _, t := range res.Tools {
					b, _ := json.Marshal(t)
					if n := enc.Count(string(b)); n > largestN {
						largest, largestN = t.Name, n
					}
				}
				per := 0
				if len(res.Tools) > 0 {
					per = total / len(res.Tools)
				}
				fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%s (%d)\n", l.name, len(res.Tools), len(all), total, per, largest, largestN)
			}
			if results {
				if repo == "" {
					repo = a.cfg.Project
				}
				st3, st4 := mcp.NewInMemoryTransports()
				ss2, err := mcpserver.New(eng, mcpserver.Options{Session: "bench", Agent: "bench", Structured: true}).MCP().Connect(ctx, st3, nil)
				if err != nil {
					return err
				}
				defer func() { _ = ss2.Close() }()
				cs, err := mcp.NewClient(&mcp.Implementation{Name: "engram-bench", Version: version}, nil).Connect(ctx, st4, nil)
				if err != nil {
					return err
				}
				defer func() { _ = cs.Close() }()
				if err := a.benchResults(ctx, w, eng, cs, enc, repo); err != nil {
					return err
				}
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringArrayVar(&compare, "compare", nil, "another MCP server's command, run over stdio (repeatable)")
	cmd.Flags().StringVar(&dir, "dir", "", "directory for the scratch store (default: a temporary one)")
	cmd.Flags().BoolVar(&results, "results", false, "also measure the tokens of typical tool results")
	cmd.Flags().StringVar(&repo, "repo", "", "the repository --results indexes (default: the project)")
	return cmd
}
