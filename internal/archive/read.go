package archive

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/engramhq/engram/internal/store"
)

// Record is a global record as readers see it.
type Record struct {
	ID           string           `json:"id"`
	Kind         store.RecordKind `json:"kind"`
	GV           uint64           `json:"gv"`
	Session      string           `json:"session"`
	Agent        string           `json:"agent"`
	Model        string           `json:"model,omitempty"`
	Category     string           `json:"category,omitempty"`
	CreatedAt    time.Time        `json:"created_at"`
	SupersededBy string           `json:"superseded_by,omitempty"`
	// CompletedBy and CompletedAt say, of a completed intent, the agent
	// that completed it and when.
	CompletedBy string    `json:"completed_by,omitempty"`
	CompletedAt time.Time `json:"completed_at,omitzero"`
	Uses        int64     `json:"uses,omitempty"`
	// Ref is the record this one refers to (a resolution's failure, a
	// completion's intent).
	Ref string `json:"ref,omitempty"`

	Pattern    *Pattern    `json:"pattern,omitempty"`
	Failure    *Failure    `json:"failure,omitempty"`
	Resolution *Resolution `json:"resolution,omitempty"`
	Insight    *Insight    `json:"insight,omitempty"`
	Decision   *Decision   `json:"decision,omitempty"`
	Intent     *Intent     `json:"intent,omitempty"`
	// Resolutions of a failure, best first (on reads of failures).
	Resolutions []RankedResolution `json:"resolutions,omitempty"`
}

// RankedResolution is one approach tried against a failure, with the
// outcomes every report of it gave.
type RankedResolution struct {
	Approach  string  `json:"approach"`
	Successes int     `json:"successes"`
	Partials  int     `json:"partials"`
	Failures  int     `json:"failures"`
	Score     float64 `json:"score"`
	Notes     string  `json:"notes,omitempty"`
	LastID    string  `json:"last_id"`
}

// Text returns the record's main text.
func (r *Record) Text() string {
	switch {
	case r.Pattern != nil:
		return r.Pattern.Pattern
	case r.Failure != nil:
		return r.Failure.Approach + " — " + r.Failure.Reason
	case r.Resolution != nil:
		return r.Resolution.Approach
	case r.Insight != nil:
		return r.Insight.Insight
	case r.Decision != nil:
		return r.Decision.Decision
	case r.Intent != nil:
		return r.Intent.Description
	}
	return ""
}

func toRecord(r store.ArchiveRecord) (Record, error) {
	out := Record{ID: r.ID, Kind: r.Kind, GV: r.GV, Session: r.SessionID, Agent: r.AgentID, Model: r.Model,
		Category: r.Category, CreatedAt: r.CreatedAt, SupersededBy: r.SupersededBy, Uses: r.Uses, Ref: r.Ref}
	var err error
	switch r.Kind {
	case store.KindPattern:
		out.Pattern = new(Pattern)
		err = json.Unmarshal(r.Body, out.Pattern)
	case store.KindFailure:
		out.Failure = new(Failure)
		err = json.Unmarshal(r.Body, out.Failure)
	case store.KindResolution:
		out.Resolution = new(Resolution)
		err = json.Unmarshal(r.Body, out.Resolution)
	case store.KindInsight:
		out.Insight = new(Insight)
		err = json.Unmarshal(r.Body, out.Insight)
	case store.KindDecision:
		out.Decision = new(Decision)
		err = json.Unmarshal(r.Body, out.Decision)
	case store.KindIntent:
		out.Intent = new(Intent)
		err = json.Unmarshal(r.Body, out.Intent)
	}
	if err != nil {
		return out, fmt.Errorf("record %s: %w", r.ID, err)
	}
	return out, nil
}

// rankResolutions groups a failure's resolutions by approach and ranks them
// by outcome: the mean outcome score (success 1, partial 0.5, failure 0)
// times n/(n+1), so that one success ranks below several.
func rankResolutions(recs []Record) []RankedResolution {
	by := map[string]*RankedResolution{}
	var order []string
	for _, r := range recs {
		if r.Resolution == nil {
			continue
		}
		k := normalize(r.Resolution.Approach)
		rr := by[k]
		if rr == nil {
			rr = &RankedResolution{Approach: r.Resolution.Approach}
			by[k] = rr
			order = append(order, k)
		}
		switch r.Resolution.Outcome {
		case Success:
			rr.Successes++
		case Partial:
			rr.Partials++
		default:
			rr.Failures++
		}
		if r.Resolution.Notes != "" {
			rr.Notes = r.Resolution.Notes
		}
		rr.LastID = r.ID
	}
	out := make([]RankedResolution, 0, len(order))
	for _, k := range order {
		rr := by[k]
		n := float64(rr.Successes + rr.Partials + rr.Failures)
		rr.Score = (float64(rr.Successes) + 0.5*float64(rr.Partials)) / n * (n / (n + 1))
		out = append(out, *rr)
	}
	slices.SortStableFunc(out, func(a, b RankedResolution) int { return cmp.Compare(b.Score, a.Score) })
	return out
}

// mirror is this process's copy of the global history, brought up to date
// by deltas: records are immutable, so only records born after the
// mirror's version are ever read again; an operator's purge, which removes
// or rewrites records, makes it start again (see global).
type mirror struct {
	// gv is the version the mirror holds; purges, the store's purge count
	// when it was started.
	gv, purges  uint64
	records     []Record // in version order
	byID        map[string]int
	superseded  map[string]string
	resolutions map[string][]Record   // by failure ID
	done        map[string]completion // completed intents
	// grams and terms index the records that can be duplicated, by kind
	// and category, then trigram or content term: positions in records.
	grams map[string]map[string][]int
	terms map[string]map[string][]int
	// counts counts the records by kind.
	counts map[store.RecordKind]int
	// search holds, beside records, the text each record is searched by
	// (store.ArchiveRecord.Text: its text and the fields searched with it).
	search []string
	// tokens holds, beside records, the tokens of each record's JSON,
	// counted the first time a read needs it (0: not yet), read and
	// written atomically under the read lock.
	tokens []int32
}

func newMirror() *mirror {
	return &mirror{byID: map[string]int{}, superseded: map[string]string{}, resolutions: map[string][]Record{},
		done: map[string]completion{}, grams: map[string]map[string][]int{}, terms: map[string]map[string][]int{},
		counts: map[store.RecordKind]int{}}
}

func gramsKey(kind store.RecordKind, category string) string { return string(kind) + "\x00" + category }

// candidates returns the positions of the records of a kind and category
// that can have a Jaccard similarity of at least t with the set mine, in
// index (m.grams or m.terms): by the prefix filter, such a record shares
// at least one of the len(mine) - ceil(t*len(mine)) + 1 rarest of them.
func (m *mirror) candidates(index map[string]map[string][]int, kind store.RecordKind, category string, mine map[string]struct{}, t float64) []int {
	idx := index[gramsKey(kind, category)]
	if len(idx) == 0 || len(mine) == 0 {
		return nil
	}
	grams := make([]string, 0, len(mine))
	for g := range mine {
		grams = append(grams, g)
	}
	slices.SortFunc(grams, func(a, b string) int { return cmp.Or(cmp.Compare(len(idx[a]), len(idx[b])), strings.Compare(a, b)) })
	need := int(math.Ceil(t * float64(len(grams))))
	prefix := max(len(grams)-need+1, 1)
	seen := map[int]bool{}
	var out []int
	for _, g := range grams[:min(prefix, len(grams))] {
		for _, i := range idx[g] {
			if !seen[i] {
				seen[i] = true
				out = append(out, i)
			}
		}
	}
	slices.Sort(out)
	return out
}

// global returns the mirror brought up to version gv. The caller must
// hold a.mu's read lock while it uses the mirror, and must not change it.
func (a *Archive) global(ctx context.Context, gv uint64) (*mirror, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := a.mirror
	if gv <= m.gv {
		return m, nil
	}
	// A purge (forget.go) advances gv and the purge count: the records
	// held may be gone or changed, so the mirror starts again.
	purges, err := a.st.Purges(ctx)
	if err != nil {
		return nil, err
	}
	if purges != m.purges {
		m = newMirror()
		m.purges = purges
		a.mirror = m
		a.forgetCaches()
	}
	recs, err := a.st.ArchiveRecords(ctx, store.RecordQuery{Kinds: globalKinds, AfterGV: m.gv, UpToGV: gv})
	if err != nil {
		return nil, err
	}
	for _, sr := range recs {
		r, err := toRecord(sr)
		if err != nil {
			return nil, err
		}
		m.byID[r.ID] = len(m.records)
		m.records = append(m.records, r)
		m.tokens = append(m.tokens, 0)
		m.counts[r.Kind]++
		m.search = append(m.search, sr.Text)
		switch r.Kind {
		case store.KindPattern, store.KindFailure, store.KindInsight, store.KindDecision:
			k := gramsKey(r.Kind, r.Category)
			for _, ix := range []struct {
				index map[string]map[string][]int
				set   map[string]struct{}
			}{{m.grams, trigrams(r.Text())}, {m.terms, contentTerms(r.Text())}} {
				idx := ix.index[k]
				if idx == nil {
					idx = map[string][]int{}
					ix.index[k] = idx
				}
				for g := range ix.set {
					idx[g] = append(idx[g], len(m.records)-1)
				}
			}
		}
		switch r.Kind {
		case store.KindPattern:
			for _, old := range r.Pattern.Supersedes {
				m.superseded[old] = r.ID
			}
		case store.KindDecision:
			for _, old := range r.Decision.Supersedes {
				m.superseded[old] = r.ID
			}
		case store.KindResolution:
			m.resolutions[r.Ref] = append(m.resolutions[r.Ref], r)
		case store.KindIntentDone:
			m.done[r.Ref] = completion{by: r.Agent, at: r.CreatedAt}
		}
	}
	m.gv = gv
	return m, nil
}

var globalKinds = []store.RecordKind{store.KindPattern, store.KindFailure, store.KindResolution, store.KindInsight,
	store.KindDecision, store.KindIntent, store.KindIntentDone}

// GlobalRead asks for global records.
type GlobalRead struct {
	// Kind is pattern, failure, insight, decision or intent; empty is all.
	Kind store.RecordKind `json:"kind,omitempty"`
	// Category keeps that category and its descendants.
	Category string `json:"category,omitempty"`
	// IfGV, if it is the current global version, gets NOT_MODIFIED.
	IfGV uint64 `json:"if_gv,omitempty"`
	// Since asks for a delta: only records born after that version.
	Since uint64 `json:"since,omitempty"`
	// All includes superseded records and completed or expired intents.
	All bool `json:"all,omitempty"`
	// Limit bounds a full read (not a delta, which the delta limit
	// bounds): 1 to MaxReadLimit; zero means DefaultReadLimit.
	Limit int `json:"limit,omitempty"`
}

// DefaultReadLimit is how many records a full read returns by default;
// MaxReadLimit the most it may ask for.
const (
	DefaultReadLimit = 100
	MaxReadLimit     = 1000
)

// GlobalResult answers a GlobalRead.
type GlobalResult struct {
	Status string `json:"status"`
	GV     uint64 `json:"gv"`
	// Records are OK's, an empty list when there are none (omitted, not
	// null, for NOT_MODIFIED and TOO_LARGE).
	Records []Record `json:"records,omitzero"`
	// Message explains TOO_LARGE.
	Message string `json:"message,omitempty"`
	// More says the limit cut the answer short.
	More bool `json:"more,omitempty"`
	// SavedTokens is, on NOT_MODIFIED or a delta, how many tokens of a
	// full read's records the reader did not have to read again.
	SavedTokens int `json:"saved_tokens,omitempty"`
}

// ReadGlobal reads the global history: everything active (newest first),
// or a delta since a version, or NOT_MODIFIED.
func (a *Archive) ReadGlobal(ctx context.Context, req GlobalRead) (GlobalResult, error) {
	if req.Kind != "" && !req.Kind.Global() {
		return GlobalResult{}, invalid("kind", "%q is not one of pattern, failure, resolution, insight, decision, intent", req.Kind)
	}
	if req.Category != "" && !isL1(req.Category) {
		if err := checkCategory(req.Category, true); err != nil {
			return GlobalResult{}, err
		}
	}
	if req.Limit < 0 || req.Limit > MaxReadLimit {
		return GlobalResult{}, invalid("limit", "is %d; it must be from 1 to %d, or 0 (the default, %d)", req.Limit, MaxReadLimit, DefaultReadLimit)
	}
	gv, _, err := a.st.ArchiveVersions(ctx, "")
	if err != nil {
		return GlobalResult{}, err
	}
	notModified := req.IfGV != 0 && req.IfGV == gv
	if !notModified && req.Since > gv {
		return GlobalResult{}, invalid("since", "version %d is ahead of the archive's %d", req.Since, gv)
	}
	if !notModified && req.Since > 0 && gv-req.Since > uint64(a.opts.DeltaLimit) {
		return GlobalResult{Status: StatusTooLarge, GV: gv, Message: fmt.Sprintf(
			"%d versions since %d (more than %d): read in full", gv-req.Since, req.Since, a.opts.DeltaLimit)}, nil
	}
	m, err := a.global(ctx, gv)
	if err != nil {
		return GlobalResult{}, err
	}
	out := a.readMirror(m, req, gv, notModified)
	if out.Status != StatusOK {
		return out, nil
	}
	return out, a.currentUses(ctx, out.Records)
}

// readMirror answers a read from the mirror, at version gv.
func (a *Archive) readMirror(m *mirror, req GlobalRead, gv uint64, notModified bool) GlobalResult {
	a.mu.RLock()
	defer a.mu.RUnlock()
	now := a.now()
	// What a full read returns is what a reader that holds the current
	// version, or a delta's base, did not have to read again.
	fullReq := req
	fullReq.Since = 0
	full, fullMore := m.read(fullReq, now)
	if notModified {
		return GlobalResult{Status: StatusNotModified, GV: gv, SavedTokens: a.recordTokens(m, full)}
	}
	out := GlobalResult{Status: StatusOK, GV: gv, More: fullMore, Records: []Record{}}
	picked := full
	if req.Since > 0 {
		picked, out.More = m.read(req, now)
		out.SavedTokens = max(0, a.recordTokens(m, full)-a.recordTokens(m, picked))
	}
	for _, i := range picked {
		out.Records = append(out.Records, m.reader(m.records[i]))
	}
	return out
}

// completion is who completed an intent, and when.
type completion struct {
	by string
	at time.Time
}

// reader returns a record of the mirror as a read shows it: with what
// superseded it, a failure's resolutions ranked, and an intent's
// completion. The caller holds a.mu's read lock.
func (m *mirror) reader(r Record) Record {
	r.SupersededBy = m.superseded[r.ID]
	switch r.Kind {
	case store.KindFailure:
		r.Resolutions = rankResolutions(m.resolutions[r.ID])
	case store.KindIntent:
		if d, ok := m.done[r.ID]; ok {
			r.CompletedBy, r.CompletedAt = d.by, d.at
		}
	}
	return r
}

// currentUses sets the uses of records to the store's counts now. A merge
// counts a use without a new version, so the mirror's copy of a record
// holds the count of when it was first read: a read answers with the
// store's, which holds every merge, this process's and others'.
func (a *Archive) currentUses(ctx context.Context, recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	uses, err := a.Usage(ctx, ids)
	if err != nil {
		return err
	}
	for i := range recs {
		recs[i].Uses = uses[recs[i].ID]
	}
	return nil
}

// read returns the positions of the records a read asks for, newest
// first, and whether the limit cut it short.
func (m *mirror) read(req GlobalRead, now time.Time) (picked []int, more bool) {
	limit := req.Limit
	if limit <= 0 && req.Since == 0 {
		limit = DefaultReadLimit
	}
	for i := len(m.records) - 1; i >= 0; i-- {
		r := &m.records[i]
		if r.GV <= req.Since {
			break
		}
		// A delta of intents carries their completions too: a client
		// holding the list learns which ended.
		ended := req.Since > 0 && req.Kind == store.KindIntent && r.Kind == store.KindIntentDone
		if req.Kind != "" && r.Kind != req.Kind && !ended {
			continue
		}
		if req.Kind == "" && r.Kind == store.KindIntentDone && req.Since == 0 {
			continue
		}
		if req.Category != "" && r.Category != req.Category && !strings.HasPrefix(r.Category, req.Category+".") {
			continue
		}
		if req.Since == 0 && !req.All && !m.active(r, now) {
			continue
		}
		if limit > 0 && len(picked) >= limit {
			return picked, true
		}
		picked = append(picked, i)
	}
	return picked, false
}

// recordTokens returns the tokens of the records' JSON (without the
// resolutions and supersessions a read adds), counting each record once.
// The caller holds a.mu's read lock.
func (a *Archive) recordTokens(m *mirror, picked []int) int {
	total := 0
	for _, i := range picked {
		n := atomic.LoadInt32(&m.tokens[i])
		if n == 0 {
			b, err := json.Marshal(&m.records[i])
			if err != nil {
				continue
			}
			n = int32(a.enc.Count(string(b)))
			atomic.StoreInt32(&m.tokens[i], n)
		}
		total += int(n)
	}
	return total
}

// active reports whether a record is current: not superseded, and for an
// intent neither completed nor expired. Resolutions and completions are
// shown with their failures and intents.
func (m *mirror) active(r *Record, now time.Time) bool {
	if m.superseded[r.ID] != "" {
		return false
	}
	switch r.Kind {
	case store.KindIntent:
		_, done := m.done[r.ID]
		return !done && now.Before(r.Intent.ExpiresAt)
	case store.KindResolution, store.KindIntentDone:
		return false
	}
	return true
}

// Usage returns how often duplicates were merged into records.
func (a *Archive) Usage(ctx context.Context, ids []string) (map[string]int64, error) {
	recs, err := a.st.ArchiveRecords(ctx, store.RecordQuery{IDs: ids})
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, r := range recs {
		out[r.ID] = r.Uses
	}
	return out, nil
}
