package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/mcpserver"
)

func (a *app) mcpCmd() *cobra.Command {
	var (
		opts        mcpserver.Options
		printConfig string
	)
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve engram to an agent over MCP (stdio)",
		Long: `Serve the project's engram to one agent over the Model Context Protocol on
standard input and output, as agent harnesses start MCP servers: tools to
search code and history, read files, expand context references, record what
the agent sees, and use the shared memory (briefing, recall, record_pattern,
record_failure, ...), a briefing resource and a start_session prompt. Logs go
to standard error, never to standard output.

The connection's session is --session (or $ENGRAM_SESSION, else the client's
name and the start time) and its agent --agent (or $ENGRAM_AGENT, else
mcp@SESSION, registered on first use): its writes go to that session only.

--print-config claude|codex|cursor prints the snippet that registers engram
with that client.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if printConfig != "" {
				return a.printMCPConfig(printConfig)
			}
			ctx := cmd.Context()
			eng, err := a.engine(ctx, false)
			if err != nil {
				return err
			}
			if opts.Session == "" {
				opts.Session = a.getenv("ENGRAM_SESSION")
			}
			if opts.Agent == "" {
				opts.Agent = a.getenv("ENGRAM_AGENT")
			}
			opts.Version, _ = versionInfo()
			opts.Logger = a.log
			srv := mcpserver.New(eng, opts)
			a.log.Info("engram mcp serving on stdio", "project", a.cfg.Project, "store", a.cfg.Store.Path)
			return srv.Run(ctx, mcpserver.StdioTransport(a.stdin, a.stdout, a.log))
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Session, "session", "", "the session this connection writes to (default $ENGRAM_SESSION)")
	f.StringVar(&opts.Agent, "agent", "", "the agent writing (default $ENGRAM_AGENT, else mcp@SESSION)")
	f.StringVar(&opts.Model, "model", "", "the model the agent runs on, recorded with its writes")
	f.StringVar(&printConfig, "print-config", "", "print the MCP configuration for claude, codex or cursor, and exit")
	return cmd
}

// printMCPConfig prints the snippet that registers engram with a client.
func (a *app) printMCPConfig(client string) error {
	bin, err := os.Executable()
	if err != nil || filepath.Base(bin) != "engram" {
		bin = "engram"
	}
	args := []string{"mcp", "--project", a.cfg.Project}
	switch client {
	case "claude":
		// Claude Code's .mcp.json (project scope), also what
		// `claude mcp add-json engram '<json>'` takes.
		return writeJSON(a.stdout, map[string]any{"mcpServers": map[string]any{"engram": map[string]any{
			"type": "stdio", "command": bin, "args": args}}})
	case "cursor":
		// Cursor's .cursor/mcp.json.
		return writeJSON(a.stdout, map[string]any{"mcpServers": map[string]any{"engram": map[string]any{
			"command": bin, "args": args}}})
	case "codex":
		// Codex's ~/.codex/config.toml.
		q, _ := json.Marshal(args)
		fmt.Fprintf(a.stdout, "[mcp_servers.engram]\ncommand = %q\nargs = %s\n", bin, q)
		return nil
	}
	return usagef("--print-config: %q is not one of claude, codex, cursor", client)
}
