// Command engram is a context engine and shared memory for AI coding agents:
// it stores everything an agent sees, losslessly, and finds it again.
//
// Run `engram help` for the commands. Exit status: 0 on success, 1 on an
// error, 2 on a usage error (unknown command or flag, wrong arguments).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/api"
	"github.com/engramhq/engram/internal/config"
	"github.com/engramhq/engram/internal/embed"
	"github.com/engramhq/engram/internal/embed/lsa"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/llm"
	"github.com/engramhq/engram/internal/rerank"
	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/postgres"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/window"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// usageError marks errors that exit with status 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// exactArgs, minArgs and maxArgs check a command's number of arguments as
// cobra's own checks do, with a usage error that names the command, what
// it takes and its usage line: cobra's says "accepts 1 arg(s), received
// 0", naming neither.
func exactArgs(n int) cobra.PositionalArgs { return argCount(n, n) }

func minArgs(n int) cobra.PositionalArgs { return argCount(n, -1) }

func maxArgs(n int) cobra.PositionalArgs { return argCount(0, n) }

func argCount(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) >= lo && (hi < 0 || len(args) <= hi) {
			return nil
		}
		want := plural(lo, "argument")
		switch {
		case hi < 0:
			want = "at least " + want
		case lo != hi:
			want = "at most " + plural(hi, "argument")
		}
		return usagef("%s takes %s, got %d (usage: %s)", cmd.CommandPath(), want, len(args), cmd.UseLine())
	}
}

// app holds what every command shares: streams, global flags, and the
// config and engine, opened on first use.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	flags          config.Flags
	cpuProfile     string
	stopProfile    func() error

	cfg config.Config
	log *slog.Logger
	st  cliStore
	eng *engine.Engine
	// migrates: this command brings a PostgreSQL store's schema to this
	// build's as it opens it (engram serve); every other command leaves
	// a shared database's schema to engram migrate.
	migrates bool
}

// run executes one command line and returns the exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	stdout, flush := forTerminal(stdout)
	defer flush()
	errTerminal := terminal(stderr)
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv}
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if cerr := a.close(); err == nil {
		err = cerr
	}
	if err == nil {
		return 0
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// Ctrl-C: what was done is kept; say so briefly, exit as shells expect.
		fmt.Fprintln(stderr, "interrupted: "+strings.TrimSuffix(err.Error(), ": "+context.Canceled.Error()))
		return 130
	}
	for _, line := range strings.Split(strings.TrimRight(err.Error(), "\n"), "\n") {
		if errTerminal {
			line = escapeControls(line)
		}
		fmt.Fprintln(stderr, "error: "+line)
	}
	var ue *usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		fmt.Fprintln(stderr, "run 'engram help' for usage")
		return 2
	}
	return 1
}

// isCobraUsage recognises the usage errors cobra makes itself.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "flag needs an argument",
		"invalid argument", "accepts ", "requires at least", "requires at most", "required flag"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "engram",
		Short: "A context engine and shared memory for AI coding agents",
		Long: `engram stores everything an agent sees (prompts, responses, tool calls and
results, files) once, content-addressed, and indexes it for search, so that
nothing leaves an agent's context window for good.

The store is one SQLite file per project, under your data directory
(see 'engram stats' for its path), unless --store or ENGRAM_STORE says
otherwise: another file, or a postgres:// URL (or a keyword/value connection
string, host=... dbname=...) for a PostgreSQL database that a team's servers
share (README: "A team's store on PostgreSQL").`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if a.cpuProfile != "" {
				if err := a.startProfile(); err != nil {
					return err
				}
			}
			return a.loadConfig()
		},
	}
	root.CompletionOptions.HiddenDefaultCmd = true
	pf := root.PersistentFlags()
	pf.StringVar(&a.flags.ConfigFile, "config", "", "config file (default $XDG_CONFIG_HOME/engram/config.toml; env ENGRAM_CONFIG)")
	pf.StringVar(&a.flags.Project, "project", "", "project directory (default: the git work tree of the current directory; env ENGRAM_PROJECT)")
	pf.StringVar(&a.flags.DataDir, "data-dir", "", "where per-project stores live (default $XDG_DATA_HOME/engram; env ENGRAM_DATA_DIR)")
	pf.StringVar(&a.flags.Store, "store", "", "store file, or postgres://user@host:port/database URL or host=... dbname=... connection string, overriding the per-project default (env ENGRAM_STORE; a password goes in ENGRAM_STORE_PASSWORD or ENGRAM_STORE_PASSWORD_FILE)")
	pf.StringVar(&a.flags.LogLevel, "log-level", "", "debug, info, warn or error (default warn; env ENGRAM_LOG_LEVEL)")
	pf.StringVar(&a.cpuProfile, "cpuprofile", "", "write a CPU profile to this file")
	_ = pf.MarkHidden("cpuprofile")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return &usageError{plainFlagError(err)} })
	root.AddCommand(a.addCmd(), a.searchCmd(), a.showCmd(), a.statsCmd(), a.modelsCmd(), a.versionCmd(), a.tokensCmd(), a.benchCmd(), a.indexCmd(), a.watchCmd(), a.filesCmd(), a.evalCmd(),
		a.embedCmd(), a.prefetchCmd(), a.modelCmd(),
		a.serveCmd(), a.tokenCmd(), a.mcpCmd(), a.archCmd(), flagsOnly(a.briefingCmd()), flagsOnly(a.sessionCmd()), flagsOnly(a.patternCmd()), flagsOnly(a.failureCmd()), flagsOnly(a.insightCmd()),
		flagsOnly(a.decisionCmd()), flagsOnly(a.intentCmd()), flagsOnly(a.agentsCmd()), flagsOnly(a.eventsCmd()),
		a.forgetCmd(), a.redactCmd(), a.migrateCmd(), a.storeCmd(), a.auditCmd(), a.windowCmd(), a.hookCmd(), a.hooksCmd(), a.importCmd(), a.daemonCmd(), a.proxyCmd(), a.trustCmd())
	strictGroups(root)
	return root
}

// strictGroups makes each command that only groups others refuse what
// is not one of them. Cobra shows a group's help for an unknown
// subcommand and exits 0, so a typo ("window statsu") would pass unseen.
func strictGroups(c *cobra.Command) {
	for _, sub := range c.Commands() {
		strictGroups(sub)
	}
	// (The root's unknown commands are cobra's own: "unknown command",
	// "Unknown help topic".)
	if !c.HasSubCommands() || c.Runnable() || !c.HasParent() {
		return
	}
	c.Args = cobra.ArbitraryArgs
	c.SuggestionsMinimumDistance = 2 // cobra's own, for the root's commands
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += "; did you mean " + strings.Join(s, " or ") + "?"
		}
		return usagef("%s", msg)
	}
}

// flagsOnly marks c and the commands under it as taking every input
// from their command line: a value their operation refuses (a limit out
// of its range, a category not known, a required field missing) is then
// a usage error, exit 2, as the same mistake is where the command checks
// its flags itself.
func flagsOnly(c *cobra.Command) *cobra.Command {
	for _, sub := range c.Commands() {
		flagsOnly(sub)
	}
	if run := c.RunE; run != nil {
		c.RunE = func(cmd *cobra.Command, args []string) error {
			err := run(cmd, args)
			var (
				ve *store.ValidationError
				ie *api.InputError
				ue *usageError
			)
			if err != nil && !errors.As(err, &ue) && (errors.As(err, &ve) || errors.As(err, &ie) || errors.Is(err, window.ErrInvalid)) {
				return &usageError{err}
			}
			return err
		}
	}
	return c
}

func (a *app) loadConfig() error {
	dir, err := os.Getwd()
	if err != nil {
		return err
	}
	a.cfg, err = loadConfig(dir, a.getenv, a.flags)
	if err != nil {
		return err
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(a.cfg.LogLevel)) // validated by config
	a.log = slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level}))
	return nil
}

// loadConfig loads the configuration for a command run in dir, its
// [window] section checked too (config cannot import window), so that a
// mistake there is refused now rather than at the first window operation.
func loadConfig(dir string, env config.Env, flags config.Flags) (config.Config, error) {
	cfg, err := config.Load(dir, env, flags)
	if err != nil {
		return cfg, err
	}
	return cfg, window.CheckConfig(cfg.Window)
}

// errNoStore is returned by read commands before anything was stored.
var errNoStore = errors.New("no store yet")

// engine opens the store and the engine. With mustExist, a missing store
// file is errNoStore rather than a new empty store.
func (a *app) engine(ctx context.Context, mustExist bool) (*engine.Engine, error) {
	if a.eng != nil {
		return a.eng, nil
	}
	if mustExist && !a.cfg.Store.Postgres() {
		if _, err := os.Stat(a.cfg.Store.Path); errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w for project %s (it would be %s): store something first: index the project with 'engram index', or a session with 'engram add'",
				errNoStore, a.cfg.Project, a.cfg.Store.Path)
		}
	}
	st, err := a.openStore(ctx, a.cfg.Store.Path)
	if err != nil {
		return nil, err
	}
	eng, err := engine.New(st, a.engineOptions())
	if err != nil {
		return nil, errors.Join(err, st.Close())
	}
	a.st, a.eng = st, eng
	return eng, nil
}

func (a *app) startProfile() error {
	f, err := os.Create(a.cpuProfile)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return errors.Join(err, f.Close())
	}
	a.stopProfile = func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}
	return nil
}

// engineOptions are the configured engine settings.
func (a *app) engineOptions() engine.Options {
	c := a.cfg
	return engine.Options{
		Encoding:        c.Tokens.Encoding,
		MaxContentBytes: c.Ingest.MaxContentBytes,
		ChunkTokens:     c.Ingest.ChunkTokens,
		KeepSecrets:     c.Ingest.KeepSecrets,
		Logger:          a.log,
		Embed: engine.EmbedOptions{
			Provider: c.Embed.Provider,
			Model:    c.Embed.Model,
			URL:      c.Embed.URL,
			APIKey:   a.getenv(c.Embed.APIKeyEnv),
			Path:     a.modelDir(c.Embed.Path),
			Remote: embed.RemoteOptions{
				BatchSize:   c.Embed.BatchSize,
				Concurrency: c.Embed.Concurrency,
				Timeout:     c.Embed.Timeout.Duration,
				Retries:     c.Embed.Retries,
				Dimensions:  c.Embed.Dimensions,
			},
			Corpus:       lsa.Options{Dim: c.Embed.CorpusDim},
			CorpusGrowth: c.Embed.CorpusGrowth,
		},
		Retrieve: retrieve.Options{
			Fusion: retrieve.FuseOptions{Method: retrieve.Fusion(c.Retrieve.Fusion), K: c.Retrieve.RRFK,
				LexicalWeight: c.Retrieve.LexicalWeight, VectorWeight: c.Retrieve.VectorWeight},
			Deadline:       c.Retrieve.Deadline.Duration,
			Depth:          c.Retrieve.Depth,
			SymbolBoost:    c.Retrieve.SymbolBoost,
			PathBoost:      c.Retrieve.PathBoost,
			SpeakerPrior:   c.Retrieve.SpeakerPrior,
			AncillaryPrior: c.Retrieve.AncillaryPrior,
			TestPrior:      c.Retrieve.TestPrior,
			ChangelogPrior: c.Retrieve.ChangelogPrior,
			DocPrior:       c.Retrieve.DocPrior,
			Off:            c.Retrieve.Off,
			FileEvidence:   c.Retrieve.FileEvidence,
			FileCoverage:   c.Retrieve.FileCoverage,
			SentenceBoost:  c.Retrieve.SentenceBoost,
			TimeBoost:      c.Retrieve.TimeBoost,
			Reranker:       a.reranker(),
			RerankDepth:    c.Rerank.Depth,
			RerankTimeout:  c.Rerank.Timeout.Duration,
		},
		RelevanceFloor: c.Retrieve.RelevanceFloor,
		LLM:            a.llmOptions(),
		Prefetch: retrieve.PrefetchOptions{
			BudgetShare:         c.Prefetch.BudgetShare,
			ExcerptThreshold:    c.Prefetch.ExcerptThreshold,
			ConfidenceThreshold: c.Prefetch.ConfidenceThreshold,
			MaxExcerpts:         c.Prefetch.MaxExcerpts,
			MaxHints:            c.Prefetch.MaxHints,
			MaxExcerptLines:     c.Prefetch.MaxExcerptLines,
			MinSignal:           c.Prefetch.MinSignal,
			MinCoverage:         c.Prefetch.MinCoverage,
		},
	}
}

// searchOptions are the configured search settings.
func (a *app) searchOptions() sqlite.SearchOptions {
	return sqlite.SearchOptions{
		MaxPostings:   a.cfg.Search.MaxPostings,
		Window:        a.cfg.Search.Window,
		MetaWeight:    a.cfg.Search.MetaWeight,
		ContextWeight: a.cfg.Search.ContextWeight,
		MmapSize:      a.cfg.Search.MmapSize,
	}
}

// pgSearchOptions are the configured search settings, for a store in
// PostgreSQL (which maps no file).
func (a *app) pgSearchOptions() postgres.SearchOptions {
	return postgres.SearchOptions{
		MaxPostings:   a.cfg.Search.MaxPostings,
		Window:        a.cfg.Search.Window,
		MetaWeight:    a.cfg.Search.MetaWeight,
		ContextWeight: a.cfg.Search.ContextWeight,
	}
}

func (a *app) close() error {
	if a.stopProfile != nil {
		if err := a.stopProfile(); err != nil {
			return err
		}
		a.stopProfile = nil
	}
	if a.st == nil {
		return nil
	}
	err := a.st.Close()
	a.st, a.eng = nil, nil
	return err
}

// llmOptions are the configured chat model's settings; no model when the
// provider is none.
// reranker is the configured re-ranker, or nil.
func (a *app) reranker() rerank.Reranker {
	c := a.cfg.Rerank
	if c.Provider == "none" || c.Provider == "" {
		return nil
	}
	r, err := rerank.New(rerank.Options{API: c.Provider, URL: c.URL, Model: c.Model, APIKey: a.getenv(c.APIKeyEnv),
		Timeout: c.Timeout.Duration})
	if err != nil {
		a.log.Warn("re-ranker not used", "err", err)
		return nil
	}
	return r
}

func (a *app) llmOptions() llm.Options {
	c := a.cfg.LLM
	if c.Provider == "none" || c.Provider == "" {
		return llm.Options{}
	}
	url := c.URL
	if url == "" {
		url = "https://api.openai.com/v1"
	}
	return llm.Options{URL: url, Model: c.Model, APIKey: a.getenv(c.APIKeyEnv), Timeout: c.Timeout.Duration}
}

// strconvError is the parse error pflag quotes from strconv.
var strconvError = regexp.MustCompile(`strconv\.Parse(Int|Uint|Float|Bool): parsing "(?:[^"\\]|\\.)*": (invalid syntax|value out of range)`)

// plainFlagError says what a flag's value should have been in words, not
// in strconv's ("strconv.ParseInt: parsing \"abc\": invalid syntax").
func plainFlagError(err error) error {
	msg := err.Error()
	m := strconvError.FindStringSubmatchIndex(msg)
	if m == nil {
		return err
	}
	kind, why := msg[m[2]:m[3]], msg[m[4]:m[5]]
	var want string
	switch {
	case why == "value out of range":
		want = "out of range"
	case kind == "Int":
		want = "want a whole number"
	case kind == "Uint":
		want = "want a whole number, 0 or more"
	case kind == "Float":
		want = "want a number"
	default:
		want = "want true or false"
	}
	return errors.New(msg[:m[0]] + want + msg[m[1]:])
}
