package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/engramhq/engram/internal/assemble"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/window"
)

// WindowAssembleIn asks for a turn's context, assembled to the window's
// budget.
type WindowAssembleIn struct {
	Session string `json:"session,omitempty" jsonschema:"the session (default yours)"`
	Agent   string `json:"agent,omitempty" jsonschema:"the agent (default you, or the session's only window)"`
	// Message is the turn's user message; empty, the window's newest
	// message when it is a user's prompt.
	Message string `json:"message,omitempty" jsonschema:"the turn's user message (default: the window's newest, a user's prompt)"`
	// Tools is what the harness's tool definitions take, in tokens.
	Tools int `json:"tools,omitempty" jsonschema:"tokens of the tool definitions sent beside the messages"`
	// Preferences and Briefing fill the standing-instructions and topic
	// layers.
	Preferences string `json:"preferences,omitempty"`
	Briefing    string `json:"briefing,omitempty"`
	// Retrieval is when engram's pre-fetch runs: auto (the default) for
	// a prompt and not in a tool loop's step, where on the bench's agent
	// runs it cost more than it found; on, in steps too; off, never.
	// NoRetrieval is off, as before Retrieval was. NoBriefing leaves out
	// the archivalist's briefing of the session, fetched when Briefing is
	// empty.
	Retrieval   string `json:"retrieval,omitempty" jsonschema:"auto (default: for a prompt, not in a tool loop's step), on or off"`
	NoRetrieval bool   `json:"no_retrieval,omitempty"`
	NoBriefing  bool   `json:"no_briefing,omitempty"`
	Format      string `json:"format,omitempty" jsonschema:"engram (default), anthropic or openai"`
}

// LayerOut is what one layer of an assembled context asked for and got.
type LayerOut struct {
	Name      string `json:"name"`
	Min       int    `json:"min"`
	Ideal     int    `json:"ideal"`
	Max       int    `json:"max"`
	Priority  int    `json:"priority"`
	Allocated int    `json:"allocated"`
	Used      int    `json:"used"`
	Dropped   bool   `json:"dropped,omitempty"`
}

// AssembleOut is a turn's context: the messages to send, in order, and
// how the budget went.
type AssembleOut struct {
	// Snapshot is the hash the turn is kept under (engram window
	// snapshot): the SHA-256 of its messages in engram's format.
	Snapshot string `json:"snapshot"`

	Window   WindowOut         `json:"window"`
	Format   string            `json:"format"`
	Messages []json.RawMessage `json:"messages"`
	Budget   int               `json:"budget"`
	Tokens   int               `json:"tokens"`
	Layers   []LayerOut        `json:"layers"`
	// Briefing says where the topics layer came from: "request", the
	// archivalist's tier, or why there was none.
	Briefing string `json:"briefing,omitempty"`
	// Retrieval says whether the pre-fetch ran: on, off, or why not
	// ("off: a tool loop's step").
	Retrieval string `json:"retrieval"`
	// Sources are the entries the pre-fetch quoted or pointed to, by ID.
	Sources []string `json:"sources,omitempty"`
	// History is how the conversation was compacted: the strategy
	// (full, windowed, compacted, multi_level), messages covered, shown
	// whole, quoted whole in a summary, markers for the rest, tokens shown
	// and whole, its zones, and how a multi-level history's rolling
	// summaries were made.
	History struct {
		Strategy  string                  `json:"strategy"`
		Messages  int                     `json:"messages"`
		Shown     int                     `json:"shown"`
		Quoted    int                     `json:"quoted"`
		Refs      int                     `json:"refs"`
		Tokens    int                     `json:"tokens"`
		Whole     int                     `json:"whole"`
		Zones     []assemble.Zone         `json:"zones"`
		Summaries *assemble.SummaryReport `json:"summaries,omitempty"`
	} `json:"history"`
}

// WindowAssemble assembles a turn's context over a window: the messages
// to send within the window's budget (less the tools), layer by layer.
// The turn is kept as a snapshot (snapshot.go) whose hash Snapshot
// gives; when it cannot be kept, the assembly fails.
func (o *Ops) WindowAssemble(ctx context.Context, in WindowAssembleIn) (AssembleOut, string, error) {
	f, err := ParseFormat(in.Format)
	if err != nil {
		return AssembleOut{}, "", err
	}
	if _, err := WindowToolsRange.Check(in.Tools); err != nil {
		return AssembleOut{}, "", err
	}
	retrieve, steps, err := ParseRetrieval(in.Retrieval, in.NoRetrieval)
	if err != nil {
		return AssembleOut{}, "", err
	}
	if in.NoBriefing && in.Briefing != "" {
		return AssembleOut{}, "", bad("briefing and no_briefing contradict each other: give the briefing, or leave it out")
	}
	for name, v := range map[string]string{"message": in.Message, "preferences": in.Preferences, "briefing": in.Briefing} {
		if len(v) > MaxMessageBytes {
			return AssembleOut{}, "", bad("%s: %d bytes, over the %d a message may hold", name, len(v), MaxMessageBytes)
		}
		if !utf8.ValidString(v) {
			return AssembleOut{}, "", bad("%s is not UTF-8", name)
		}
	}
	m, err := o.windows()
	if err != nil {
		return AssembleOut{}, "", err
	}
	k, err := o.findKey(ctx, in.Session, in.Agent)
	if err != nil {
		return AssembleOut{}, "", err
	}
	a := o.Assembler
	if a == nil {
		// A one-off assembler: its summarizer's work is waited for, so that
		// the next call finds it.
		if a, err = NewAssembler(o.Eng, m, "auto", 0); err != nil {
			return AssembleOut{}, "", err
		}
		a.OneTurn = true
		defer a.Wait()
	}
	turn, err := a.Assemble(ctx, assemble.Request{Key: k, Message: in.Message, Tools: in.Tools, Preferences: in.Preferences,
		Briefing: in.Briefing, Brief: !in.NoBriefing, Retrieve: retrieve, RetrieveSteps: steps})
	switch {
	case errors.Is(err, assemble.ErrInvalid), errors.Is(err, assemble.ErrOverBudget), errors.Is(err, assemble.ErrNoHistoryRoom),
		errors.Is(err, assemble.ErrNoTurn):
		return AssembleOut{}, "", &InputError{Msg: err.Error()}
	case err != nil:
		return AssembleOut{}, "", windowErr(err)
	}
	if turn.Retrieval == assemble.RetrievalOn {
		// The retrieval layer is a pre-fetch; it holds something when the
		// pre-fetch found an excerpt that fit.
		o.Metrics.Prefetch(turn.Layers[assemble.Retrieval] > 0)
	}
	st, err := m.Status(ctx, k)
	if err != nil {
		return AssembleOut{}, "", err
	}
	out := AssembleOut{Window: windowOut(st), Format: f, Budget: turn.Budget, Tokens: turn.Tokens,
		Messages: make([]json.RawMessage, 0, len(turn.Messages)), Layers: []LayerOut{}}
	out.Briefing, out.Retrieval, out.Sources = turn.Briefing, turn.Retrieval, turn.Sources
	h := turn.History
	out.History.Strategy, out.History.Zones = string(h.Strategy), h.Zones
	out.History.Messages, out.History.Shown, out.History.Quoted, out.History.Refs, out.History.Tokens, out.History.Whole = h.Messages, h.Shown, h.Quoted, h.Refs, h.Tokens, h.Whole
	if out.History.Zones == nil {
		out.History.Zones = []assemble.Zone{}
	}
	if h.Summaries.Chunks > 0 {
		out.History.Summaries = &h.Summaries
	}
	var b strings.Builder
	for i, msg := range turn.Messages {
		raw, err := EncodeMessage(f, msg)
		if err != nil {
			return AssembleOut{}, "", fmt.Errorf("message %d: %w", i, err)
		}
		out.Messages = append(out.Messages, raw)
		writeMessage(&b, i, msg)
	}
	fmt.Fprintf(&b, "(%s, %d of %d tokens)\n", plural(len(turn.Messages), "message"), turn.Tokens, turn.Budget)
	for _, l := range turn.Plan.Layers {
		lo := LayerOut{Name: l.Name, Min: l.Min, Ideal: l.Ideal, Max: l.Max, Priority: l.Priority, Allocated: l.Tokens,
			Used: turn.Layers[l.Name], Dropped: l.Dropped}
		out.Layers = append(out.Layers, lo)
		fmt.Fprintf(&b, "%-16s %6d of %6d allocated (min %d, ideal %d, max %d)\n", l.Name, lo.Used, lo.Allocated, l.Min, l.Ideal, l.Max)
	}
	fmt.Fprintf(&b, "retrieval: %s\n", turn.Retrieval)
	fmt.Fprintf(&b, "history: %s, %s: %d shown whole, %d quoted whole, %s for the rest; %d tokens shown of %d whole\n",
		h.Strategy, plural(h.Messages, "message"), h.Shown, h.Quoted, plural(h.Refs, "marker"), h.Tokens, h.Whole)
	for _, z := range h.Zones {
		fmt.Fprintf(&b, "  %-8s messages %d to %d (%d): %d of %d tokens\n", z.Form, z.From+1, z.To, z.Messages, z.Tokens, z.Budget)
	}
	if s := h.Summaries; s.Chunks > 0 {
		fmt.Fprintf(&b, "  summaries by %s: %d chunks, %d stored, %d made", s.By, s.Chunks, s.Stored, s.Made)
		if s.Pending > 0 {
			fmt.Fprintf(&b, ", %d pending", s.Pending)
		}
		if s.Stale > 0 {
			fmt.Fprintf(&b, ", %d stale (newer ones used)", s.Stale)
		}
		if s.Fallback != "" {
			fmt.Fprintf(&b, "; %s", s.Fallback)
		}
		b.WriteString("\n")
	}
	// Every turn is kept, so that it can be cited, shown and compared; a
	// turn that cannot be kept is not given.
	if out.Snapshot, err = o.recordSnapshot(ctx, k, turn.Messages, out); err != nil {
		return AssembleOut{}, "", fmt.Errorf("keep the turn's snapshot: %w", err)
	}
	fmt.Fprintf(&b, "snapshot %s", out.Snapshot)
	return out, b.String(), nil
}

// RetrievalAuto is WindowAssembleIn.Retrieval's default; the others are
// assemble.RetrievalOn and assemble.RetrievalOff.
const RetrievalAuto = "auto"

// ParseRetrieval reads when the pre-fetch runs: whether for the turn, and
// in a tool loop's step too.
func ParseRetrieval(r string, off bool) (retrieve, steps bool, err error) {
	switch r {
	case "", RetrievalAuto:
		return !off, false, nil
	case assemble.RetrievalOn:
		if off {
			return false, false, bad("retrieval %q and no_retrieval contradict each other: give one", r)
		}
		return true, true, nil
	case assemble.RetrievalOff:
		return false, false, nil
	}
	return false, false, bad("retrieval %q: want auto (the default), on or off", r)
}

// NewAssembler returns an Assembler over an engine's windows, its rolling
// summaries made as summarizer says (config's assemble.summarizer: auto,
// extractive or model) within timeout (zero: the default): a server keeps
// one, so that the model's work goes on between requests.
func NewAssembler(eng *engine.Engine, m *window.Manager, summarizer string, timeout time.Duration) (*assemble.Assembler, error) {
	a := &assemble.Assembler{Engine: eng, Windows: m, SummaryTimeout: timeout}
	switch summarizer {
	case "extractive":
		return a, nil
	case "auto", "model":
	default:
		return nil, fmt.Errorf("summarizer %q: want auto, extractive or model", summarizer)
	}
	c, err := eng.LLM()
	switch {
	case err != nil:
		return nil, err
	case c != nil:
		a.Summarizer = assemble.Model{Client: c}
	case summarizer == "model":
		return nil, errors.New("summarizer model: no chat model is configured ([llm])")
	}
	return a, nil
}
