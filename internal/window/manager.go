package window

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/secrets"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
)

// Settings are what a window's ledger head keeps: who the window is for,
// how its tokens are counted, its size and its policy.
type Settings struct {
	Role     string `json:"role"`
	Model    string `json:"model,omitempty"`
	Encoding string `json:"encoding"`
	Limits   Limits `json:"limits"`
	Policy   Policy `json:"policy"`
	// Handoff, on a window a handoff opened, names the handoff state it
	// opened with, so that the next handoff chains to it.
	Handoff *HandoffLink `json:"handoff,omitempty"`
}

// Manager keeps the windows of a store: their ledgers live in the store,
// so that a window survives a restart and several processes share it.
// Content goes through the engine (secrets redacted, tokens counted,
// chunked) into the content store before a window holds it.
type Manager struct {
	eng *engine.Engine
	cat *tokens.Catalog
	now func() time.Time

	// policies are the policies by role, defaults the limits' defaults:
	// seed 000's and engram's unless Configure says otherwise.
	policies map[string]Policy
	defaults Defaults

	mu sync.Mutex
	// layouts are the windows laid out (see laidOut), each as of a
	// version of its ledger.
	layouts map[store.WindowKey]*laidOut
	// views are the windows' last views (see View and Prepare), the
	// latest first, at most maxViews of a window, kept while its layout
	// is.
	views map[store.WindowKey][]*viewCache
	// spans are Refer's markers, by reference ID.
	spans map[string]string
	// locks serialize what the Manager does to one window (see lock).
	locks [64]sync.Mutex
	// beforeWrite, when set (tests), runs between reading a window's
	// layout and the append's write: where another server's change
	// makes the layout stale.
	beforeWrite func()
}

// Defaults are what a window's limits and references take when nothing
// else is said.
type Defaults struct {
	// Output is the response reservation (or the model's most output, if
	// less); Safety the safety buffer's share of the context window;
	// Margin the share kept free for a model counted only approximately.
	Output int
	Safety float64
	Margin float64
	// MaxRefTokens caps the tokens one reference stands for.
	MaxRefTokens int
}

// Config configures a Manager: the defaults, and policies by role that
// replace or add to seed 000's (a role named here replaces the table's).
type Config struct {
	Defaults
	Policies map[string]Policy
}

// Configure sets the Manager's defaults and policies, checked as
// CheckConfig checks them: a negative default is refused, naming it, and a
// policy that is not valid, naming its role; every problem at once, and
// nothing is set then. Zero defaults keep engram's.
func (m *Manager) Configure(c Config) error {
	d, ps, err := settle(m.defaults, m.policies, c)
	if err != nil {
		return err
	}
	m.defaults, m.policies = d, ps
	return nil
}

// builtinDefaults are a new Manager's defaults.
var builtinDefaults = Defaults{Output: DefaultOutput, Safety: DefaultSafety, Margin: DefaultMargin, MaxRefTokens: DefaultMaxRefTokens}

// settle returns the defaults d and the policies ps as c changes them, or
// every problem with c, each naming its key in the [window] section.
func settle(d Defaults, ps map[string]Policy, c Config) (Defaults, map[string]Policy, error) {
	var errs []error
	for _, f := range []struct {
		name, what string
		v          float64
	}{{"output", "tokens", float64(c.Output)}, {"safety", "a share of the window", c.Safety},
		{"margin", "a share of the window", c.Margin}, {"max_ref_tokens", "tokens", float64(c.MaxRefTokens)}} {
		if f.v < 0 {
			// Else ignored below, as zero is: a typo'd sign would go unseen.
			errs = append(errs, fmt.Errorf("%w: window.%s is %v: %s, not negative (0 keeps the default)", ErrInvalidSettings, f.name, f.v, f.what))
		}
	}
	if c.Output > 0 {
		d.Output = c.Output
	}
	if c.Safety > 0 {
		d.Safety = c.Safety
	}
	if c.Margin > 0 {
		d.Margin = c.Margin
	}
	if c.MaxRefTokens > 0 {
		d.MaxRefTokens = c.MaxRefTokens
	}
	if len(errs) == 0 && d.Safety+d.Margin >= 1 {
		errs = append(errs, fmt.Errorf("%w: window.safety (%.2f) and window.margin (%.2f) are shares of the window that together must leave some of it", ErrInvalidSettings, d.Safety, d.Margin))
	}
	ps = maps.Clone(ps)
	for _, role := range slices.Sorted(maps.Keys(c.Policies)) {
		p := c.Policies[role]
		if p.MaxRefTokens == 0 {
			p.MaxRefTokens = d.MaxRefTokens
		}
		if err := p.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("window.roles.%s: %w", role, err))
		}
		ps[strings.ToLower(role)] = p
	}
	if len(errs) > 0 {
		return Defaults{}, nil, errors.Join(errs...)
	}
	return d, ps, nil
}

// KnownRole reports whether role names a policy of the Manager's (the
// built-in roles and those configured); any other role gets the default
// role's.
func (m *Manager) KnownRole(role string) bool {
	_, ok := m.policies[strings.ToLower(role)]
	return ok
}

// Roles are the roles the Manager has a policy of, sorted: the built-in
// roles and those configured.
func (m *Manager) Roles() []string {
	return slices.Sorted(maps.Keys(m.policies))
}

// policyFor returns the policy of a role, the default role's for one the
// policies do not name.
func (m *Manager) policyFor(role string) Policy {
	p, ok := m.policies[strings.ToLower(role)]
	if !ok {
		p = m.policies[DefaultRole]
	}
	if p.MaxRefTokens == 0 {
		p.MaxRefTokens = m.defaults.MaxRefTokens
	}
	return p
}

// limitsFor returns the limits of a model of the catalog, with the
// Manager's defaults.
func (m *Manager) limitsFor(model tokens.Model) Limits {
	l := Limits{Context: model.ContextWindow, Output: m.defaults.Output, Safety: int(m.defaults.Safety * float64(model.ContextWindow))}
	if model.MaxOutput > 0 {
		l.Output = min(l.Output, model.MaxOutput)
	}
	if !model.Exact {
		l.Margin = m.defaults.Margin
	}
	return l
}

// NewManager returns a Manager over the engine's store, with the model
// catalog that gives windows their limits and encodings.
func NewManager(eng *engine.Engine, cat *tokens.Catalog) *Manager {
	return &Manager{eng: eng, cat: cat, now: time.Now, layouts: map[store.WindowKey]*laidOut{}, views: map[store.WindowKey][]*viewCache{}, spans: map[string]string{}, policies: maps.Clone(Policies),
		defaults: builtinDefaults}
}

// OpenOptions say how to open a window. Zero fields keep what an existing
// window has, or take the defaults.
type OpenOptions struct {
	// Role is the agent's role (see Policies); default DefaultRole.
	Role string
	// Model names a model of the catalog: its context window and encoding.
	Model string
	// Limit is the context window in tokens, instead of the model's.
	Limit int
	// Output and Safety override the reservations (see Limits).
	Output, Safety int
	// Policy, if set, replaces the role's policy (PolicyFor).
	Policy *Policy
}

// ErrNoSize is returned by Open for a new window with neither a model
// nor a limit.
var ErrNoSize = errors.New("a window needs a model or a context limit")

// maxRoleBytes bounds a window's role: a name, such as "engineer".
const maxRoleBytes = 64

// Open opens the window of an agent of a session, creating it or changing
// its settings; a model switch keeps the window's messages.
func (m *Manager) Open(ctx context.Context, key store.WindowKey, o OpenOptions) (Status, error) {
	if err := key.Validate(); err != nil {
		return Status{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	st := m.eng.Store()
	var s Settings
	w, err := st.Window(ctx, key)
	switch {
	case err == nil:
		if err := json.Unmarshal(w.Settings, &s); err != nil {
			return Status{}, fmt.Errorf("window %s: settings: %w", key, err)
		}
	case errors.Is(err, store.ErrNotFound):
		if err := checkName("session", key.SessionID); err != nil {
			return Status{}, err
		}
		if err := checkAgent(key.AgentID); err != nil {
			return Status{}, err
		}
		if o.Model == "" && o.Limit <= 0 {
			return Status{}, fmt.Errorf("window %s: %w", key, ErrNoSize)
		}
		s = Settings{Role: DefaultRole, Encoding: tokens.O200kBase}
	default:
		return Status{}, err
	}
	if o.Role != "" {
		// Printed in status and lists: one line, no control characters.
		if err := store.CheckName("role", o.Role); err != nil || len(o.Role) > maxRoleBytes {
			shown := o.Role
			if len(shown) > maxRoleBytes {
				shown = shown[:maxRoleBytes] + "…"
			}
			return Status{}, fmt.Errorf("%w: role %q: a role is at most %d bytes of UTF-8 with no control characters", ErrInvalidSettings, shown, maxRoleBytes)
		}
	}
	if o.Role != "" || s.Policy.Strategy == "" {
		s.Role = cmp.Or(strings.ToLower(o.Role), s.Role)
		s.Policy = m.policyFor(s.Role)
	}
	if o.Policy != nil {
		s.Policy = *o.Policy
		if s.Policy.MaxRefTokens == 0 {
			s.Policy.MaxRefTokens = m.defaults.MaxRefTokens
		}
	}
	if o.Model != "" {
		model, ok := m.cat.Lookup(o.Model)
		if !ok {
			return Status{}, fmt.Errorf("%w: unknown model %q (engram models lists those engram knows; or give a context limit)", ErrInvalidSettings, o.Model)
		}
		s.Model, s.Encoding, s.Limits = model.Name, model.Encoding, m.limitsFor(model)
	}
	if o.Limit > 0 {
		s.Limits.Context = o.Limit
		// The reservations are the limit's, not the model's context's:
		// 2 % of a 200k context is a fifth of a 20k limit.
		s.Limits.Safety = int(m.defaults.Safety * float64(o.Limit))
		if s.Model == "" {
			// Without a model engram cannot know the tokenizer.
			s.Limits.Output = min(m.defaults.Output, o.Limit/4)
			s.Limits.Margin = m.defaults.Margin
		} else {
			s.Limits.Output = min(s.Limits.Output, o.Limit/4)
		}
	}
	if o.Output > 0 {
		s.Limits.Output = o.Output
	}
	if o.Safety > 0 {
		s.Limits.Safety = o.Safety
	}
	if err := s.Limits.Validate(); err != nil {
		return Status{}, err
	}
	if err := s.Policy.Validate(); err != nil {
		return Status{}, err
	}
	if b := s.Limits.Budget(); b < MinBudget {
		return Status{}, fmt.Errorf("%w: a %d-token context less %d for output, %d of safety and a %.0f %% margin leaves %d tokens, under the %d a window needs",
			ErrInvalidSettings, s.Limits.Context, s.Limits.Output, s.Limits.Safety, 100*s.Limits.Margin, b, MinBudget)
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return Status{}, err
	}
	if w.Version > 0 && bytes.Equal(raw, w.Settings) {
		// Opened again as it is: nothing to write or lay out anew.
		return m.Status(ctx, key)
	}
	if _, err := st.PutWindow(ctx, key, raw); err != nil {
		return Status{}, err
	}
	if w.Version > 0 {
		// A window that was open is laid out anew, as of its new settings.
		unlock := m.lock(key)
		var err error
		for attempt := 0; ; attempt++ {
			if err = m.relay(ctx, key, s); !errors.Is(err, errStale) || attempt >= 8 {
				break
			}
		}
		unlock()
		if err != nil {
			return Status{}, err
		}
	}
	return m.Status(ctx, key)
}

// settings reads a window's head and settings.
func (m *Manager) settings(ctx context.Context, key store.WindowKey) (store.Window, Settings, error) {
	var s Settings
	w, err := m.eng.Store().Window(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return w, s, fmt.Errorf("no window for agent %q of session %q (open it first): %w", key.AgentID, key.SessionID, store.ErrNotFound)
	}
	if err != nil {
		return w, s, err
	}
	if err := json.Unmarshal(w.Settings, &s); err != nil {
		return w, s, fmt.Errorf("window %s: settings: %w", key, err)
	}
	return w, s, nil
}

// form is what a window's ledger keeps of a message besides its content:
// its role, its blocks' types and tool ids, which block holds which
// entry, and the entities its content names (for markers).
type form struct {
	Role     Role        `json:"role"`
	Blocks   []formBlock `json:"blocks"`
	Pinned   bool        `json:"pinned,omitempty"`
	Shape    *Shape      `json:"shape,omitempty"`
	Entities []string    `json:"entities,omitempty"`
}

type formBlock struct {
	Type      BlockType `json:"type"`
	ID        string    `json:"id,omitempty"`
	ToolUseID string    `json:"tool_use_id,omitempty"`
	Name      string    `json:"name,omitempty"`
	IsError   bool      `json:"is_error,omitempty"`
	// Raw: the block's content is its Raw form.
	Raw bool `json:"raw,omitempty"`
	// Entry is the index in the item's EntryIDs of the block's content,
	// -1 for a block with none.
	Entry int `json:"entry"`
}

// content returns a block's bytes, as stored: its raw form if it has
// one, else a call's input or the text.
func (b *Block) content() []byte {
	switch {
	case len(b.Raw) > 0:
		return b.Raw
	case b.Type == BlockToolUse:
		return b.Input
	}
	return []byte(b.Text)
}

// setContent puts stored bytes back where content took them from.
func (b *Block) setContent(c []byte, raw bool) {
	switch {
	case raw:
		b.Raw = json.RawMessage(c)
	case b.Type == BlockToolUse:
		b.Input = json.RawMessage(c)
	default:
		b.Text = string(c)
	}
}

// Redacted is m as a window stores it when the store redacts secrets:
// each block's content with the secrets it holds redacted, as the engine
// redacts an entry's. A harness resends what it sent, secrets and all;
// this is what names it as the window holds it.
func (m Message) Redacted() Message {
	out := m
	out.Blocks = slices.Clone(m.Blocks)
	for i := range out.Blocks {
		b := &out.Blocks[i]
		c := b.content()
		if len(c) == 0 {
			continue
		}
		if text, found := secrets.RedactContent(string(c)); len(found) > 0 {
			b.setContent([]byte(text), len(b.Raw) > 0)
		}
	}
	return out
}

// blockType is the content type a block's entry is stored as.
func blockType(m *Message, b *Block) store.ContentType {
	switch b.Type {
	case BlockToolUse:
		return store.ToolCall
	case BlockToolResult:
		return store.ToolResult
	}
	return m.Type()
}

// messageOverhead is what a message costs beyond its content: the
// framing of its role and blocks in a vendor's request.
const messageOverhead = 4

// AppendResult reports an append: the window after it and what it
// evicted.
type AppendResult struct {
	Status
	// Positions are the appended messages' places in the ledger.
	Positions []int `json:"positions"`
	// Evicted are the references the append's eviction made.
	Evicted []Ref `json:"evicted"`
	// Redacted names, by message, the kinds of secrets removed from its
	// content before it was stored.
	Redacted [][]string `json:"redacted,omitempty"`
	// Checkpoint is set when the append took the window past one of its
	// policy's checkpoints: the time to save the session's state (its
	// resume point) with the archivalist, before anything is evicted.
	Checkpoint bool `json:"checkpoint,omitempty"`
	// Replayed is set when the append's id (AppendOnce) was appended
	// before: nothing was written again, and Positions are the first
	// append's.
	Replayed bool `json:"replayed,omitempty"`
}

// appendDigest is what an append's items are, for AppendOnce to tell a
// retry from another append under the same id: their forms (roles,
// blocks, pins) and the entries holding their content. A form's entities
// are left out: they are read from the content as the store holds it,
// which an operator's redaction between an append and its retry changes
// while the entries (named by the content as sent) stay; the entries
// stand for the content already.
func appendDigest(items []store.WindowItem, forms []form) (string, error) {
	h := sha256.New()
	for i, it := range items {
		f := forms[i]
		f.Entities = nil
		b, err := json.Marshal(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%d:%s|%d:%s|%t\n", len(b), b, len(it.EntryIDs), strings.Join(it.EntryIDs, ","), it.Pinned)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Ref is a reference a window made: its marker and what it stands for.
type Ref struct {
	ID       string `json:"id"`
	Marker   string `json:"marker"`
	From     int    `json:"from"`
	To       int    `json:"to"`
	Messages int    `json:"messages"`
	Tokens   int    `json:"tokens"`
}

// Append adds messages to a window, in order, as one turn: their content
// is stored first, then the window evicts what its policy says, all in
// one transaction. A tool result must follow its call (in this append or
// an earlier one); a message's tokens are counted here, in the window's
// encoding, whatever Tokens says. msgs are not changed (the window
// holds its own copies of their blocks), so the caller may send them
// again.
func (m *Manager) Append(ctx context.Context, key store.WindowKey, msgs []Message) (AppendResult, error) {
	res, _, err := m.appendWith(ctx, key, msgs, "", nil, false)
	return res, err
}

// AppendOnce is Append under id, the caller's key for this append
// (store.ValidAppendKey: 1 to 255 bytes of printable ASCII), so that an
// append tried again, because its answer never came, is made once. An
// id the window holds for the same messages writes nothing and returns
// the window as it is now, with the first append's positions and
// Replayed set (its evictions are not reported again); for other
// messages it is a *store.ConflictError. Messages are the same when the
// window would store them the same: their content (as stored, secrets
// redacted), roles, blocks and pins.
func (m *Manager) AppendOnce(ctx context.Context, key store.WindowKey, id string, msgs []Message) (AppendResult, error) {
	if err := store.ValidAppendKey(id); err != nil {
		return AppendResult{}, err
	}
	res, _, err := m.appendWith(ctx, key, msgs, id, nil, false)
	return res, err
}

// appendWith is Append, storing the records extra too, first, in the same
// transaction, as entries no message of the window holds; it returns
// their entries as stored. With handoff set, the caller holds the window's
// lock, and the window must have no messages (a *store.ConflictError
// otherwise, nothing written).
func (m *Manager) appendWith(ctx context.Context, key store.WindowKey, msgs []Message, id string, extra []engine.Record, handoff bool) (AppendResult, []store.Entry, error) {
	_, s, err := m.settings(ctx, key)
	if err != nil {
		return AppendResult{}, nil, err
	}
	if len(msgs) == 0 && len(extra) == 0 {
		st, err := m.Status(ctx, key)
		return AppendResult{Status: st, Positions: []int{}, Evicted: []Ref{}}, nil, err
	}
	enc, err := tokens.Get(s.Encoding)
	if err != nil {
		return AppendResult{}, nil, err
	}
	// The window's own copies of the messages, blocks and all: the
	// stored content is put back into the blocks below (secrets and what
	// an operator redacted taken out), and the caller's messages must stay
	// as sent, so that an append tried again with them is the same
	// append, and a layout kept in memory does not share their blocks.
	msgs = slices.Clone(msgs)
	for i := range msgs {
		msgs[i].Blocks = slices.Clone(msgs[i].Blocks)
	}
	recs := slices.Clone(extra)
	type placed struct{ msg, block int }
	var where []placed
	for i := range msgs {
		msg := &msgs[i]
		if err := msg.Validate(); err != nil {
			return AppendResult{}, nil, fmt.Errorf("message %d: %w", i, err)
		}
		for j := range msg.Blocks {
			b := &msg.Blocks[j]
			c := b.content()
			if len(c) == 0 {
				continue
			}
			meta := map[string]any{"window_role": string(msg.Role), "block": string(b.Type)}
			if b.Name != "" {
				meta["tool"] = b.Name
			}
			recs = append(recs, engine.Record{Session: key.SessionID, Agent: key.AgentID, AgentType: s.Role,
				Type: blockType(msg, b), Content: c, Time: m.now(), Metadata: meta})
			where = append(where, placed{i, j})
		}
	}
	batch, err := m.eng.Prepare(ctx, recs)
	if err != nil {
		return AppendResult{}, nil, err
	}
	all := batch.Entries()
	// The extra records' entries come first; entries[k] is where[k]'s.
	entries, redactedAt := all[len(extra):], batch.Redacted()[len(extra):]
	// What the window holds of each message is what the store holds: its
	// content with any secret redacted (its names, noted in the ledger,
	// are read from that too), and content an operator redacted since it
	// was first stored as the store holds it.
	// ids are the entries' IDs, as the store names them: the hash of
	// the content as prepared.
	ids := make([]string, len(entries))
	for k := range entries {
		ids[k] = store.ID(entries[k].Content)
	}
	stored, err := m.redactedStored(ctx, ids)
	if err != nil {
		return AppendResult{}, nil, err
	}
	if len(stored) > 0 {
		entries = slices.Clone(entries)
		for k := range entries {
			if e, ok := stored[ids[k]]; ok {
				entries[k].Content, entries[k].TokenCount = e.Content, e.TokenCount
			}
		}
	}
	for k, p := range where {
		msgs[p.msg].Blocks[p.block].setContent(entries[k].Content, len(msgs[p.msg].Blocks[p.block].Raw) > 0)
	}
	// A message's tokens in the window's encoding: the engine counted its
	// blocks' content already if it counts in the same one.
	// A block of media is counted at its vendor's rates (RawTokens).
	same := m.eng.EncodingName() == s.Encoding
	for i := range msgs {
		msgs[i].Tokens = messageOverhead
		for _, b := range msgs[i].Blocks {
			msgs[i].Tokens += enc.Count(b.Name)
			switch {
			case holdsMedia(b.Raw):
				msgs[i].Tokens += RawTokens(b.Raw, enc.Count)
			case !same:
				msgs[i].Tokens += enc.Count(string(b.content()))
			}
		}
	}
	if same {
		for k, p := range where {
			if !holdsMedia(msgs[p.msg].Blocks[p.block].Raw) {
				msgs[p.msg].Tokens += entries[k].TokenCount
			}
		}
	}
	redacted := make([][]string, len(msgs))
	now := m.now()
	a := store.WindowAppend{Entries: all, Items: make([]store.WindowItem, len(msgs))}
	forms := make([]form, len(msgs))
	for i := range msgs {
		forms[i] = form{Role: msgs[i].Role, Pinned: msgs[i].Pinned, Shape: msgs[i].Shape, Blocks: make([]formBlock, len(msgs[i].Blocks))}
		for j, b := range msgs[i].Blocks {
			forms[i].Blocks[j] = formBlock{Type: b.Type, ID: b.ID, ToolUseID: b.ToolUseID, Name: b.Name, IsError: b.IsError,
				Raw: len(b.Raw) > 0, Entry: -1}
		}
		forms[i].Entities = entitiesOf(&msgs[i])
		msgs[i].Entities = forms[i].Entities
	}
	for k, p := range where {
		it := &a.Items[p.msg]
		forms[p.msg].Blocks[p.block].Entry = len(it.EntryIDs)
		it.EntryIDs = append(it.EntryIDs, ids[k])
		redacted[p.msg] = append(redacted[p.msg], redactedAt[k]...)
	}
	for i := range msgs {
		raw, err := json.Marshal(forms[i])
		if err != nil {
			return AppendResult{}, nil, err
		}
		a.Items[i].Form, a.Items[i].Tokens, a.Items[i].Pinned = raw, msgs[i].Tokens, msgs[i].Pinned
		// When it was appended, as the store will give it back.
		a.Items[i].Time = time.Unix(0, now.UnixNano()).UTC()
		msgs[i].Time = a.Items[i].Time
	}
	if !slices.ContainsFunc(redacted, func(r []string) bool { return len(r) > 0 }) {
		redacted = nil
	}
	if id != "" {
		a.Key = id
		if a.Digest, err = appendDigest(a.Items, forms); err != nil {
			return AppendResult{}, nil, err
		}
	}
	var (
		st  Status
		due bool
	)
	items, refs, err := m.appendLaidOut(ctx, key, s, a, msgs, &st, &due, handoff)
	if ae := (*store.AppendedError)(nil); errors.As(err, &ae) {
		st, err := m.Status(ctx, key)
		if err != nil {
			return AppendResult{}, nil, err
		}
		res := AppendResult{Status: st, Positions: make([]int, ae.Count), Evicted: []Ref{}, Redacted: redacted, Replayed: true}
		for i := range res.Positions {
			res.Positions[i] = ae.From + i
		}
		return res, nil, nil
	}
	if err != nil {
		return AppendResult{}, nil, err
	}
	res := AppendResult{Status: st, Positions: make([]int, len(items)), Evicted: refs, Redacted: redacted, Checkpoint: due}
	for i, it := range items {
		res.Positions[i] = it.Pos
	}
	return res, all[:len(extra)], nil
}

// redactedStored returns, by ID, the entries of ids (an append's) that
// the store holds already redacted by an operator (engram redact). A
// redacted entry keeps its ID, the hash of its content as it was, so
// content stored again with the string is taken for it and stays
// redacted: a window that held the content as appended would show the
// string, and the same window laid out anew from the store would not.
// Nothing is read from a store that never forgot nor redacted anything.
func (m *Manager) redactedStored(ctx context.Context, ids []string) (map[string]store.Entry, error) {
	st := m.eng.Store()
	if n, err := st.Purges(ctx); err != nil || n == 0 {
		return nil, err
	}
	out := map[string]store.Entry{}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		// One at a time: Entries refuses a batch with an ID not stored.
		got, err := st.Entries(ctx, []string{id})
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if len(got) == 1 && got[0].Redacted {
			out[id] = got[0]
		}
	}
	return out, nil
}

// decoded is a window's ledger read back: each item's message (without
// content) and form.
type decoded struct {
	items []store.WindowItem
	forms []form
	msgs  []Message
}

func decode(items []store.WindowItem) (*decoded, error) {
	d := &decoded{items: items, forms: make([]form, len(items)), msgs: make([]Message, len(items))}
	for i, it := range items {
		if err := json.Unmarshal(it.Form, &d.forms[i]); err != nil {
			return nil, fmt.Errorf("item %d: form: %w", it.Pos, err)
		}
		f := &d.forms[i]
		msg := Message{Role: f.Role, Tokens: it.Tokens, Pinned: it.Pinned, Shape: f.Shape, Entities: f.Entities, Time: it.Time, Blocks: make([]Block, len(f.Blocks))}
		if msg.Entities == nil {
			msg.Entities = []string{}
		}
		for j, b := range f.Blocks {
			msg.Blocks[j] = Block{Type: b.Type, ID: b.ID, ToolUseID: b.ToolUseID, Name: b.Name, IsError: b.IsError}
		}
		d.msgs[i] = msg
	}
	return d, nil
}

// entitiesOf returns the names a message mentions most, at most eight,
// for the markers of the references it goes under: paths and dotted
// names (a word of letters, digits and _ . / - holding a / or an inner
// .) and long identifiers (eight characters or more).
func entitiesOf(m *Message) []string {
	counts := map[string]int{}
	for _, b := range m.Blocks {
		text := b.content()
		if len(b.Raw) > 0 && (b.Type == BlockText || b.Type == BlockToolResult) {
			// Its text, not its JSON: no field names, ids or escapes
			// ("\nsrc/a.go" read as the name nsrc/a.go), no base64.
			text = []byte(readable(&b, false))
		} else if ms := FindMedia(b.Raw); len(ms) > 0 {
			// A picture's base64 holds no names, but many words with a /.
			text = withoutPayloads(b.Raw, ms)
		}
		if len(text) > 64<<10 {
			// Read the first 64 KiB, not cutting a name in two.
			cut := 64 << 10
			for cut > 0 && nameByte(text[cut]) {
				cut--
			}
			text = text[:cut]
		}
		for i := 0; i < len(text); {
			if !nameByte(text[i]) {
				i++
				continue
			}
			j := i
			for j < len(text) && nameByte(text[j]) {
				j++
			}
			if w := trimName(text[i:j]); isEntity(w) {
				counts[string(w)]++
			}
			i = j
		}
		if b.Name != "" {
			counts[b.Name]++
		}
	}
	return topEntities(counts, 8)
}

// withoutPayloads is raw without the payloads of its media ms.
func withoutPayloads(raw []byte, ms []Media) []byte {
	out := make([]byte, 0, len(raw))
	at := 0
	for _, m := range ms {
		out = append(out, raw[at:m.Start]...)
		at = m.End
	}
	return append(out, raw[at:]...)
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '/' || c == '-'
}

// trimName drops the punctuation a name does not end with (a sentence's
// full stop, a trailing slash).
func trimName(w []byte) []byte {
	for len(w) > 0 && (w[len(w)-1] == '.' || w[len(w)-1] == '/' || w[len(w)-1] == '-') {
		w = w[:len(w)-1]
	}
	return w
}

func isEntity(w []byte) bool {
	if len(w) < 4 || w[0] == '.' || w[0] == '-' {
		return false
	}
	if bytes.ContainsAny(w, "/.") {
		return true
	}
	if len(w) < 8 || w[0] >= '0' && w[0] <= '9' || bytes.ContainsRune(w, '-') {
		return false
	}
	return true
}

// topEntities returns the n most counted, ties by name.
func topEntities(counts map[string]int, n int) []string {
	out := make([]string, 0, len(counts))
	for e := range counts {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b string) int {
		if c := cmp.Compare(counts[b], counts[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return out[:min(n, len(out))]
}

// Status is where a window stands.
type Status struct {
	SessionID string   `json:"session_id"`
	AgentID   string   `json:"agent_id"`
	Settings  Settings `json:"settings"`
	Version   int64    `json:"version"`
	// Budget is the most tokens the window may hold; Used what it holds:
	// its messages and the markers of what it evicted.
	Budget int `json:"budget"`
	Used   int `json:"used"`
	// EvictAt and Target are the tokens at which it evicts and down to
	// which; Checkpoints those at which a checkpoint is due.
	EvictAt     int   `json:"evict_at"`
	Target      int   `json:"target"`
	Checkpoints []int `json:"checkpoints"`
	// HandoffAt is the tokens at which the agent is due to hand off to a
	// new instance (Handoff), zero for a role that does not; HandoffDue
	// says it is: the window holds that much, or has had to evict since.
	HandoffAt  int  `json:"handoff_at,omitempty"`
	HandoffDue bool `json:"handoff_due,omitempty"`
	// Messages are the messages in the window, Evicted those out of it,
	// under Refs references.
	Messages int `json:"messages"`
	Evicted  int `json:"evicted"`
	Refs     int `json:"refs"`
}

// Status reports where a window stands.
func (m *Manager) Status(ctx context.Context, key store.WindowKey) (Status, error) {
	w, s, err := m.settings(ctx, key)
	if err != nil {
		return Status{}, err
	}
	return m.laidOutStatus(ctx, key, s, w)
}

// status makes a window's Status from its counts; fixed is what it can
// never evict, above which the thresholds of eviction are shares of the
// room (as its Layout evicts).
func (m *Manager) status(key store.WindowKey, s Settings, w store.Window, live, evicted, used, refs, fixed int) Status {
	b := s.Limits.Budget()
	room := float64(max(0, b-fixed))
	st := Status{SessionID: key.SessionID, AgentID: key.AgentID, Settings: s, Version: w.Version, Budget: b, Used: used,
		EvictAt: fixed + int(s.Policy.Evict*room), Target: fixed + int(s.Policy.Target*room), Checkpoints: []int{},
		Messages: live, Evicted: evicted, Refs: refs}
	for _, c := range s.Policy.Checkpoints {
		st.Checkpoints = append(st.Checkpoints, int(c*float64(b)))
	}
	if s.Policy.Handoff > 0 {
		// An agent that did not hand off stays due once its window evicts
		// (as a fallback) down below the threshold.
		st.HandoffAt = int(s.Policy.Handoff * float64(b))
		st.HandoffDue = used >= st.HandoffAt || evicted > 0
	}
	return st
}

// Item is one piece of a window's context: a message, or the marker of a
// reference standing for evicted messages.
type Item struct {
	// Pos is the message's place in the ledger, or the first place of the
	// messages a marker stands for.
	Pos     int      `json:"pos"`
	Message *Message `json:"message,omitempty"`
	RefID   string   `json:"ref_id,omitempty"`
	Marker  string   `json:"marker,omitempty"`
	// Excerpt is text a window keeps verbatim from messages it no longer
	// shows whole (a digest's lines, a clipped message's head and tail).
	Excerpt string `json:"excerpt,omitempty"`
}

// Context returns a window's context, in order: the messages it shows
// whole, with their content, a marker where each evicted run stood, and
// the excerpts it keeps of messages it does not show whole (a digest's
// lines, a clipped message's head and tail).
func (m *Manager) Context(ctx context.Context, key store.WindowKey) ([]Item, error) {
	w, s, err := m.settings(ctx, key)
	if err != nil {
		return nil, err
	}
	return m.laidOutContext(ctx, key, s, w)
}

// fill reads the content of the items at idx into their messages.
func (m *Manager) fill(ctx context.Context, d *decoded, idx []int) error {
	var ids []string
	for _, i := range idx {
		ids = append(ids, d.items[i].EntryIDs...)
	}
	if len(ids) == 0 {
		return nil
	}
	entries, err := m.eng.Store().Entries(ctx, ids)
	if err != nil {
		return err
	}
	content := make(map[string][]byte, len(entries))
	for _, e := range entries {
		content[e.ID] = e.Content
	}
	for _, i := range idx {
		for j, fb := range d.forms[i].Blocks {
			if fb.Entry < 0 {
				continue
			}
			c := content[d.items[i].EntryIDs[fb.Entry]]
			if (fb.Raw || fb.Type == BlockToolUse) && len(c) > 0 && !json.Valid(c) {
				// JSON a secret's redaction cut short, as text redaction
				// did before it kept JSON whole: shown as the JSON string
				// of what is stored, rather than the window unreadable.
				c, _ = json.Marshal(string(c))
			}
			d.msgs[i].Blocks[j].setContent(c, fb.Raw)
		}
	}
	return nil
}

// Expand returns the messages a reference of a window stands for, byte
// for byte as they were appended (but for secrets, which never enter the
// store), tool calls with their results.
func (m *Manager) Expand(ctx context.Context, refID string) ([]Message, error) {
	ref, err := m.eng.Store().Reference(ctx, refID)
	if err != nil {
		return nil, err
	}
	key := store.WindowKey{SessionID: ref.SessionID, AgentID: ref.AgentID}
	items, err := m.eng.Store().WindowItems(ctx, key, ref.TurnFrom-1, ref.TurnTo)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("reference %s is not a window's: %w", refID, store.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	// The messages a reference stands for are those of its places (read
	// alone), under it, under a reference that took it over, or back in
	// the window.
	if len(items) == 0 {
		return nil, fmt.Errorf("reference %s is not a window's: %w", refID, store.ErrNotFound)
	}
	return m.messages(ctx, items)
}

// messages reads items back as the messages they are, with content.
func (m *Manager) messages(ctx context.Context, items []store.WindowItem) ([]Message, error) {
	d, err := decode(items)
	if err != nil {
		return nil, err
	}
	all := make([]int, len(items))
	for i := range all {
		all[i] = i
	}
	if err := m.fill(ctx, d, all); err != nil {
		return nil, err
	}
	return d.msgs, nil
}

// ErrNoRoom is returned by Readmit when a reference's messages cannot
// fit in the window's budget.
var ErrNoRoom = errors.New("no room in the window")

// Readmit brings the messages a reference stands for back into their
// window whole, in their places, and evicts what the policy says to make
// room (never them, never the newest unit). It is refused, with nothing
// changed, when they cannot fit so in the budget (ErrNoRoom). The reference stays: its markers
// still expand, and if the run is evicted again alone it goes back under
// it. The re-admission is kept in the window's ledger, so that the window
// laid out again takes them back at the same point. A reference whose
// run lost a message to a forget since brings back what
// is left of it, under the reference that now stands for that.
func (m *Manager) Readmit(ctx context.Context, refID string) (AppendResult, error) {
	ref, err := m.eng.Store().Reference(ctx, refID)
	if err != nil {
		return AppendResult{}, err
	}
	key := store.WindowKey{SessionID: ref.SessionID, AgentID: ref.AgentID}
	_, s, err := m.settings(ctx, key)
	if err != nil {
		return AppendResult{}, err
	}
	return m.readmitLaidOut(ctx, key, s, ref)
}
