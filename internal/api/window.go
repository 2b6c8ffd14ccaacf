package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// The operations on context windows (internal/window): open one, append
// messages in engram's own form or a vendor's, read where it stands, its
// context with the markers of what it evicted, and expand a marker back
// into its messages. Input is checked here, once, for every front end.

// Limits of an append. A message larger than the window's whole budget is
// taken (it is stored whole; the window decides what to show of it): the
// cap is on what one request may carry, not on what a window may hold.
const (
	// MaxAppendMessages caps the messages of one append (one turn).
	MaxAppendMessages = 1000
	// MaxMessageBytes caps one message's JSON: some 2 million tokens of
	// text, six times the 300k-token tool result a window must hold.
	MaxMessageBytes = 8 << 20
	// maxWindows caps a list of windows.
	maxWindows = 1000
)

// The ranges of a window's sizes, in tokens.
var (
	WindowLimitRange  = Range{Name: "limit", Min: 256, Max: 100_000_000}
	WindowOutputRange = Range{Name: "output", Min: 1, Max: 10_000_000}
	WindowSafetyRange = Range{Name: "safety", Min: 1, Max: 10_000_000}
	WindowToolsRange  = Range{Name: "tools", Min: 1, Max: 10_000_000}
)

// The message formats an append takes and a context or an expansion
// gives.
const (
	FormatEngram    = "engram"
	FormatAnthropic = window.Anthropic
	FormatOpenAI    = window.OpenAI
)

// ParseFormat checks a message format's name; empty is engram's.
func ParseFormat(f string) (string, error) {
	switch f {
	case "", FormatEngram:
		return FormatEngram, nil
	case FormatAnthropic, FormatOpenAI:
		return f, nil
	}
	return "", bad("format %q: want engram (the default), anthropic or openai", f)
}

// builtinCatalog is the model catalog of windows whose Ops name no
// Manager.
var builtinCatalog = sync.OnceValues(func() (*tokens.Catalog, error) { return tokens.NewCatalog() })

// windows returns the window manager of the caller's store.
func (o *Ops) windows() (*window.Manager, error) {
	if o.Windows != nil {
		return o.Windows, nil
	}
	cat, err := builtinCatalog()
	if err != nil {
		return nil, err
	}
	return window.NewManager(o.Eng, cat), nil
}

// WindowOpenIn opens a window, or changes an open one's settings.
type WindowOpenIn struct {
	Session string `json:"session,omitempty" jsonschema:"must be your session if given"`
	Agent   string `json:"agent,omitempty" jsonschema:"the agent whose window it is (default you)"`
	Role    string `json:"role,omitempty" jsonschema:"the agent's role, which picks the eviction policy (default: recency at 75%)"`
	Model   string `json:"model,omitempty" jsonschema:"a model engram knows: its context window and tokenizer"`
	Limit   int    `json:"limit,omitempty" jsonschema:"the context window in tokens, instead of the model's"`
	Output  int    `json:"output,omitempty" jsonschema:"tokens reserved for the response"`
	Safety  int    `json:"safety,omitempty" jsonschema:"tokens kept free for what the harness adds"`
}

// WindowIn names a window: an agent of a session.
type WindowIn struct {
	Session string `json:"session,omitempty" jsonschema:"the session (default yours)"`
	Agent   string `json:"agent,omitempty" jsonschema:"the agent (default you, or the session's only window)"`
}

// WindowAppendIn appends messages to a window, as one turn.
type WindowAppendIn struct {
	Session string `json:"session,omitempty" jsonschema:"must be your session if given"`
	Agent   string `json:"agent,omitempty" jsonschema:"the agent whose window it is (default you)"`
	// Format is how the messages are written: engram (window.Message, or
	// {"role", "content": text}), anthropic or openai.
	Format   string            `json:"format,omitempty" jsonschema:"engram (default), anthropic or openai"`
	Messages []json.RawMessage `json:"messages" jsonschema:"the messages, oldest first"`
	// Key makes the append idempotent: an append tried again under the
	// key of one the window took is not made twice (window.Manager's
	// AppendOnce). Over HTTP the Idempotency-Key header carries it too.
	Key string `json:"key,omitempty" jsonschema:"this append's own key, 1 to 255 printable ASCII characters: sent again with the same messages (a retry), the append is not made twice"`
}

// WindowContextIn reads a window's context.
type WindowContextIn struct {
	Session string `json:"session,omitempty"`
	Agent   string `json:"agent,omitempty"`
	Format  string `json:"format,omitempty" jsonschema:"engram (default), anthropic or openai"`
}

// WindowListIn lists windows.
type WindowListIn struct {
	Session string `json:"session,omitempty" jsonschema:"only this session's windows (default all)"`
}

// ExpandIn expands a reference marker into the messages it stands for.
type ExpandIn struct {
	RefID  string `json:"ref_id" jsonschema:"a [CTX-REF] marker, whole, or its ref id"`
	Format string `json:"format,omitempty" jsonschema:"engram (default), anthropic or openai"`
}

// WindowReadmitIn brings the messages a reference stands for back into
// their window.
type WindowReadmitIn struct {
	Session string `json:"session,omitempty" jsonschema:"must be your session if given"`
	Agent   string `json:"agent,omitempty" jsonschema:"the agent whose window it is (default the reference's)"`
	RefID   string `json:"ref_id" jsonschema:"a [CTX-REF] marker, whole, or its ref id"`
}

// WindowToolIn is what the MCP window tool takes.
type WindowToolIn struct {
	Action  string `json:"action,omitempty" jsonschema:"status (default) or list"`
	Session string `json:"session,omitempty" jsonschema:"default yours"`
	Agent   string `json:"agent,omitempty" jsonschema:"default you, or the session's only window"`
}

// WindowOut is where a window stands: its settings, its size in tokens
// and what it holds.
type WindowOut struct {
	Session  string  `json:"session"`
	Agent    string  `json:"agent"`
	Role     string  `json:"role"`
	Model    string  `json:"model,omitempty"`
	Encoding string  `json:"encoding"`
	Strategy string  `json:"strategy"`
	Context  int     `json:"context"`
	Output   int     `json:"output"`
	Safety   int     `json:"safety"`
	Margin   float64 `json:"margin"`
	// Budget is the most tokens the window may hold; Used what it holds.
	Budget int `json:"budget"`
	Used   int `json:"used"`
	// EvictAt and Target are where it evicts and down to where.
	EvictAt     int   `json:"evict_at"`
	Target      int   `json:"target"`
	Checkpoints []int `json:"checkpoints"`
	// HandoffAt is where the agent is due to hand off to a new instance
	// (pipeline roles), HandoffDue whether it is.
	HandoffAt    int  `json:"handoff_at,omitempty"`
	HandoffDue   bool `json:"handoff_due,omitempty"`
	KeepTurns    int  `json:"keep_turns"`
	MaxRefTokens int  `json:"max_ref_tokens"`
	// Messages are in the window, Evicted out of it under Refs markers.
	Messages int   `json:"messages"`
	Evicted  int   `json:"evicted"`
	Refs     int   `json:"refs"`
	Version  int64 `json:"version"`
	// Notice is what the caller may not expect, when there is something:
	// a role engram does not know, which gets the default role's policy.
	Notice string `json:"notice,omitempty"`
}

func windowOut(st window.Status) WindowOut {
	s := st.Settings
	return WindowOut{Session: st.SessionID, Agent: st.AgentID, Role: s.Role, Model: s.Model, Encoding: s.Encoding,
		Strategy: string(s.Policy.Strategy), Context: s.Limits.Context, Output: s.Limits.Output, Safety: s.Limits.Safety,
		Margin: s.Limits.Margin, Budget: st.Budget, Used: st.Used, EvictAt: st.EvictAt, Target: st.Target,
		Checkpoints: append([]int{}, st.Checkpoints...), HandoffAt: st.HandoffAt, HandoffDue: st.HandoffDue,
		KeepTurns: s.Policy.KeepTurns, MaxRefTokens: s.Policy.MaxRefTokens,
		Messages: st.Messages, Evicted: st.Evicted, Refs: st.Refs, Version: st.Version}
}

// Text is a window's status in a line.
func (w WindowOut) Text() string {
	pct := 0
	if w.Budget > 0 {
		pct = 100 * w.Used / w.Budget
	}
	size := fmt.Sprintf("%d-token context", w.Context)
	if w.Model != "" {
		size = w.Model
	}
	handoff := ""
	switch {
	case w.HandoffDue:
		handoff = fmt.Sprintf(", handoff due (at %d)", w.HandoffAt)
	case w.HandoffAt > 0:
		handoff = fmt.Sprintf(", hands off at %d", w.HandoffAt)
	}
	return fmt.Sprintf("window %s/%s (%s, %s, %s): %d of %d tokens (%d%%)%s, evicts at %d down to %d; %s in it, %d evicted under %s",
		w.Session, w.Agent, w.Role, w.Strategy, size, w.Used, w.Budget, pct, handoff, w.EvictAt, w.Target, plural(w.Messages, "message"),
		w.Evicted, plural(w.Refs, "reference"))
}

// plural says n things, in the plural unless there is one.
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}

// WindowsOut is a list of windows.
type WindowsOut struct {
	Windows []WindowOut `json:"windows"`
}

// AppendOut is an append's result: the window after it, where the
// messages went and what it evicted.
type AppendOut struct {
	Window    WindowOut    `json:"window"`
	Positions []int        `json:"positions"`
	Evicted   []window.Ref `json:"evicted"`
	// Redacted names, by message, the kinds of secrets removed before
	// storing.
	Redacted [][]string `json:"redacted,omitempty"`
	// Replayed is set when the window took an append under the same key
	// before: nothing was written, and Positions are that append's.
	Replayed bool `json:"replayed,omitempty"`
}

// ContextItemOut is one piece of a window's context: a message in the
// format asked for, the marker of evicted messages, or an excerpt kept
// verbatim from messages no longer shown whole (a digest's lines, a
// clipped message's head and tail).
type ContextItemOut struct {
	Pos     int             `json:"pos"`
	Tokens  int             `json:"tokens,omitempty"`
	Message json.RawMessage `json:"message,omitempty"`
	RefID   string          `json:"ref_id,omitempty"`
	Marker  string          `json:"marker,omitempty"`
	Excerpt string          `json:"excerpt,omitempty"`
}

// ContextOut is a window's context, in order.
type ContextOut struct {
	Window WindowOut        `json:"window"`
	Format string           `json:"format"`
	Items  []ContextItemOut `json:"items"`
}

// ExpandOut is what a reference stands for: its messages, byte for byte.
type ExpandOut struct {
	RefID    string            `json:"ref_id"`
	Session  string            `json:"session"`
	Agent    string            `json:"agent"`
	Marker   string            `json:"marker"`
	Format   string            `json:"format"`
	Tokens   int               `json:"tokens"`
	Messages []json.RawMessage `json:"messages"`
}

// MessageError is a refusal of one message of an append; Index is its
// place in the append, from 0, so that a front end can name the line or
// element. It unwraps to an *InputError.
type MessageError struct {
	Index int
	Err   error
}

func (e *MessageError) Error() string { return fmt.Sprintf("message %d: %v", e.Index, e.Err) }
func (e *MessageError) Unwrap() error { return e.Err }

// windowErr turns the window package's refusals of its input into input
// errors, without the "invalid message" the window says of a message (its
// settings, a model or a limit, it calls "invalid window settings", which
// stays); anything else passes as it is.
func windowErr(err error) error {
	if errors.Is(err, window.ErrInvalid) || errors.Is(err, window.ErrNoSize) {
		return &InputError{Msg: strings.Replace(err.Error(), window.ErrInvalid.Error()+": ", "", 1)}
	}
	return err
}

// key returns the window an operation names: session and agent, each
// defaulting to the caller's.
func (o *Ops) key(session, agent string) (store.WindowKey, error) {
	k := store.WindowKey{SessionID: session, AgentID: agent}
	if k.SessionID == "" {
		k.SessionID = o.Session()
	}
	if k.AgentID == "" {
		k.AgentID = o.Agent
	}
	if k.SessionID == "" {
		return k, bad("name the window's session")
	}
	if k.AgentID == "" {
		return k, bad("name the window's agent")
	}
	return k, nil
}

// writeKey returns the window a write names: the caller's session only.
func (o *Ops) writeKey(session, agent string) (store.WindowKey, error) {
	if err := o.checkSession(session); err != nil {
		return store.WindowKey{}, err
	}
	return o.key(session, agent)
}

// WindowOpen opens a window for an agent of the caller's session, or
// changes an open one's settings: a new window needs a model or a limit;
// a model switch keeps its messages.
func (o *Ops) WindowOpen(ctx context.Context, in WindowOpenIn) (WindowOut, string, error) {
	k, err := o.writeKey(in.Session, in.Agent)
	if err != nil {
		return WindowOut{}, "", err
	}
	for _, c := range []struct {
		v int
		r Range
	}{{in.Limit, WindowLimitRange}, {in.Output, WindowOutputRange}, {in.Safety, WindowSafetyRange}} {
		if _, err := c.r.Check(c.v); err != nil {
			return WindowOut{}, "", err
		}
	}
	m, err := o.windows()
	if err != nil {
		return WindowOut{}, "", err
	}
	st, err := m.Open(ctx, k, window.OpenOptions{Role: in.Role, Model: in.Model, Limit: in.Limit, Output: in.Output, Safety: in.Safety})
	if err != nil {
		return WindowOut{}, "", windowErr(err)
	}
	out := windowOut(st)
	text := out.Text()
	if in.Role != "" && !m.KnownRole(in.Role) {
		roles := slices.Sorted(maps.Keys(window.Policies))
		out.Notice = fmt.Sprintf("role %q is not one engram knows (%s, or one configured under [window.roles]): it has the %s role's policy",
			in.Role, strings.Join(roles, ", "), window.DefaultRole)
		text += "\n" + out.Notice
	}
	return out, text, nil
}

// WindowAppend appends messages to a window of the caller's session, as
// one turn: each is stored in the content store first, then the window
// evicts what its policy says, in one transaction. Nothing is stored
// when any message is refused.
func (o *Ops) WindowAppend(ctx context.Context, in WindowAppendIn) (AppendOut, string, error) {
	k, err := o.writeKey(in.Session, in.Agent)
	if err != nil {
		return AppendOut{}, "", err
	}
	if len(in.Messages) == 0 {
		// As the CLI refuses an empty input: an append of nothing is a
		// client's mistake, not a turn.
		return AppendOut{}, "", bad("no messages: an append takes 1 to %d", MaxAppendMessages)
	}
	msgs, err := DecodeMessages(in.Format, in.Messages)
	if err != nil {
		return AppendOut{}, "", err
	}
	m, err := o.windows()
	if err != nil {
		return AppendOut{}, "", err
	}
	var res window.AppendResult
	if in.Key != "" {
		if err := store.ValidAppendKey(in.Key); err != nil {
			return AppendOut{}, "", err
		}
		res, err = m.AppendOnce(ctx, k, in.Key, msgs)
	} else {
		res, err = m.Append(ctx, k, msgs)
	}
	if err != nil {
		return AppendOut{}, "", WindowError(err, msgs)
	}
	out := AppendOut{Window: windowOut(res.Status), Positions: res.Positions, Evicted: res.Evicted, Redacted: res.Redacted, Replayed: res.Replayed}
	if out.Positions == nil {
		out.Positions = []int{}
	}
	if out.Evicted == nil {
		out.Evicted = []window.Ref{}
	}
	var b strings.Builder
	if res.Replayed {
		fmt.Fprintf(&b, "appended before under key %q: nothing written again", in.Key)
	} else {
		fmt.Fprintf(&b, "appended %s", plural(len(msgs), "message"))
	}
	if len(res.Positions) > 0 {
		fmt.Fprintf(&b, " at %d-%d", res.Positions[0], res.Positions[len(res.Positions)-1])
	}
	for _, r := range res.Evicted {
		fmt.Fprintf(&b, "\nevicted %s (%d-%d, %d tokens): %s", plural(r.Messages, "message"), r.From, r.To-1, r.Tokens, r.Marker)
	}
	b.WriteString("\n" + out.Window.Text())
	return out, b.String(), nil
}

// WindowError is a window's refusal of an append of msgs as an
// *InputError, and a *MessageError naming the appended message at fault
// when it is about the pairing of tool calls and results. Any other error
// passes as it is.
func WindowError(err error, msgs []window.Message) error {
	// A pairing error names the appended message at fault.
	var pe *window.PairingError
	if errors.As(err, &pe) && pe.Message >= 0 && pe.Message < len(msgs) {
		return &MessageError{Index: pe.Message, Err: &InputError{Msg: pe.Problem}}
	}
	return windowErr(err)
}

// engramMessage is a message in engram's own form: window.Message's
// fields, or content as the text of one text block. Tokens are counted
// by the window, whatever a message says.
type engramMessage struct {
	Role    window.Role    `json:"role"`
	Content *string        `json:"content"`
	Blocks  []window.Block `json:"blocks"`
	Tokens  int            `json:"tokens"`
	Pinned  bool           `json:"pinned"`
	Shape   *window.Shape  `json:"shape"`
}

// DecodeMessages decodes the messages of an append, written in format,
// and checks each: its size, its JSON and what a window needs of it. The
// first refused message is a *MessageError.
func DecodeMessages(format string, raws []json.RawMessage) ([]window.Message, error) {
	f, err := ParseFormat(format)
	if err != nil {
		return nil, err
	}
	if len(raws) > MaxAppendMessages {
		return nil, bad("%d messages in one append; at most %d: append them as several turns", len(raws), MaxAppendMessages)
	}
	msgs := make([]window.Message, len(raws))
	for i, raw := range raws {
		if msgs[i], err = DecodeMessage(f, raw); err != nil {
			var ie *InputError
			if errors.As(err, &ie) {
				return nil, &MessageError{Index: i, Err: ie}
			}
			return nil, &MessageError{Index: i, Err: bad("%v", err)}
		}
	}
	return msgs, nil
}

// DecodeMessage decodes and checks one message written in format.
func DecodeMessage(format string, raw []byte) (window.Message, error) {
	f, err := ParseFormat(format)
	if err != nil {
		return window.Message{}, err
	}
	if len(raw) > MaxMessageBytes {
		return window.Message{}, bad("%d bytes; a message may take at most %d (8 MiB)", len(raw), MaxMessageBytes)
	}
	if !utf8.Valid(raw) {
		// encoding/json would replace the bytes that are not, silently.
		return window.Message{}, bad("not UTF-8: a message must be UTF-8 JSON text (invalid bytes at byte %d)", InvalidUTF8At(raw))
	}
	if at := engine.LoneSurrogate(raw); at >= 0 {
		// The same: an escaped half of a UTF-16 pair is no character,
		// and would come back as U+FFFD.
		return window.Message{}, bad("a \\u escape at byte %d is half of a UTF-16 surrogate pair, not a character: a message must be UTF-8 JSON text", at)
	}
	var m window.Message
	switch f {
	case FormatAnthropic:
		m, err = window.FromAnthropic(raw)
	case FormatOpenAI:
		m, err = window.FromOpenAI(raw)
		if err == nil && m.Role == window.RoleTool {
			// OpenAI requires it; without it, the message would be
			// written back with "content": null.
			var f map[string]json.RawMessage
			if json.Unmarshal(raw, &f) == nil && f["content"] == nil {
				err = errors.New("a tool message needs its content")
			}
		}
	default:
		m, err = decodeEngram(raw)
	}
	if err != nil {
		return window.Message{}, bad("%s", strings.TrimPrefix(err.Error(), window.ErrInvalid.Error()+": "))
	}
	if name, at := DuplicateName(raw); at >= 0 {
		// Decoded, the message keeps the member's last value only.
		return window.Message{}, bad("the member %q is given twice in one object (again at byte %d): one of its values would be lost", name, at)
	}
	return m, nil
}

func decodeEngram(raw []byte) (window.Message, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var em engramMessage
	if err := dec.Decode(&em); err != nil {
		return window.Message{}, fmt.Errorf("not an engram message (role, and content or blocks): %s", JSONError(err))
	}
	if dec.More() {
		return window.Message{}, errors.New("more than one JSON value")
	}
	if err := ExactNames(raw, reflect.TypeFor[engramMessage]()); err != nil {
		return window.Message{}, err
	}
	m := window.Message{Role: em.Role, Blocks: em.Blocks, Pinned: em.Pinned, Shape: em.Shape}
	switch {
	case em.Content != nil && len(em.Blocks) > 0:
		return m, errors.New("give content or blocks, not both")
	case em.Content != nil:
		// Written back as it came: a plain string, in either vendor's shape.
		m.Blocks = []window.Block{{Type: window.BlockText, Text: *em.Content}}
		if m.Shape == nil {
			m.Shape = &window.Shape{Plain: true}
		}
	case em.Blocks == nil:
		// "blocks": [] is a message with no content, as the other formats
		// allow it (an Anthropic "content": []) and context --json writes it.
		return m, errors.New("no content and no blocks")
	}
	if err := m.Validate(); err != nil {
		return m, err
	}
	return m, nil
}

// InvalidUTF8At is the offset of the first byte of b that is not UTF-8.
func InvalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// EncodeMessage writes a message in format.
func EncodeMessage(format string, m window.Message) (json.RawMessage, error) {
	var (
		b   []byte
		err error
	)
	switch format {
	case FormatAnthropic:
		b, err = window.ToAnthropic(m)
	case FormatOpenAI:
		b, err = window.ToOpenAI(m)
	default:
		if m.Blocks == nil {
			m.Blocks = []window.Block{} // a message with no content has [] blocks, as stored
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false) // a message's "<" and "&" stay as they were
		err = enc.Encode(m)
		b = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	}
	if err != nil {
		return nil, windowErr(err)
	}
	return b, nil
}

// WindowStatus reports where a window stands. With no agent named, it is
// the caller's window, or the session's only one.
func (o *Ops) WindowStatus(ctx context.Context, in WindowIn) (WindowOut, string, error) {
	m, err := o.windows()
	if err != nil {
		return WindowOut{}, "", err
	}
	k, err := o.findKey(ctx, in.Session, in.Agent)
	if err != nil {
		return WindowOut{}, "", err
	}
	st, err := m.Status(ctx, k)
	if err != nil {
		return WindowOut{}, "", err
	}
	out := windowOut(st)
	return out, out.Text(), nil
}

// findKey is key, but with no agent named and no window of the caller's,
// the session's only window.
func (o *Ops) findKey(ctx context.Context, session, agent string) (store.WindowKey, error) {
	k, err := o.key(session, agent)
	if agent != "" || (err != nil && k.SessionID == "") {
		return k, err
	}
	if err == nil {
		if _, err := o.Eng.Store().Window(ctx, k); err == nil {
			return k, nil
		}
	}
	ws, err := o.Eng.Store().Windows(ctx, k.SessionID)
	if err != nil {
		return k, err
	}
	switch len(ws) {
	case 0:
		return k, fmt.Errorf("session %q has no window: %w", k.SessionID, store.ErrNotFound)
	case 1:
		return ws[0].WindowKey, nil
	}
	var agents []string
	for _, w := range ws {
		agents = append(agents, w.AgentID)
	}
	slices.Sort(agents)
	return k, bad("session %q has %d windows: name the agent (%s)", k.SessionID, len(ws), strings.Join(agents, ", "))
}

// WindowList lists the windows of a session, or of every session.
func (o *Ops) WindowList(ctx context.Context, in WindowListIn) (WindowsOut, string, error) {
	m, err := o.windows()
	if err != nil {
		return WindowsOut{}, "", err
	}
	ws, err := o.Eng.Store().Windows(ctx, in.Session)
	if err != nil {
		return WindowsOut{}, "", err
	}
	out := WindowsOut{Windows: []WindowOut{}}
	var lines []string
	for i, w := range ws {
		if i == maxWindows {
			lines = append(lines, fmt.Sprintf("(%d more windows: name a session)", len(ws)-i))
			break
		}
		st, err := m.Status(ctx, w.WindowKey)
		if err != nil {
			return WindowsOut{}, "", err
		}
		wo := windowOut(st)
		out.Windows = append(out.Windows, wo)
		lines = append(lines, wo.Text())
	}
	if len(ws) == 0 {
		lines = append(lines, "no windows")
	}
	return out, strings.Join(lines, "\n"), nil
}

// Window is the MCP window tool: a window's status, or a session's
// windows.
func (o *Ops) Window(ctx context.Context, in WindowToolIn) (WindowsOut, string, error) {
	switch in.Action {
	case "", "status":
		w, text, err := o.WindowStatus(ctx, WindowIn{Session: in.Session, Agent: in.Agent})
		if err != nil {
			return WindowsOut{}, "", err
		}
		return WindowsOut{Windows: []WindowOut{w}}, text, nil
	case "list":
		session := in.Session
		if session == "" {
			session = o.Session()
		}
		return o.WindowList(ctx, WindowListIn{Session: session})
	}
	return WindowsOut{}, "", bad("action %q: want status or list", in.Action)
}

// WindowContext returns a window's context, in order: its messages, in
// the format asked for, and a marker where each evicted run stood.
func (o *Ops) WindowContext(ctx context.Context, in WindowContextIn) (ContextOut, string, error) {
	f, err := ParseFormat(in.Format)
	if err != nil {
		return ContextOut{}, "", err
	}
	m, err := o.windows()
	if err != nil {
		return ContextOut{}, "", err
	}
	k, err := o.findKey(ctx, in.Session, in.Agent)
	if err != nil {
		return ContextOut{}, "", err
	}
	items, err := m.Context(ctx, k)
	if err != nil {
		return ContextOut{}, "", err
	}
	st, err := m.Status(ctx, k)
	if err != nil {
		return ContextOut{}, "", err
	}
	out := ContextOut{Window: windowOut(st), Format: f, Items: make([]ContextItemOut, 0, len(items))}
	var b strings.Builder
	for _, it := range items {
		if it.Excerpt != "" {
			out.Items = append(out.Items, ContextItemOut{Pos: it.Pos, Excerpt: it.Excerpt})
			fmt.Fprintf(&b, "%s\n", strings.TrimSuffix(it.Excerpt, "\n"))
			continue
		}
		if it.Message == nil {
			out.Items = append(out.Items, ContextItemOut{Pos: it.Pos, RefID: it.RefID, Marker: it.Marker})
			fmt.Fprintf(&b, "%s\n", it.Marker)
			continue
		}
		raw, err := EncodeMessage(f, *it.Message)
		if err != nil {
			return ContextOut{}, "", fmt.Errorf("message %d: %w", it.Pos, err)
		}
		out.Items = append(out.Items, ContextItemOut{Pos: it.Pos, Tokens: it.Message.Tokens, Message: raw})
		writeMessage(&b, it.Pos, *it.Message)
	}
	b.WriteString(out.Window.Text())
	return out, b.String(), nil
}

// WindowExpand returns the messages a reference stands for, byte for
// byte, tool calls with their results.
func (o *Ops) WindowExpand(ctx context.Context, in ExpandIn) (ExpandOut, string, error) {
	f, err := ParseFormat(in.Format)
	if err != nil {
		return ExpandOut{}, "", err
	}
	if strings.TrimSpace(in.RefID) == "" {
		return ExpandOut{}, "", bad("ref_id is required: a [CTX-REF] marker or its id")
	}
	mk, err := ctxref.Parse(in.RefID)
	if err != nil {
		return ExpandOut{}, "", bad("ref_id: %v", err)
	}
	ref, err := o.Eng.Store().Reference(ctx, mk.ID)
	if errors.Is(err, store.ErrNotFound) {
		return ExpandOut{}, "", fmt.Errorf("no reference %s: %w", mk.ID, store.ErrNotFound)
	}
	if err != nil {
		return ExpandOut{}, "", err
	}
	m, err := o.windows()
	if err != nil {
		return ExpandOut{}, "", err
	}
	msgs, err := m.Expand(ctx, ref.ID)
	if err != nil {
		return ExpandOut{}, "", err
	}
	out := ExpandOut{RefID: ref.ID, Session: ref.SessionID, Agent: ref.AgentID, Format: f,
		Marker: ctxref.Render(ctxref.FromReference(ref)), Messages: make([]json.RawMessage, 0, len(msgs))}
	var b strings.Builder
	for i, msg := range msgs {
		raw, err := EncodeMessage(f, msg)
		if err != nil {
			return ExpandOut{}, "", fmt.Errorf("message %d: %w", i, err)
		}
		out.Messages = append(out.Messages, raw)
		out.Tokens += msg.Tokens
		writeMessage(&b, ref.TurnFrom-1+i, msg)
	}
	fmt.Fprintf(&b, "(%s, %d tokens, of window %s/%s)", plural(len(msgs), "message"), out.Tokens, ref.SessionID, ref.AgentID)
	o.Metrics.RefExpanded()
	return out, b.String(), nil
}

// WindowReadmit brings the messages a reference stands for back into
// their window, in their places, whole: the window evicts what its policy
// says to make room, never them. A window of another session than the
// caller's is refused; one that cannot make room answers a conflict,
// changing nothing.
func (o *Ops) WindowReadmit(ctx context.Context, in WindowReadmitIn) (AppendOut, string, error) {
	if strings.TrimSpace(in.RefID) == "" {
		return AppendOut{}, "", bad("ref_id is required: a [CTX-REF] marker or its id")
	}
	mk, err := ctxref.Parse(in.RefID)
	if err != nil {
		return AppendOut{}, "", bad("ref_id: %v", err)
	}
	ref, err := o.Eng.Store().Reference(ctx, mk.ID)
	if errors.Is(err, store.ErrNotFound) {
		return AppendOut{}, "", fmt.Errorf("no reference %s: %w", mk.ID, store.ErrNotFound)
	}
	if err != nil {
		return AppendOut{}, "", err
	}
	k, err := o.writeKey(cmp.Or(in.Session, ref.SessionID), cmp.Or(in.Agent, ref.AgentID))
	if err != nil {
		return AppendOut{}, "", err
	}
	if k.SessionID != ref.SessionID || k.AgentID != ref.AgentID {
		return AppendOut{}, "", bad("reference %s is of window %s/%s, not %s", ref.ID, ref.SessionID, ref.AgentID, k)
	}
	m, err := o.windows()
	if err != nil {
		return AppendOut{}, "", err
	}
	res, err := m.Readmit(ctx, ref.ID)
	if errors.Is(err, window.ErrNoRoom) || errors.Is(err, window.ErrNotEvicted) {
		// The error names the reference already, once or twice: the
		// conflict says it once.
		msg := strings.TrimPrefix(err.Error(), "readmit "+ref.ID+" to window "+k.String()+": ")
		msg = strings.TrimPrefix(msg, "reference "+ref.ID+": ")
		return AppendOut{}, "", &store.ConflictError{What: "reference " + ref.ID, Msg: msg}
	}
	if err != nil {
		return AppendOut{}, "", windowErr(err)
	}
	out := AppendOut{Window: windowOut(res.Status), Positions: res.Positions, Evicted: res.Evicted}
	if out.Evicted == nil {
		out.Evicted = []window.Ref{}
	}
	o.Metrics.RefExpanded()
	var b strings.Builder
	fmt.Fprintf(&b, "readmitted %s", plural(len(res.Positions), "message"))
	if n := len(res.Positions); n > 0 {
		fmt.Fprintf(&b, " at %d-%d", res.Positions[0], res.Positions[n-1])
	}
	for _, r := range res.Evicted {
		fmt.Fprintf(&b, "\nevicted %s (%d-%d, %d tokens): %s", plural(r.Messages, "message"), r.From, r.To-1, r.Tokens, r.Marker)
	}
	b.WriteString("\n" + out.Window.Text())
	return out, b.String(), nil
}

// writeMessage writes a message as text: a header line, then each
// block's content, its media as placeholders.
func writeMessage(b *strings.Builder, pos int, m window.Message) {
	fmt.Fprintf(b, "--- %d %s (%d tokens)\n", pos, m.Role, m.Tokens)
	for _, bl := range m.Blocks {
		switch {
		case bl.Type == window.BlockToolUse:
			in := bl.Input
			if len(bl.Raw) > 0 {
				in = bl.Raw
			}
			fmt.Fprintf(b, "[tool call %s: %s] %s\n", bl.ID, bl.Name, in)
		case bl.Type == window.BlockToolResult:
			text := bl.Text
			if len(bl.Raw) > 0 {
				text = window.ShowMedia(bl.Raw, inJSON)
			}
			errNote := ""
			if bl.IsError {
				errNote = ", an error"
			}
			fmt.Fprintf(b, "[tool result %s%s]\n%s\n", bl.ToolUseID, errNote, strings.TrimSuffix(text, "\n"))
		case len(bl.Raw) > 0:
			fmt.Fprintf(b, "[%s] %s\n", bl.Type, window.ShowMedia(bl.Raw, inJSON))
		default:
			fmt.Fprintf(b, "%s\n", strings.TrimSuffix(bl.Text, "\n"))
		}
	}
}
