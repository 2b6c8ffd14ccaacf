package main

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/api"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/trajectory"
	"github.com/engramhq/engram/internal/window"
)

// The input formats of engram window replay, besides the message formats
// of an append (engram, anthropic, openai).
const (
	replayAdd          = "add"
	replayTrajectories = "trajectories"
)

func (a *app) windowReplayCmd() *cobra.Command {
	var o replayOptions
	cmd := &cobra.Command{
		Use:   "replay FILE",
		Short: "Feed a conversation through a real window, turn by turn, and check that every reference expands back",
		Long: `Feed the conversation of FILE through a real context window, one turn at a
time (a turn is a user's prompt and what follows it up to the next), and
print after each turn the window's context size, what it evicted and the
markers it left; then expand every reference the window made and check
that it gives back the messages it stands for, byte for byte.

FILE is JSON Lines (or gzip of it) in one of these --format's:

  add           engram add's records: each session (and agent) is a
                window; a tool_call's msg_id pairs it with the tool_result
                whose parent names it
  trajectories  the shared bench's agent runs (trajectories.jsonl.gz, one
                run a line): each run is a window; --run picks some
  engram, anthropic, openai
                one message a line, as engram window append takes them:
                one window

By default the format is told from the first line (add or trajectories).
--budget is what the window may hold, in tokens (its reservations and
margin are set so that its budget is exactly that); --model counts tokens
with that model's tokenizer, --role picks the eviction policy. The windows
live in a temporary store unless --store names one.

Exit status 1 when a reference does not expand back byte for byte.`,
		Example: `  engram window replay examples/session.jsonl --budget 1500
  engram window replay ../shared/bench/trajectories/trajectories.jsonl.gz --budget 8000 --run astropy__astropy-12907
  engram window replay chat.jsonl --format openai --budget 16000 --model gpt-4o --json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("window replay takes one file")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.budget <= 0 {
				return usagef("window replay needs --budget, the tokens the window may hold (more than 0)")
			}
			switch o.format {
			case "", replayAdd, replayTrajectories, api.FormatEngram, api.FormatAnthropic, api.FormatOpenAI:
			default:
				return usagef("--format %q: want add, trajectories, engram, anthropic or openai", o.format)
			}
			return a.replay(cmd.Context(), args[0], o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.budget, "budget", 0, "the tokens the window may hold (required)")
	f.StringVar(&o.model, "model", "", "count tokens as this model does (default o200k_base)")
	f.StringVar(&o.role, "role", "", "the agent's role, which picks the eviction policy (default: recency at 75 %)")
	f.StringVar(&o.format, "format", "", "the input: add, trajectories, engram, anthropic or openai (default: told from the first line)")
	f.StringSliceVar(&o.runs, "run", nil, "with trajectories, replay only these runs (repeatable)")
	f.BoolVar(&o.jsonOut, "json", false, "print the replay as JSON")
	return cmd
}

type replayOptions struct {
	budget      int
	model, role string
	format      string
	runs        []string
	jsonOut     bool
}

// replayConv is one conversation of a replay, to go through one window:
// its messages in turns, with the line each came from.
type replayConv struct {
	key   store.WindowKey
	turns [][]replayMsg
}

type replayMsg struct {
	line int
	msg  window.Message
}

// replayTurn is what a turn did to its window.
type replayTurn struct {
	Turn     int          `json:"turn"`
	Line     int          `json:"line"`
	Messages int          `json:"messages"`
	Used     int          `json:"used"`
	Budget   int          `json:"budget"`
	InWindow int          `json:"in_window"`
	Refs     int          `json:"refs"`
	Evicted  []window.Ref `json:"evicted"`
}

// replayCheck is the check of a window's references: how many were
// expanded, and the messages and bytes compared (each message once,
// though a reference a later run joined and the joined one both hold it).
type replayCheck struct {
	Refs     int `json:"refs"`
	Messages int `json:"messages"`
	Bytes    int `json:"bytes"`
	// Redacted are messages whose secrets were redacted before they were
	// stored: they come back redacted, and are not compared.
	Redacted   int      `json:"redacted"`
	Mismatches []string `json:"mismatches"`
}

type replayWindow struct {
	Session    string       `json:"session"`
	Agent      string       `json:"agent"`
	Strategy   string       `json:"strategy"`
	EvictAt    int          `json:"evict_at"`
	Target     int          `json:"target"`
	Turns      []replayTurn `json:"turns"`
	MaxUsed    int          `json:"max_used"`
	OverBudget int          `json:"over_budget"`
	Check      replayCheck  `json:"check"`
}

type replayReport struct {
	File     string         `json:"file"`
	Format   string         `json:"format"`
	Budget   int            `json:"budget"`
	Model    string         `json:"model,omitempty"`
	Encoding string         `json:"encoding"`
	Role     string         `json:"role"`
	Windows  []replayWindow `json:"windows"`
	// Totals over the windows.
	Turns      int  `json:"turns"`
	OverBudget int  `json:"over_budget"`
	Refs       int  `json:"refs"`
	Messages   int  `json:"messages_checked"`
	Bytes      int  `json:"bytes_checked"`
	Mismatches int  `json:"mismatches"`
	OK         bool `json:"ok"`
}

func (a *app) replay(ctx context.Context, file string, o replayOptions) error {
	cat, err := a.cfg.Catalog()
	if err != nil {
		return err
	}
	// The margin the window will keep: the configured one, but for a
	// model whose tokenizer engram counts exactly.
	margin := cmp.Or(a.cfg.Window.Margin, window.DefaultMargin)
	encoding := tokens.O200kBase
	if o.model != "" {
		m, ok := cat.Lookup(o.model)
		if !ok {
			return usagef("--model %q: engram does not know it (engram models lists those it knows)", o.model)
		}
		encoding = m.Encoding
		if m.Exact {
			margin = 0
		}
	}
	eng, done, err := a.replayEngine(ctx)
	if err != nil {
		return err
	}
	defer done()
	if o.format == "" {
		if o.format, err = sniffReplay(file); err != nil {
			return err
		}
	}
	convs, err := readReplay(ctx, eng, file, o)
	if err != nil {
		return err
	}
	if len(convs) == 0 {
		return fmt.Errorf("%s: no messages", file)
	}
	m, err := a.windowManager(eng)
	if err != nil {
		return err
	}
	rep := replayReport{File: file, Format: o.format, Budget: o.budget, Model: o.model, Encoding: encoding, Role: o.role, Windows: []replayWindow{}}
	start := time.Now()
	progress := newProgress(a.stderr, "replaying", int64(len(convs)))
	shown := false
	var w *tabwriter.Writer
	if !o.jsonOut {
		w = tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(a.stdout, "replay of %s (%s): %s, budget %s tokens (%s)\n", file, o.format, plural(len(convs), "window"), commas(int64(o.budget)), encoding)
	}
	for i, c := range convs {
		if err := ctx.Err(); err != nil {
			return err
		}
		rw, err := replayConversation(ctx, eng, m, c, o, limitFor(o.budget, margin))
		if err != nil {
			return err
		}
		rep.Windows = append(rep.Windows, rw)
		rep.Turns += len(rw.Turns)
		rep.OverBudget += rw.OverBudget
		rep.Refs += rw.Check.Refs
		rep.Messages += rw.Check.Messages
		rep.Bytes += rw.Check.Bytes
		rep.Mismatches += len(rw.Check.Mismatches)
		if w != nil {
			printReplayWindow(a.stdout, w, rw)
		}
		if len(convs) > 1 && time.Since(start) > 3*time.Second {
			progress.update(int64(i + 1))
			shown = true
		}
	}
	if shown {
		progress.done(fmt.Sprintf("%d windows in %v", len(convs), time.Since(start).Round(100*time.Millisecond)))
	}
	rep.OK = rep.Mismatches == 0
	if o.jsonOut {
		if err := writeJSON(a.stdout, rep); err != nil {
			return err
		}
	} else {
		printReplaySummary(a.stdout, rep)
	}
	if !rep.OK {
		return fmt.Errorf("%d of %d references did not expand back byte for byte", rep.Mismatches, rep.Refs)
	}
	return nil
}

// replayEngine returns the engine a replay writes to: the store --store
// names, or a temporary one.
func (a *app) replayEngine(ctx context.Context) (*engine.Engine, func(), error) {
	if a.flags.Store != "" {
		eng, err := a.engine(ctx, false)
		return eng, func() {}, err
	}
	_, eng, done, err := scratchStore(ctx, "", "replay.db")
	return eng, done, err
}

// limitFor returns the context limit at which a window with one token
// reserved for output and one of safety, less margin, holds exactly budget
// tokens.
func limitFor(budget int, margin float64) int {
	l := window.Limits{Context: int(float64(budget)/(1-margin)) + 2, Output: 1, Safety: 1, Margin: margin}
	for l.Context > 3 && l.Budget() >= budget {
		l.Context--
	}
	for l.Budget() < budget {
		l.Context++
	}
	return l.Context
}

// sniffReplay tells a replay's input format from its first lines: a run
// of the trajectories has instance_id and messages; messages (a role with
// blocks, a list of content or tool calls, and none of the fields only
// engram add's records have) are one of the message formats, which the
// caller must name, they being too alike to tell apart; anything else is
// taken as engram add's records.
func sniffReplay(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	r, err := maybeGzip(f)
	if err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	format := replayAdd
	messages, records := false, false
	err = eachJSONLine(r, 1<<30, func(n int, line []byte, _ error) bool {
		var obj map[string]json.RawMessage
		if json.Unmarshal(line, &obj) != nil {
			return n < 50
		}
		if _, id := obj["instance_id"]; id && n == 1 {
			if _, msgs := obj["messages"]; msgs {
				format = replayTrajectories
				return false
			}
		}
		for _, k := range []string{"session", "agent", "agent_type", "msg_id", "parent", "turn", "content_base64"} {
			if _, ok := obj[k]; ok {
				records = true
			}
		}
		// add's type is a content type; an OpenAI Responses item's is not.
		var typ string
		if json.Unmarshal(obj["type"], &typ) == nil && store.ContentType(typ).Valid() {
			records = true
		}
		_, role := obj["role"]
		_, blocks := obj["blocks"]
		_, calls := obj["tool_calls"]
		_, callID := obj["tool_call_id"]
		content := bytes.TrimSpace(obj["content"])
		if role && (blocks || calls || callID || len(content) > 0 && content[0] == '[') {
			messages = true
		}
		return n < 50 && !records
	})
	if err == nil && format == replayAdd && messages && !records {
		return "", usagef("%s holds messages (a role with blocks, a list of content or tool calls), not engram add's records: give --format engram, anthropic or openai", file)
	}
	return format, err
}

// maybeGzip returns r decompressed when it is gzip.
func maybeGzip(r io.Reader) (io.Reader, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		return gzip.NewReader(br)
	}
	return br, nil
}

// readReplay reads a replay's conversations.
func readReplay(ctx context.Context, eng *engine.Engine, file string, o replayOptions) ([]replayConv, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	switch o.format {
	case replayTrajectories:
		return readTrajectories(f, file, o.runs)
	case replayAdd:
		r, err := maybeGzip(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		return readAddRecords(eng, r, file)
	}
	r, err := maybeGzip(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	lines, raws, err := readMessageLines(r, o.format)
	if err != nil {
		return nil, fmt.Errorf("%s:\n%w", file, err)
	}
	var msgs []replayMsg
	for i, raw := range raws {
		m, err := api.DecodeMessage(o.format, raw)
		if err != nil {
			return nil, fmt.Errorf("%s: line %d: %w", file, lines[i], err)
		}
		msgs = append(msgs, replayMsg{line: lines[i], msg: m})
	}
	name := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	return []replayConv{{key: store.WindowKey{SessionID: "replay-" + name, AgentID: "replay"}, turns: splitTurns(msgs)}}, nil
}

// readTrajectories reads the runs of the shared bench's trajectories:
// each a window, appended a step at a time (see splitSteps).
func readTrajectories(r io.Reader, file string, only []string) ([]replayConv, error) {
	runs, err := trajectory.ReadRuns(r, file, nil)
	if err != nil {
		return nil, err
	}
	var convs []replayConv
	found := map[string]bool{}
	for _, run := range runs {
		if len(only) > 0 && !slices.Contains(only, run.ID) {
			continue
		}
		found[run.ID] = true
		// As the bench's replay maps them: each action a tool call, its
		// observation the call's result, the task pinned.
		wms, err := trajectory.WindowMessages(run.Messages)
		if err != nil {
			return nil, fmt.Errorf("%s: run %s: %w", file, run.ID, err)
		}
		msgs := make([]replayMsg, len(wms))
		for i, m := range wms {
			msgs[i] = replayMsg{line: i, msg: m}
		}
		convs = append(convs, replayConv{key: store.WindowKey{SessionID: run.ID, AgentID: "agent"}, turns: splitSteps(msgs)})
	}
	for _, id := range only {
		if !found[id] {
			return nil, fmt.Errorf("%s: no run %q", file, id)
		}
	}
	return convs, nil
}

// readAddRecords reads engram add's records as the messages of windows,
// one per session and agent: a tool_call is a call (its msg_id its id, or
// one made from its line), a tool_result with a parent its result.
func readAddRecords(eng *engine.Engine, r io.Reader, file string) ([]replayConv, error) {
	lines, err := eng.ReadJSONL(r, engine.Record{Session: "replay", Agent: "replay"})
	if err != nil {
		return nil, fmt.Errorf("%s:\n%w", file, err)
	}
	var (
		order []store.WindowKey
		byKey = map[store.WindowKey][]replayMsg{}
		calls = map[store.WindowKey]map[string]callState{}
		errs  []error
	)
	for _, l := range lines {
		k := store.WindowKey{SessionID: l.Session, AgentID: l.Agent}
		if _, ok := byKey[k]; !ok {
			order = append(order, k)
			calls[k] = map[string]callState{}
		}
		m, err := recordMessage(l, calls[k])
		if err != nil {
			errs = append(errs, &engine.LineError{Line: l.N, Err: err})
			continue
		}
		byKey[k] = append(byKey[k], replayMsg{line: l.N, msg: m})
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s:\n%w", file, errors.Join(errs...))
	}
	convs := make([]replayConv, len(order))
	for i, k := range order {
		convs[i] = replayConv{key: k, turns: splitTurns(byKey[k])}
	}
	return convs, nil
}

// callState is how far a tool call of a replay has gone.
type callState int

const (
	callNone callState = iota
	callMade
	callAnswered
)

// recordMessage is the window message of a record of engram add; calls
// holds the calls made so far in its window, by id.
func recordMessage(l engine.Line, calls map[string]callState) (window.Message, error) {
	text := func(role window.Role) window.Message {
		return window.Message{Role: role, Blocks: []window.Block{{Type: window.BlockText, Text: string(l.Content)}}}
	}
	switch l.Type {
	case store.UserPrompt:
		return text(window.RoleUser), nil
	case store.Note:
		return text(window.RoleSystem), nil
	case store.AgentResponse, store.AgentMessage, store.PlanWorkflow, store.HandoffState, store.Checkpoint:
		return text(window.RoleAssistant), nil
	case store.ToolCall:
		id := l.MsgID
		if id == "" {
			id = "line-" + strconv.Itoa(l.N)
		}
		if calls[id] != callNone {
			return window.Message{}, fmt.Errorf("a second tool_call with msg_id %q", id)
		}
		calls[id] = callMade
		input := json.RawMessage(l.Content)
		name := "tool"
		var args map[string]json.RawMessage
		if json.Unmarshal(input, &args) == nil {
			var s string
			if json.Unmarshal(args["tool"], &s) == nil && s != "" {
				name = s
			}
		} else if !json.Valid(input) {
			// A call written as text: its input is that text, as JSON.
			input, _ = json.Marshal(string(l.Content))
		}
		return window.Message{Role: window.RoleAssistant, Blocks: []window.Block{{Type: window.BlockToolUse, ID: id, Name: name, Input: input}}}, nil
	case store.ToolResult:
		if l.Parent == "" {
			return text(window.RoleTool), nil
		}
		switch calls[l.Parent] {
		case callAnswered:
			return window.Message{}, fmt.Errorf("a second tool_result for the tool_call %q", l.Parent)
		case callNone:
			return window.Message{}, fmt.Errorf("a tool_result whose parent %q is no earlier tool_call's msg_id in session %s", l.Parent, l.Session)
		}
		calls[l.Parent] = callAnswered
		return window.Message{Role: window.RoleTool, Blocks: []window.Block{{Type: window.BlockToolResult, ToolUseID: l.Parent, Text: string(l.Content)}}}, nil
	}
	// What the agent read: files, pages, test output, findings.
	return text(window.RoleTool), nil
}

// splitTurns cuts a conversation into turns: a user's prompt opens one
// (a system prompt before it joins it).
// splitSteps splits an agent's run into the appends its harness makes:
// the system prompt and the task, then each step (an action and its
// observation) on its own. A run is one user turn of many steps, so
// splitTurns would append it whole.
func splitSteps(msgs []replayMsg) [][]replayMsg {
	var steps [][]replayMsg
	for i, m := range msgs {
		if i == 0 || m.msg.Role == window.RoleAssistant && i > 1 {
			steps = append(steps, nil)
		}
		steps[len(steps)-1] = append(steps[len(steps)-1], m)
	}
	return steps
}

func splitTurns(msgs []replayMsg) [][]replayMsg {
	var turns [][]replayMsg
	var cur []replayMsg
	onlySystem := true
	for _, m := range msgs {
		opens := m.msg.Role == window.RoleUser && len(m.msg.Results()) == 0
		if opens && len(cur) > 0 && !onlySystem {
			turns = append(turns, cur)
			cur, onlySystem = nil, true
		}
		cur = append(cur, m)
		onlySystem = onlySystem && m.msg.Role == window.RoleSystem
	}
	if len(cur) > 0 {
		turns = append(turns, cur)
	}
	return turns
}

// replayConversation feeds a conversation through a new window, turn by
// turn, then expands every reference it made and compares.
func replayConversation(ctx context.Context, eng *engine.Engine, m *window.Manager, c replayConv, o replayOptions, limit int) (replayWindow, error) {
	if _, err := eng.Store().Window(ctx, c.key); err == nil {
		return replayWindow{}, fmt.Errorf("window %s is in the store already: replay into a new store (leave out --store)", c.key)
	}
	st, err := m.Open(ctx, c.key, window.OpenOptions{Role: o.role, Model: o.model, Limit: limit, Output: 1, Safety: 1})
	if err != nil {
		return replayWindow{}, fmt.Errorf("window %s: %w", c.key, err)
	}
	if st.Budget != o.budget {
		return replayWindow{}, fmt.Errorf("window %s: a budget of %d tokens, not %d", c.key, st.Budget, o.budget)
	}
	rw := replayWindow{Session: c.key.SessionID, Agent: c.key.AgentID, Strategy: string(st.Settings.Policy.Strategy),
		EvictAt: st.EvictAt, Target: st.Target, Turns: []replayTurn{}, Check: replayCheck{Mismatches: []string{}}}
	orig := map[int]window.Message{}
	redacted := map[int]bool{}
	var refs []window.Ref
	for i, turn := range c.turns {
		msgs := make([]window.Message, len(turn))
		for j, t := range turn {
			msgs[j] = t.msg
		}
		res, err := m.Append(ctx, c.key, msgs)
		if err != nil {
			line := turn[0].line
			var me *api.MessageError
			if errors.As(api.WindowError(err, msgs), &me) {
				line = turn[me.Index].line
			}
			return replayWindow{}, fmt.Errorf("window %s: turn %d (line %d): %w", c.key, i+1, line, err)
		}
		for j, p := range res.Positions {
			orig[p] = msgs[j]
			if j < len(res.Redacted) && len(res.Redacted[j]) > 0 {
				redacted[p] = true
			}
		}
		refs = append(refs, res.Evicted...)
		rw.Turns = append(rw.Turns, replayTurn{Turn: i + 1, Line: turn[0].line, Messages: len(msgs), Used: res.Used, Budget: res.Budget,
			InWindow: res.Messages, Refs: res.Refs, Evicted: res.Evicted})
		rw.MaxUsed = max(rw.MaxUsed, res.Used)
		if res.Used > res.Budget {
			rw.OverBudget++
		}
	}
	// A reference that a later run joined still expands: both are
	// checked, each message and its bytes counted once.
	checked := map[int]bool{}
	for _, ref := range refs {
		got, err := m.Expand(ctx, ref.ID)
		if err != nil {
			return replayWindow{}, fmt.Errorf("window %s: expand %s: %w", c.key, ref.ID, err)
		}
		rw.Check.Refs++
		if len(got) != ref.To-ref.From {
			rw.Check.Mismatches = append(rw.Check.Mismatches, fmt.Sprintf("%s: %d messages, not the %d of %d-%d", ref.ID, len(got), ref.To-ref.From, ref.From, ref.To-1))
			continue
		}
		for k, g := range got {
			pos := ref.From + k
			want, ok := orig[pos]
			switch {
			case !ok:
				rw.Check.Mismatches = append(rw.Check.Mismatches, fmt.Sprintf("%s: message %d was not appended by this replay", ref.ID, pos))
			case redacted[pos]:
				if !checked[pos] {
					rw.Check.Redacted++
				}
				checked[pos] = true
			default:
				n, same := sameMessage(want, g)
				if !checked[pos] {
					rw.Check.Messages++
					rw.Check.Bytes += n
				}
				checked[pos] = true
				if !same {
					rw.Check.Mismatches = append(rw.Check.Mismatches, fmt.Sprintf("%s: message %d differs from what was appended", ref.ID, pos))
				}
			}
		}
	}
	// Where it evicts, as it stands after the replay: the thresholds are
	// shares of the room above what it never evicts (a system prompt).
	if end, err := m.Status(ctx, c.key); err == nil {
		rw.EvictAt, rw.Target = end.EvictAt, end.Target
	} else {
		return rw, err
	}
	return rw, nil
}

// sameMessage compares a message as appended with the same message
// expanded: role, pin, shape and every block, content byte for byte. It
// returns the bytes of content compared.
func sameMessage(a, b window.Message) (int, bool) {
	n := 0
	same := a.Role == b.Role && a.Pinned == b.Pinned && len(a.Blocks) == len(b.Blocks) && sameShape(a.Shape, b.Shape)
	for i := range min(len(a.Blocks), len(b.Blocks)) {
		x, y := a.Blocks[i], b.Blocks[i]
		n += len(x.Text) + len(x.Input) + len(x.Raw)
		same = same && x.Type == y.Type && x.ID == y.ID && x.ToolUseID == y.ToolUseID && x.Name == y.Name && x.IsError == y.IsError &&
			x.Text == y.Text && bytes.Equal(x.Input, y.Input) && bytes.Equal(x.Raw, y.Raw)
	}
	return n, same
}

func sameShape(a, b *window.Shape) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	if a.Vendor != b.Vendor || a.Plain != b.Plain || a.Null != b.Null || a.Developer != b.Developer ||
		a.Item != b.Item || a.NoType != b.NoType || len(a.Parts) != len(b.Parts) || !sameFields(a.Extra, b.Extra) {
		return false
	}
	for i := range a.Parts {
		if a.Parts[i].Type != b.Parts[i].Type || !sameFields(a.Parts[i].Extra, b.Parts[i].Extra) {
			return false
		}
	}
	return true
}

func sameFields(a, b map[string]json.RawMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func printReplayWindow(out io.Writer, w *tabwriter.Writer, rw replayWindow) {
	fmt.Fprintf(out, "\nwindow %s/%s: strategy %s, evicts at %s tokens down to %s\n", rw.Session, rw.Agent, rw.Strategy,
		commas(int64(rw.EvictAt)), commas(int64(rw.Target)))
	fmt.Fprintln(w, "turn\tfrom\tmessages\tcontext\tof budget\tin window\trefs\t  evicted")
	var markers []string
	for _, t := range rw.Turns {
		over := ""
		if t.Used > t.Budget {
			over = " OVER"
		}
		var ev []string
		for _, r := range t.Evicted {
			ev = append(ev, fmt.Sprintf("%s (%d-%d, %s tokens) as %s", plural(r.Messages, "message"), r.From, r.To-1, commas(int64(r.Tokens)), r.ID))
			markers = append(markers, r.Marker)
		}
		fmt.Fprintf(w, "%d\t%d\t%d\t%s\t%d%%%s\t%d\t%d\t  %s\n", t.Turn, t.Line, t.Messages, commas(int64(t.Used)),
			100*t.Used/max(t.Budget, 1), over, t.InWindow, t.Refs, strings.Join(ev, "; "))
	}
	_ = w.Flush()
	if len(markers) > 0 {
		fmt.Fprintf(out, "markers:\n  %s\n", strings.Join(markers, "\n  "))
	}
	c := rw.Check
	switch {
	case len(c.Mismatches) > 0:
		fmt.Fprintf(out, "%d of %d references did NOT expand back byte for byte:\n  %s\n", len(c.Mismatches), c.Refs, strings.Join(c.Mismatches, "\n  "))
	case c.Refs == 0:
		fmt.Fprintln(out, "nothing was evicted")
	default:
		fmt.Fprintf(out, "%s, each expands back byte for byte: %s, %s bytes%s\n", plural(c.Refs, "reference"), plural(c.Messages, "message"), commas(int64(c.Bytes)), redactedNote(c.Redacted))
	}
}

func redactedNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d messages with secrets redacted before storing, not compared)", n)
}

func printReplaySummary(out io.Writer, rep replayReport) {
	fmt.Fprintf(out, "\n%s, %s: ", plural(len(rep.Windows), "window"), plural(rep.Turns, "turn"))
	if rep.OK {
		fmt.Fprintf(out, "%s, each expands back byte for byte (%s, %s bytes)\n", plural(rep.Refs, "reference"), plural(rep.Messages, "message"), commas(int64(rep.Bytes)))
	} else {
		fmt.Fprintf(out, "%d of %d references did NOT expand back byte for byte\n", rep.Mismatches, rep.Refs)
	}
	if rep.OverBudget > 0 {
		fmt.Fprintf(out, "%d turns left a window over its budget of %s tokens\n", rep.OverBudget, commas(int64(rep.Budget)))
	}
}

// plural says n things, in the plural unless there is one.
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return commas(int64(n)) + " " + thing + "s"
}
