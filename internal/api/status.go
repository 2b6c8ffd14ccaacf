package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/index"
	"github.com/engramhq/engram/internal/metrics"
	"github.com/engramhq/engram/internal/store"
)

// The status API's overviews, for the dashboard and for scripts: every
// session with its resume point (Sessions), the repository index and its
// embeddings (IndexStatus), and the whole server at a glance with what
// its windows saved (Status). A window's timeline is in timeline.go.

// SessionsLimitRange is the range of a list of sessions' length.
var SessionsLimitRange = Range{Name: "limit", Min: 1, Max: 1000, Default: 100}

// SessionsIn lists sessions.
type SessionsIn struct {
	Limit int `json:"limit,omitempty" jsonschema:"most sessions, most recently seen first, 1-1000 (default 100)"`
}

// SessionOut is a session: its agents (registered in the content store),
// its windows, and its resume point when the archivalist holds one.
type SessionOut struct {
	Session   string          `json:"session"`
	Name      string          `json:"name,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	LastSeen  time.Time       `json:"last_seen"`
	Agents    int             `json:"agents"`
	Windows   int             `json:"windows"`
	Resume    *archive.Resume `json:"resume,omitempty"`
}

// SessionsOut is a list of sessions, most recently seen first: Total
// says how many there are, of which the first Limit are listed.
type SessionsOut struct {
	Sessions []SessionOut `json:"sessions"`
	Total    int          `json:"total"`
}

// Sessions lists the sessions the content store knows (a session only
// the archivalist knows, with no content recorded, is not among them),
// most recently seen first, with their agents and windows counted and
// their resume points. It costs three reads (sessions, agents, windows)
// and one read of the archivalist's state per session listed.
func (o *Ops) Sessions(ctx context.Context, in SessionsIn) (SessionsOut, string, error) {
	limit, err := SessionsLimitRange.Check(in.Limit)
	if err != nil {
		return SessionsOut{}, "", err
	}
	st := o.Eng.Store()
	ss, err := st.Sessions(ctx)
	if err != nil {
		return SessionsOut{}, "", err
	}
	agents, err := st.Agents(ctx, "")
	if err != nil {
		return SessionsOut{}, "", err
	}
	ws, err := st.Windows(ctx, "")
	if err != nil {
		return SessionsOut{}, "", err
	}
	nAgents, nWindows := map[string]int{}, map[string]int{}
	for _, a := range agents {
		nAgents[a.SessionID]++
	}
	for _, w := range ws {
		nWindows[w.SessionID]++
	}
	arc, err := o.Eng.Archive(ctx)
	if err != nil {
		return SessionsOut{}, "", err
	}
	out := SessionsOut{Sessions: []SessionOut{}, Total: len(ss)}
	var b strings.Builder
	for _, s := range ss[:min(limit, len(ss))] {
		so := SessionOut{Session: s.ID, Name: s.Name, CreatedAt: s.CreatedAt, LastSeen: s.LastSeenAt, Agents: nAgents[s.ID], Windows: nWindows[s.ID]}
		sr, err := arc.ReadSession(ctx, s.ID, 0)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return SessionsOut{}, "", fmt.Errorf("session %s: %w", s.ID, err)
		case sr.Resume != nil && !emptyResume(*sr.Resume):
			so.Resume = sr.Resume
		}
		out.Sessions = append(out.Sessions, so)
		fmt.Fprintf(&b, "%s  last seen %s, %s, %s", s.ID, s.LastSeenAt.Local().Format(time.DateTime), plural(so.Agents, "agent"), plural(so.Windows, "window"))
		if r := so.Resume; r != nil {
			fmt.Fprintf(&b, "; resume: %s", cmp.Or(r.Current, r.Task, r.Objective, strings.Join(r.Next, "; ")))
		}
		b.WriteString("\n")
	}
	switch {
	case len(ss) == 0:
		b.WriteString("no sessions")
	case len(ss) > limit:
		fmt.Fprintf(&b, "(%d of %d sessions)", limit, len(ss))
	}
	return out, strings.TrimSuffix(b.String(), "\n"), nil
}

// emptyResume reports whether a resume point says nothing.
func emptyResume(r archive.Resume) bool {
	return r.Task == "" && r.Objective == "" && r.Current == "" && len(r.Done) == 0 && len(r.Next) == 0 &&
		len(r.Blockers) == 0 && len(r.FilesToRead) == 0
}

// EmbeddingsOut is the embeddings' coverage: Chunks in default search,
// Embedded with a vector under Model, Pending the queue, Coverage
// Embedded over Chunks (0 with no chunk).
type EmbeddingsOut struct {
	Provider string  `json:"provider"`
	Model    string  `json:"model"`
	Chunks   int64   `json:"chunks"`
	Embedded int64   `json:"embedded"`
	Pending  int64   `json:"pending"`
	Coverage float64 `json:"coverage"`
}

// IndexOut is the repository index: its files by state, what the store
// holds, the embeddings, and, when this server watches the project
// (Watching), the watcher's live state.
type IndexOut struct {
	Files        map[string]int64     `json:"files"`
	Chunks       int64                `json:"chunks"`
	Entries      int64                `json:"entries"`
	TokensStored int64                `json:"tokens_stored"`
	Embeddings   EmbeddingsOut        `json:"embeddings"`
	Watching     bool                 `json:"watching"`
	Live         *index.ActivityState `json:"live,omitempty"`
}

// IndexStatus reports the repository index and its embeddings, and the
// watcher's live state when o.Index is set (this server indexes). It
// costs the store's statistics and the embeddings' coverage: two reads.
func (o *Ops) IndexStatus(ctx context.Context) (IndexOut, string, error) {
	// The watcher's report first: the counts read after it hold what it
	// reports written.
	var live *index.ActivityState
	if o.Index != nil {
		l := o.Index.Snapshot()
		live = &l
	}
	st, err := o.Eng.Stats(ctx)
	if err != nil {
		return IndexOut{}, "", err
	}
	es, err := o.Eng.EmbedStatus(ctx)
	if err != nil {
		return IndexOut{}, "", err
	}
	out := IndexOut{Files: map[string]int64{}, Chunks: st.Chunks, Entries: st.Entries, TokensStored: st.Tokens,
		Embeddings: embeddingsOut(es), Watching: o.Index != nil}
	var total int64
	for state, n := range st.Files {
		out.Files[string(state)] = n
		total += n
	}
	out.Live = live
	var b strings.Builder
	fmt.Fprintf(&b, "index: %d files", total)
	for _, state := range []store.FileState{store.FileCurrent, store.FileSkipped, store.FileDeleted} {
		if n := st.Files[state]; n > 0 {
			fmt.Fprintf(&b, ", %d %s", n, state)
		}
	}
	fmt.Fprintf(&b, "; %d chunks, %d entries, %d tokens stored\n", st.Chunks, st.Entries, st.Tokens)
	e := out.Embeddings
	fmt.Fprintf(&b, "embeddings (%s %s): %d of %d chunks (%.0f%%), %d pending", e.Provider, e.Model, e.Embedded, e.Chunks, 100*e.Coverage, e.Pending)
	if l := out.Live; l != nil {
		fmt.Fprintf(&b, "\nwatching: %d paths pending", l.Pending)
		if u := l.Last; u != nil {
			fmt.Fprintf(&b, "; last update %s: %d new, %d changed, %d deleted in %d ms", u.At.Local().Format(time.DateTime), u.New, u.Changed, u.Deleted, u.TookMS)
			if u.Error != "" {
				fmt.Fprintf(&b, " (failed: %s)", u.Error)
			}
		}
		for _, e := range l.Errors {
			fmt.Fprintf(&b, "\nerror %s %s: %s", e.At.Local().Format(time.DateTime), cmp.Or(e.Path, "(update)"), e.Message)
		}
	} else {
		b.WriteString("\nnot watching: this server does not index")
	}
	return out, b.String(), nil
}

func embeddingsOut(es engine.EmbedStatus) EmbeddingsOut {
	out := EmbeddingsOut{Provider: es.Provider, Model: es.Model, Chunks: es.Chunks, Embedded: es.Embedded, Pending: es.Pending}
	if es.Chunks > 0 {
		out.Coverage = float64(es.Embedded) / float64(es.Chunks)
	}
	return out
}

// Caps of Status's work and answer.
const (
	// maxStatusWindows caps the windows Status sums over, the most
	// recently changed: each costs its status (a layout, cached per
	// version) and a read of its latest snapshot.
	maxStatusWindows = 1000
	// maxPerWindow caps Status's list of windows.
	maxPerWindow = 200
)

// StoreOut names the store: its backend (sqlite or postgres), where it
// lives (without credentials; to the operator only) and its size.
type StoreOut struct {
	Backend   string `json:"backend"`
	Location  string `json:"location,omitempty" jsonschema:"the store's file path or PostgreSQL URL (without credentials); the operator's only, absent for an agent's key"`
	SizeBytes int64  `json:"size_bytes"`
}

// WindowsSumOut sums over the open windows: Open counts them all, the
// sums are over the first Summed (the most recently changed, at most
// 1,000).
type WindowsSumOut struct {
	Open     int `json:"open"`
	Summed   int `json:"summed"`
	Messages int `json:"messages"`
	Evicted  int `json:"evicted"`
	Refs     int `json:"refs"`
	Used     int `json:"used"`
	Budget   int `json:"budget"`
}

// WindowSavingsOut is a window's savings in its latest assembled turn
// (all zero before the first), and where it stands.
type WindowSavingsOut struct {
	Session string `json:"session"`
	Agent   string `json:"agent"`
	SavingsOut
	Used   int `json:"used"`
	Budget int `json:"budget"`
}

// MemoryOut counts the archivalist's active records by kind, up to
// archive.MaxReadLimit each (More says some count was cut there);
// UnresolvedFailures are the active failures with no resolution reported
// to succeed; Events is the latest event's sequence number.
type MemoryOut struct {
	Patterns           int   `json:"patterns"`
	Failures           int   `json:"failures"`
	UnresolvedFailures int   `json:"unresolved_failures"`
	Insights           int   `json:"insights"`
	Decisions          int   `json:"decisions"`
	Intents            int   `json:"intents"`
	More               bool  `json:"more,omitempty"`
	Events             int64 `json:"events"`
}

// StatusOut is the server at a glance.
type StatusOut struct {
	Version      string        `json:"version"`
	Store        StoreOut      `json:"store"`
	Sessions     int64         `json:"sessions"`
	Agents       int64         `json:"agents"`
	Entries      int64         `json:"entries"`
	TokensStored int64         `json:"tokens_stored"`
	Windows      WindowsSumOut `json:"windows"`
	// Savings sums each window's latest assembled turn's, as
	// WindowTurnStatus reports them; PerWindow lists them, the first 200
	// windows summed, and More counts the windows summed but not listed.
	Savings   SavingsOut         `json:"savings"`
	PerWindow []WindowSavingsOut `json:"per_window"`
	More      int                `json:"more,omitempty"`
	Memory    MemoryOut          `json:"memory"`
	// Counters are this server's, since it started (see metrics.Counters).
	Counters metrics.Counters `json:"counters"`
}

// Status reports the server at a glance: its store (where it lives to
// the operator only: an agent has no need of the server's paths), what
// it holds, its windows and what their latest assembled turns saved, the
// archivalist's records, and this server's counters. It costs the store's statistics,
// a status and a snapshot read per window (up to 1,000), and a read of
// the archivalist's records of each kind (from its cache when nothing
// changed).
func (o *Ops) Status(ctx context.Context) (StatusOut, string, error) {
	st, err := o.Eng.Stats(ctx)
	if err != nil {
		return StatusOut{}, "", err
	}
	out := StatusOut{Version: o.Version, Store: StoreOut{Backend: "sqlite", SizeBytes: st.SizeBytes},
		Sessions: st.Sessions, Agents: st.Agents, Entries: st.Entries, TokensStored: st.Tokens, PerWindow: []WindowSavingsOut{},
		Counters: o.Metrics.Counters()}
	if strings.HasPrefix(st.Location, "postgres://") {
		out.Store.Backend = "postgres"
	}
	if o.Operator {
		out.Store.Location = st.Location
	}
	m, err := o.windows()
	if err != nil {
		return StatusOut{}, "", err
	}
	ws, err := o.Eng.Store().Windows(ctx, "")
	if err != nil {
		return StatusOut{}, "", err
	}
	out.Windows.Open = len(ws)
	for i, w := range ws {
		if i == maxStatusWindows {
			break
		}
		wst, err := m.Status(ctx, w.WindowKey)
		if errors.Is(err, store.ErrNotFound) {
			continue // forgotten since the list was read
		}
		if err != nil {
			return StatusOut{}, "", err
		}
		sum := &out.Windows
		sum.Summed++
		sum.Messages += wst.Messages
		sum.Evicted += wst.Evicted
		sum.Refs += wst.Refs
		sum.Used += wst.Used
		sum.Budget += wst.Budget
		sv, err := o.latestSavings(ctx, w.WindowKey)
		if err != nil {
			return StatusOut{}, "", err
		}
		out.Savings.History += sv.History
		out.Savings.Sent += sv.Sent
		out.Savings.Saved += sv.Saved
		if len(out.PerWindow) < maxPerWindow {
			out.PerWindow = append(out.PerWindow, WindowSavingsOut{Session: w.SessionID, Agent: w.AgentID, SavingsOut: sv, Used: wst.Used, Budget: wst.Budget})
		} else {
			out.More++
		}
	}
	out.Savings.Ratio = ratio(out.Savings.Sent, out.Savings.History)
	if out.Memory, err = o.memory(ctx); err != nil {
		return StatusOut{}, "", err
	}
	return out, out.Text(), nil
}

// latestSavings is what a window's latest assembled turn saved: zero
// before the first.
func (o *Ops) latestSavings(ctx context.Context, k store.WindowKey) (SavingsOut, error) {
	list, err := o.Eng.Store().Snapshots(ctx, k, 1)
	if err != nil || len(list) == 0 {
		if errors.Is(err, store.ErrNotFound) {
			err = nil
		}
		return SavingsOut{}, err
	}
	r, err := readReport(list[0])
	if err != nil {
		return SavingsOut{}, err
	}
	return savingsOf(r), nil
}

// savingsOf is what a turn saved, from its report.
func savingsOf(r reportFields) SavingsOut {
	h := r.History
	return SavingsOut{History: h.Whole, Sent: h.Tokens, Saved: h.Whole - h.Tokens, Ratio: ratio(h.Tokens, h.Whole)}
}

// ratio is a over b, 0 when b is.
func ratio(a, b int) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// memory counts the archivalist's active records.
func (o *Ops) memory(ctx context.Context) (MemoryOut, error) {
	arc, err := o.Eng.Archive(ctx)
	if err != nil {
		return MemoryOut{}, err
	}
	var mo MemoryOut
	for _, c := range []struct {
		kind store.RecordKind
		n    *int
	}{{store.KindPattern, &mo.Patterns}, {store.KindFailure, &mo.Failures}, {store.KindInsight, &mo.Insights},
		{store.KindDecision, &mo.Decisions}, {store.KindIntent, &mo.Intents}} {
		res, err := arc.ReadGlobal(ctx, archive.GlobalRead{Kind: c.kind, Limit: archive.MaxReadLimit})
		if err != nil {
			return MemoryOut{}, err
		}
		*c.n = len(res.Records)
		mo.More = mo.More || res.More
		if c.kind != store.KindFailure {
			continue
		}
		for _, r := range res.Records {
			resolved := false
			for _, rr := range r.Resolutions {
				resolved = resolved || rr.Successes > 0
			}
			if !resolved {
				mo.UnresolvedFailures++
			}
		}
	}
	evs, err := arc.Events(ctx, -1, 1)
	if err != nil {
		return MemoryOut{}, err
	}
	if len(evs) > 0 {
		mo.Events = evs[len(evs)-1].Seq
	}
	return mo, nil
}

// Text is the status in a few lines.
func (s StatusOut) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "engram %s, %s store", cmp.Or(s.Version, "(dev)"), s.Store.Backend)
	if s.Store.Location != "" {
		fmt.Fprintf(&b, " %s", s.Store.Location)
	}
	fmt.Fprintf(&b, " (%d bytes): %d sessions, %d agents, %d entries, %d tokens stored\n",
		s.Store.SizeBytes, s.Sessions, s.Agents, s.Entries, s.TokensStored)
	w := s.Windows
	fmt.Fprintf(&b, "windows: %d open; %d messages in them, %d evicted under %s; %d of %d tokens used\n",
		w.Open, w.Messages, w.Evicted, plural(w.Refs, "reference"), w.Used, w.Budget)
	fmt.Fprintf(&b, "savings (latest turns): %d tokens sent of %d whole (%.0f%%), %d saved\n", s.Savings.Sent, s.Savings.History, 100*s.Savings.Ratio, s.Savings.Saved)
	mo := s.Memory
	fmt.Fprintf(&b, "memory: %d patterns, %d failures (%d unresolved), %d insights, %d decisions, %d intents; event %d\n",
		mo.Patterns, mo.Failures, mo.UnresolvedFailures, mo.Insights, mo.Decisions, mo.Intents, mo.Events)
	c := s.Counters
	fmt.Fprintf(&b, "since %s: %d references expanded, %d pre-fetches (%d hits)", c.Since.Local().Format(time.DateTime), c.RefsExpanded, c.Prefetches, c.PrefetchHits)
	return b.String()
}
