package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/api"
	"github.com/engramhq/engram/internal/assemble"
	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/window"
)

func (a *app) windowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "window",
		Short: "Agents' context windows: open, append, status, list, context, assemble, snapshots, snapshot, diff, expand, readmit, handoff, replay",
		Long: `A context window per agent of a session: the messages the agent's model
sees, within a budget of tokens. Past its threshold a window evicts its
oldest messages, by its role's strategy (never a tool call without its
result, never the system prompt, the latest turns only when nothing else
makes room) and leaves a reference marker in their place, [CTX-REF:...],
which expands back to them byte for byte and can be readmitted. A message
larger than the budget is shown as its head, tail and marker. Everything a
window is given is stored first, so that search and the session's turns
find it.

The window is named by --session (default $ENGRAM_SESSION) and --agent
(default $ENGRAM_AGENT).`,
		Example: `  engram window open --session s1 --agent claude --model claude-sonnet-4-5
  engram window append --session s1 --agent claude --format anthropic < turn.jsonl
  engram window status --session s1 --agent claude
  engram window context --session s1 --agent claude
  engram window snapshots --session s1 --agent claude
  engram window diff 1 latest --session s1 --agent claude
  engram window expand c3f9a2c1.2.9.d0b4e
  engram window readmit c3f9a2c1.2.9.d0b4e
  engram window handoff --session s1 --agent engineer
  engram window replay examples/session.jsonl --budget 2000`,
		Args: noArgs,
	}
	// (append, assemble and replay read files too: what they refuse of
	// a file is an error, exit 1, not a usage error; and what handoff
	// refuses is the window's state.)
	cmd.AddCommand(flagsOnly(a.windowOpenCmd()), a.windowAppendCmd(), flagsOnly(a.windowStatusCmd()), flagsOnly(a.windowListCmd()), flagsOnly(a.windowContextCmd()),
		a.windowAssembleCmd(), flagsOnly(a.windowReadmitCmd()), a.windowHandoffCmd(), flagsOnly(a.windowExpandCmd()), a.windowReplayCmd())
	cmd.AddCommand(flagsOnly(a.windowSnapshotsCmd()), flagsOnly(a.windowSnapshotCmd()), flagsOnly(a.windowDiffCmd()))
	return cmd
}

// windowFlags name a window: --session and --agent, from the environment
// by default.
type windowFlags struct{ session, agent string }

func (w *windowFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&w.session, "session", "", "the window's session (default $ENGRAM_SESSION)")
	cmd.Flags().StringVar(&w.agent, "agent", "", "the window's agent (default $ENGRAM_AGENT)")
}

// ops returns the operations for the window the flags name; need says
// which of session and agent must be given.
func (a *app) windowOps(cmd *cobra.Command, w windowFlags, needSession, needAgent bool, mustExist bool) (*api.Ops, error) {
	if w.session == "" {
		w.session = a.getenv("ENGRAM_SESSION")
	}
	if w.agent == "" {
		w.agent = a.getenv("ENGRAM_AGENT")
	}
	switch {
	case needSession && w.session == "":
		return nil, usagef("%s needs --session (or ENGRAM_SESSION)", cmd.CommandPath())
	case needAgent && w.agent == "":
		return nil, usagef("%s needs --agent (or ENGRAM_AGENT)", cmd.CommandPath())
	}
	eng, err := a.engine(cmd.Context(), mustExist)
	if err != nil {
		return nil, err
	}
	m, err := a.windowManager(eng)
	if err != nil {
		return nil, err
	}
	asm, err := a.assembler(eng, m)
	if err != nil {
		return nil, err
	}
	asm.OneTurn = true // a command's
	session := w.session
	return &api.Ops{Eng: eng, Agent: w.agent, Windows: m, Assembler: asm, Session: func() string { return session }}, nil
}

// assembler returns the assembler of eng's windows, configured
// ([assemble]).
func (a *app) assembler(eng *engine.Engine, m *window.Manager) (*assemble.Assembler, error) {
	asm, err := api.NewAssembler(eng, m, a.cfg.Assemble.Summarizer, a.cfg.Assemble.SummaryTimeout.Duration)
	if err != nil {
		return nil, fmt.Errorf("assemble: %w", err)
	}
	return asm, nil
}

// windowManager returns the window manager of eng's store, configured:
// the models of [[models]], the defaults and role policies of [window].
func (a *app) windowManager(eng *engine.Engine) (*window.Manager, error) {
	cat, err := a.cfg.Catalog()
	if err != nil {
		return nil, err
	}
	m := window.NewManager(eng, cat)
	if err := m.Configure(window.ConfigFrom(a.cfg.Window)); err != nil {
		return nil, err
	}
	return m, nil
}

// printOp prints an operation's result: its JSON with --json, else its
// text.
func (a *app) printOp(jsonOut bool, out any, text string) error {
	if jsonOut {
		return writeJSON(a.stdout, out)
	}
	_, err := fmt.Fprintln(a.stdout, text)
	return err
}

func (a *app) windowOpenCmd() *cobra.Command {
	var (
		w       windowFlags
		in      api.WindowOpenIn
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "open",
		Short: "Open an agent's window, or change its settings",
		Long: `Open the context window of an agent of a session, sized by a model engram
knows (engram models lists them) or by --limit, the context window in tokens.
Opening an open window changes its settings: a model switch keeps its
messages. --role picks the eviction policy: librarian and archivalist evict
at 75 % with checkpoints at 25 and 50 %, academic at 80 % by topic, architect
at 85 % by task; tool_loop, for an agent in a harness, is the layout measured
on real agent runs (the newest step kept whole, down to 40 % in one step, a
digest of evicted tool output, commands over 300 tokens as head, tail and
marker); any other role by recency at 75 %. Every role shows a message
larger than its budget as its head, tail and marker. New settings lay the
window out anew: a larger window shows again what it can.`,
		Example: `  engram window open --session s1 --agent claude --model claude-sonnet-4-5 --role tool_loop
  engram window open --session s1 --agent bot --limit 32000 --role librarian`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ops, err := a.windowOps(cmd, w, true, true, false)
			if err != nil {
				return err
			}
			out, text, err := ops.WindowOpen(cmd.Context(), in)
			if err != nil {
				return err
			}
			return a.printOp(jsonOut, out, text)
		},
	}
	w.add(cmd)
	f := cmd.Flags()
	f.StringVar(&in.Model, "model", "", "a model engram knows: its context window and tokenizer")
	f.IntVar(&in.Limit, "limit", 0, "the context window in tokens, instead of the model's")
	f.StringVar(&in.Role, "role", "", "the agent's role, which picks the eviction policy")
	f.IntVar(&in.Output, "output", 0, "tokens reserved for the response (default 8192, or the model's most)")
	f.IntVar(&in.Safety, "safety", 0, "tokens kept free for what the harness adds (default 2 % of the context)")
	f.BoolVar(&jsonOut, "json", false, "print the window as JSON")
	return cmd
}

func (a *app) windowAppendCmd() *cobra.Command {
	var (
		w       windowFlags
		file    string
		format  string
		key     string
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "append",
		Short: "Append messages, read as JSON Lines, to a window as one turn",
		Long: `Append messages to a window as one turn, read as JSON Lines from --file or
standard input, one message a line, in --format:

  engram     {"role": "user", "content": "Fix the flaky test"}, or with
             "blocks": [{"type": "text", "text": ...}, {"type": "tool_use",
             "id", "name", "input"}, {"type": "tool_result", "tool_use_id",
             "text"}], as engram window context --json prints them
  anthropic  Anthropic's Messages API: {"role", "content": text or blocks}
  openai     OpenAI's Chat Completions: {"role", "content", "tool_calls",
             "tool_call_id"}

Each message is stored first (secrets redacted), then the window evicts
what its policy says. The whole input is read and checked before anything
is stored: a bad line (not JSON, a message a window cannot take, a tool
result whose call no earlier message made) stores nothing, and is named by
its number. A message larger than the window's budget is stored whole.

With --key, the append is made once: run again with the same key and the
same messages (a script retrying a turn it is not sure went in), it writes
nothing and says where the messages went the first time; the same key with
other messages is refused.`,
		Example: `  echo '{"role":"user","content":"Why does TestUploadRetry time out?"}' | engram window append --session s1 --agent claude
  engram window append --session s1 --agent claude --format openai --file turn.jsonl --json
  engram window append --session s1 --agent claude --file turn-17.jsonl --key turn-17`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := api.ParseFormat(format); err != nil {
				return &usageError{err}
			}
			in, name, err := a.input(fileArgs(file))
			if err != nil {
				return err
			}
			defer in.Close()
			lines, raws, err := readMessageLines(in, format)
			if err != nil {
				return fmt.Errorf("%s: nothing was stored:\n%w", name, err)
			}
			if len(raws) == 0 {
				return fmt.Errorf("%s: no messages", name)
			}
			ops, err := a.windowOps(cmd, w, true, true, false)
			if err != nil {
				return err
			}
			out, text, err := ops.WindowAppend(cmd.Context(), api.WindowAppendIn{Format: format, Messages: raws, Key: key})
			var me *api.MessageError
			if errors.As(err, &me) && me.Index < len(lines) {
				return fmt.Errorf("%s: nothing was stored: line %d: %w", name, lines[me.Index], me.Err)
			}
			if err != nil {
				return fmt.Errorf("%s: nothing was stored: %w", name, err)
			}
			return a.printOp(jsonOut, out, text)
		},
	}
	w.add(cmd)
	f := cmd.Flags()
	f.StringVar(&file, "file", "", "read the messages from this file (default standard input)")
	f.StringVar(&format, "format", "engram", "how the messages are written: engram, anthropic or openai")
	f.StringVar(&key, "key", "", "this append's own key (printable ASCII, at most 255 bytes): run again with it, the messages are not appended twice")
	f.BoolVar(&jsonOut, "json", false, "print the result as JSON: the window, the messages' positions, what was evicted")
	return cmd
}

func fileArgs(file string) []string {
	if file == "" {
		return nil
	}
	return []string{file}
}

// maxLineErrors bounds the bad lines reported before reading stops.
const maxLineErrors = engine.MaxLineErrors

// readMessageLines reads the messages of an append, one a line, and
// checks each as the append will, so that every bad line is reported by
// its number before anything is stored. It returns each message's line
// number and its JSON.
func readMessageLines(r io.Reader, format string) ([]int, []json.RawMessage, error) {
	var (
		nums []int
		raws []json.RawMessage
		errs []error
	)
	err := eachJSONLine(r, api.MaxMessageBytes, func(n int, line []byte, lerr error) bool {
		if lerr == nil {
			if _, lerr = api.DecodeMessage(format, line); lerr == nil {
				nums, raws = append(nums, n), append(raws, json.RawMessage(line))
			}
		}
		if lerr != nil {
			errs = append(errs, fmt.Errorf("line %d: %w", n, lerr))
		}
		if len(errs) >= maxLineErrors {
			errs = append(errs, fmt.Errorf("stopped after %d errors", len(errs)))
			return false
		}
		return true
	})
	if err != nil {
		return nil, nil, err
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	return nums, raws, nil
}

// eachJSONLine calls fn with each non-blank line of r, numbered from 1,
// without its line break; a line over max bytes is not read into memory
// but given as an error. fn returns false to stop.
func eachJSONLine(r io.Reader, max int, fn func(n int, line []byte, err error) bool) error {
	br := bufio.NewReaderSize(r, 1<<16)
	for n := 1; ; n++ {
		var (
			line []byte
			long bool
		)
		for {
			chunk, err := br.ReadSlice('\n')
			if !long {
				if len(line)+len(chunk) > max+2 { // the line break may be \r\n
					long, line = true, nil
				} else {
					line = append(line, chunk...)
				}
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return fmt.Errorf("read line %d: %w", n, err)
			}
			if errors.Is(err, io.EOF) && len(chunk) == 0 && len(line) == 0 && !long {
				return nil
			}
			break
		}
		var lerr error
		if long {
			lerr = fmt.Errorf("longer than %d bytes (8 MiB), the most a message may take", max)
		}
		line = bytes.TrimRight(line, "\r\n")
		if long || len(bytes.TrimSpace(line)) > 0 {
			if !fn(n, line, lerr) {
				return nil
			}
		}
	}
}

func (a *app) windowStatusCmd() *cobra.Command {
	var (
		w       windowFlags
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Where a window stands: its budget, use, thresholds and references, and its latest turn",
		Long: `Where a window stands: the tokens it holds of its budget, where it evicts
and down to where, the messages in it and those evicted under reference
markers. Once a turn was assembled, its report too: each layer's
allocation and use, the markers and evictions, and the tokens of the
conversation sent against its whole (from the turn's snapshot). Without
--agent, the session's only window.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ops, err := a.windowOps(cmd, w, true, false, true)
			if err != nil {
				return err
			}
			out, text, err := ops.WindowTurnStatus(cmd.Context(), api.WindowIn{Agent: ops.Agent})
			if err != nil {
				return err
			}
			return a.printOp(jsonOut, out, text)
		},
	}
	w.add(cmd)
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the window and its latest turn as JSON")
	return cmd
}

func (a *app) windowListCmd() *cobra.Command {
	var (
		session string
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "The windows of a session, or of every session",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ops, err := a.windowOps(cmd, windowFlags{}, false, false, true)
			if err != nil {
				return err
			}
			out, text, err := ops.WindowList(cmd.Context(), api.WindowListIn{Session: session})
			if err != nil {
				return err
			}
			return a.printOp(jsonOut, out, text)
		},
	}
	cmd.Flags().StringVar(&session, "session", "", "only this session's windows")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the windows as JSON")
	return cmd
}

func (a *app) windowAssembleCmd() *cobra.Command {
	var (
		w                                     windowFlags
		message, prefsFile, briefFile, format string
		retrieval                             string
		tools                                 int
		noRetrieval, noBriefing, jsonOut      bool
	)
	cmd := &cobra.Command{
		Use:   "assemble",
		Short: "A turn's context assembled to the window's budget, layer by layer",
		Long: `Assemble the context of a turn over a window: the messages to send, within
the window's budget less --tools (what the harness's tool definitions
take). The budget is negotiated among layers (seed 004's L0-L7): the
window's system prompt, standing instructions (--preferences-file), a
briefing (--briefing-file, else the archivalist's of the session unless
--no-briefing), the conversation compacted to its share (full, windowed,
compacted or multi-level, markers that expand for what it does not show
whole), an arc of the requests it no longer shows, engram's pre-fetch for
the message (--retrieval: auto runs it for a prompt and leaves it out of a
tool loop's step, where on the bench's agent runs it cost more than it
found; on runs it in steps too; off never), and the message itself, which
ends the context. --message is the turn's message; without it, the window's
newest message when it is a user's prompt, or in a tool loop the newest
call with its results. Prints the messages and how each layer's share
went; --json writes the messages in --format.`,
		Example: `  engram window assemble --session s1 --agent claude --message "why does the upload time out?"
  engram window assemble --session s1 --agent claude --tools 2500 --json --format anthropic`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := api.ParseFormat(format); err != nil {
				return &usageError{err}
			}
			if tools < 0 {
				return usagef("--tools is %d; it must be 0 or more", tools)
			}
			if _, _, err := api.ParseRetrieval(retrieval, noRetrieval); err != nil {
				return &usageError{err}
			}
			if briefFile != "" && noBriefing {
				return usagef("--briefing-file and --no-briefing contradict each other: give the briefing, or leave it out")
			}
			in := api.WindowAssembleIn{Message: message, Tools: tools, Retrieval: retrieval, NoRetrieval: noRetrieval, NoBriefing: noBriefing, Format: format}
			for _, f := range []struct {
				path string
				to   *string
			}{{prefsFile, &in.Preferences}, {briefFile, &in.Briefing}} {
				if f.path == "" {
					continue
				}
				b, err := os.ReadFile(f.path)
				if err != nil {
					return err
				}
				*f.to = string(b)
			}
			ops, err := a.windowOps(cmd, w, true, false, true)
			if err != nil {
				return err
			}
			in.Agent = ops.Agent
			out, text, err := ops.WindowAssemble(cmd.Context(), in)
			// The summaries a model makes in the background are written
			// before the command exits.
			ops.Assembler.Wait()
			if err != nil {
				return err
			}
			return a.printOp(jsonOut, out, text)
		},
	}
	w.add(cmd)
	f := cmd.Flags()
	f.StringVar(&message, "message", "", "the turn's user message (default: the window's newest, a user's prompt)")
	f.IntVar(&tools, "tools", 0, "tokens the harness's tool definitions take beside the messages")
	f.StringVar(&prefsFile, "preferences-file", "", "standing instructions, from a file")
	f.StringVar(&briefFile, "briefing-file", "", "what is known of the session's subjects (engram briefing), from a file")
	f.StringVar(&retrieval, "retrieval", "auto", "when engram's pre-fetch runs: auto (for a prompt, not in a tool loop's step), on (in steps too) or off")
	f.BoolVar(&noRetrieval, "no-retrieval", false, "leave engram's pre-fetch out (--retrieval off)")
	f.BoolVar(&noBriefing, "no-briefing", false, "leave the archivalist's briefing of the session out")
	f.StringVar(&format, "format", "engram", "with --json, how messages are written: engram, anthropic or openai")
	f.BoolVar(&jsonOut, "json", false, "print the messages and the report as JSON")
	return cmd
}

func (a *app) windowContextCmd() *cobra.Command {
	var (
		w       windowFlags
		format  string
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "context",
		Short: "A window's context: its messages, and a marker for each evicted run",
		Long: `Print a window's context, in order: the messages in it, whole, and the
reference marker standing where each evicted run of messages stood. With
--json, the messages are written in --format (engram, anthropic or openai),
as a harness would send them.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ops, err := a.windowOps(cmd, w, true, false, true)
			if err != nil {
				return err
			}
			out, text, err := ops.WindowContext(cmd.Context(), api.WindowContextIn{Agent: ops.Agent, Format: format})
			if err != nil {
				return err
			}
			return a.printOp(jsonOut, out, text)
		},
	}
	w.add(cmd)
	cmd.Flags().StringVar(&format, "format", "engram", "with --json, how messages are written: engram, anthropic or openai")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the context as JSON")
	return cmd
}

func (a *app) windowHandoffCmd() *cobra.Command {
	var (
		w       windowFlags
		to      string
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "handoff",
		Short: "Hand an agent's window off to a new instance of the agent",
		Long: `Hand the window of an agent off to a new instance of it, as pipeline agents
do at 75 % of their budget (engineer, designer, inspector, tester,
orchestrator and guide: their status says "handoff due"; their windows
evict past 90 % only as a fallback). A structured state (task, progress,
files touched, decisions, open questions, next steps, blockers, and markers
that expand back to every message of the window) is built with no model
from the window and the archivalist's state of the session (its resume
point, files and decisions win where both speak), stored as a
handoff_state entry chained by index (1, then 2 for the next instance's
handoff, each naming the one before), and the next agent's window opens
with the same settings, the prior window's system prompt and the state,
pinned. The prior window stays as it is.

The next agent is --to, or the agent's name with -2 (engineer-2 hands off
to engineer-3). A next agent whose window exists is refused, nothing
written; so is a window with no messages. Without the archivalist's state
the state is the window's alone, and the output says so (fallback).`,
		Example: `  engram window handoff --session s1 --agent engineer
  engram window handoff --session s1 --agent engineer-2 --to reviewer --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ops, err := a.windowOps(cmd, w, true, true, true)
			if err != nil {
				return err
			}
			out, text, err := ops.WindowHandoff(cmd.Context(), api.WindowHandoffIn{To: to})
			if err != nil {
				return err
			}
			return a.printOp(jsonOut, out, text)
		},
	}
	w.add(cmd)
	cmd.Flags().StringVar(&to, "to", "", "the agent that takes over (default the agent's name with -2, or its number plus one)")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the state, its entry, and the new window as JSON")
	return cmd
}

func (a *app) windowReadmitCmd() *cobra.Command {
	var (
		w       windowFlags
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "readmit REF",
		Short: "Bring the messages a reference marker stands for back into its window",
		Long: `Bring the messages a window's reference stands for back into the window,
whole, in their places: the window evicts what its policy says to make room
(never them), and refuses, changing nothing, when they cannot fit in its
budget. The reference stays: its markers still expand, and a later eviction
may take the messages again. REF is the marker, whole ([CTX-REF:...],
quoted), its short form [CTX-REF:id], or the id; the window is the
reference's.`,
		Example: `  engram window readmit c3f9a2c1.2.9.d0b4e
  engram window readmit '[CTX-REF:c3f9a2c1.2.9.d0b4e]' --json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("window readmit takes one reference: a marker or its id")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ops, err := a.windowOps(cmd, w, false, false, true)
			if err != nil {
				return err
			}
			if w.session == "" && a.getenv("ENGRAM_SESSION") == "" {
				// The operator at a terminal readmits into the
				// reference's own window.
				if mk, err := ctxref.Parse(args[0]); err == nil {
					if ref, err := ops.Eng.Store().Reference(cmd.Context(), mk.ID); err == nil {
						ops.Session = func() string { return ref.SessionID }
					}
				}
			}
			out, text, err := ops.WindowReadmit(cmd.Context(), api.WindowReadmitIn{Session: w.session, Agent: w.agent, RefID: args[0]})
			if err != nil {
				return err
			}
			return a.printOp(jsonOut, out, text)
		},
	}
	cmd.Flags().StringVar(&w.session, "session", "", "the window's session (default the reference's; ENGRAM_SESSION)")
	cmd.Flags().StringVar(&w.agent, "agent", "", "the window's agent (default the reference's)")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the result as JSON")
	return cmd
}

func (a *app) windowExpandCmd() *cobra.Command {
	var (
		format  string
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "expand REF",
		Short: "The messages a reference marker stands for, byte for byte",
		Long: `Print the messages a window's reference stands for, byte for byte as they
were appended (secrets aside, which never enter the store), tool calls with
their results. REF is the marker, whole ([CTX-REF:...], quoted), its short
form [CTX-REF:id], or the id.`,
		Example: `  engram window expand c3f9a2c1.2.9.d0b4e
  engram window expand '[CTX-REF:conversation | 8 turns 2-9 (1,204 tokens) @ ... | retrieve_context(ref_id="c3f9a2c1.2.9.d0b4e")]' --json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("window expand takes one reference: a marker or its id")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ops, err := a.windowOps(cmd, windowFlags{}, false, false, true)
			if err != nil {
				return err
			}
			out, text, err := ops.WindowExpand(cmd.Context(), api.ExpandIn{RefID: args[0], Format: format})
			if err != nil {
				return err
			}
			return a.printOp(jsonOut, out, text)
		},
	}
	cmd.Flags().StringVar(&format, "format", "engram", "with --json, how messages are written: engram, anthropic or openai")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the messages as JSON")
	return cmd
}

func (a *app) windowSnapshotsCmd() *cobra.Command {
	var (
		w       windowFlags
		limit   int
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "snapshots",
		Short: "A window's assembled turns, newest first",
		Long: `List the turns assembled over a window (engram window assemble, the JSON
API's assemble), newest first: each is kept as a snapshot of the exact
messages sent, named by the SHA-256 of them in engram's format (turns that
sent the same messages share it) and numbered in the window. A window
keeps its newest 200. Without --agent, the session's only window.`,
		Example: `  engram window snapshots --session s1 --agent claude --limit 5`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ops, err := a.windowOps(cmd, w, true, false, true)
			if err != nil {
				return err
			}
			out, text, err := ops.WindowSnapshots(cmd.Context(), api.SnapshotsIn{Agent: ops.Agent, Limit: limit})
			if err != nil {
				return err
			}
			return a.printOp(jsonOut, out, text)
		},
	}
	w.add(cmd)
	cmd.Flags().IntVar(&limit, "limit", 0, "most snapshots, 1-1000 (default 20)")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the snapshots as JSON")
	return cmd
}

func (a *app) windowSnapshotCmd() *cobra.Command {
	var (
		w       windowFlags
		format  string
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "snapshot [SNAPSHOT]",
		Short: "An assembled turn: its messages, exactly as sent, and its report",
		Long: `Print an assembled turn of a window: the messages sent, and how each
layer's share went. SNAPSHOT is a hash, a prefix of one (8 hex digits or
more), the turn's number in the window (engram window snapshots), or
latest, the default. With --json, the messages in --format and the
report as the assembly gave it.`,
		Example: `  engram window snapshot --session s1 --agent claude
  engram window snapshot 3f9a2c1d --session s1 --agent claude --json --format anthropic`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("window snapshot takes one snapshot: a hash, a prefix, a number or latest")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := api.ParseFormat(format); err != nil {
				return &usageError{err}
			}
			ops, err := a.windowOps(cmd, w, true, false, true)
			if err != nil {
				return err
			}
			in := api.SnapshotIn{Agent: ops.Agent, Format: format}
			if len(args) == 1 {
				in.Snapshot = args[0]
			}
			out, text, err := ops.WindowSnapshot(cmd.Context(), in)
			if err != nil {
				return err
			}
			return a.printOp(jsonOut, out, text)
		},
	}
	w.add(cmd)
	cmd.Flags().StringVar(&format, "format", "engram", "with --json, how messages are written: engram, anthropic or openai")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the snapshot as JSON")
	return cmd
}

func (a *app) windowDiffCmd() *cobra.Command {
	var (
		w       windowFlags
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "diff FROM [TO]",
		Short: "Two assembled turns compared: their contexts line by line, tokens and layers",
		Long: `Compare two assembled turns of a window: a unified diff of their contexts
as text (each message a block under its place, role and tokens, as engram
window snapshot prints it), then how the tokens, the budget and each
layer's allocation and use changed. FROM and TO are as engram window
snapshot takes them (a hash, a prefix of 8 hex digits or more, a number,
latest); TO is latest by default.`,
		Example: `  engram window diff 3 --session s1 --agent claude
  engram window diff 3f9a2c1d 7be04a9c --session s1 --agent claude --json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usagef("window diff takes one or two snapshots: FROM, and TO (default latest)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ops, err := a.windowOps(cmd, w, true, false, true)
			if err != nil {
				return err
			}
			in := api.SnapshotDiffIn{Agent: ops.Agent, From: args[0]}
			if len(args) == 2 {
				in.To = args[1]
			}
			out, text, err := ops.WindowSnapshotDiff(cmd.Context(), in)
			if err != nil {
				return err
			}
			return a.printOp(jsonOut, out, text)
		},
	}
	w.add(cmd)
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the comparison as JSON")
	return cmd
}
