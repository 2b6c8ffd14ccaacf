package archive

import (
	"cmp"
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/engramhq/engram/internal/store"
)

// Tier is a briefing's level of detail.
type Tier string

// The seed's three tiers and their token budgets.
const (
	Micro    Tier = "micro"
	Standard Tier = "standard"
	Full     Tier = "full"
)

// Budget returns the most tokens a briefing of the tier may take.
func (t Tier) Budget() int {
	switch t {
	case Micro:
		return 24
	case Standard:
		return 500
	case Full:
		return 2000
	}
	return 0
}

// ParseTier checks a tier name; empty is standard.
func ParseTier(s string) (Tier, error) {
	switch Tier(s) {
	case "":
		return Standard, nil
	case Micro, Standard, Full:
		return Tier(s), nil
	}
	return "", invalid("tier", "%q is not one of micro, standard, full", s)
}

// Briefing is what an agent reads to carry on a session's work.
type Briefing struct {
	Status  string `json:"status"`
	Tier    Tier   `json:"tier"`
	Session string `json:"session"`
	GV      uint64 `json:"gv"`
	SV      uint64 `json:"sv"`
	// Text is the briefing as a model reads it; Tokens its size.
	Text   string `json:"text,omitempty"`
	Tokens int    `json:"tokens,omitempty"`
	// Omitted counts items left out to stay within the budget.
	Omitted int `json:"omitted,omitempty"`
	// Cached is true when the briefing came whole from the cache.
	Cached bool `json:"cached,omitempty"`
	// SavedTokens is, on NOT_MODIFIED, the size of the briefing the reader
	// already holds, when this process still has it: what it did not have
	// to read again.
	SavedTokens int `json:"saved_tokens,omitempty"`

	validUntil time.Time // the first expiry of an intent shown
}

// Briefing returns a session's briefing at a tier. If have holds the
// current versions, the answer is NOT_MODIFIED with no text. Briefings are
// assembled from cached components: the session's state (cached by session
// version) and this process's mirror of the global history (brought up to
// date by deltas), and cached whole by both versions.
func (a *Archive) Briefing(ctx context.Context, sessionID string, tier Tier, have *Versions) (*Briefing, error) {
	if err := checkSession(sessionID); err != nil {
		return nil, err
	}
	if tier == "" {
		tier = Standard
	}
	if tier.Budget() == 0 {
		return nil, invalid("tier", "%q is not one of micro, standard, full", tier)
	}
	gv, sv, err := a.st.ArchiveVersions(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	if sv == 0 {
		return nil, fmt.Errorf("session %s: %w (register an agent in it first)", sessionID, store.ErrNotFound)
	}
	now := a.now()
	key := fmt.Sprintf("%s\x00%s\x00%d\x00%d", sessionID, tier, gv, sv)
	if have != nil && have.GV == gv && have.SV == sv {
		nm := &Briefing{Status: StatusNotModified, Tier: tier, Session: sessionID, GV: gv, SV: sv}
		if b, ok := a.briefings.GetIfPresent(key); ok {
			nm.SavedTokens = b.Tokens
		}
		return nm, nil
	}
	if b, ok := a.briefings.GetIfPresent(key); ok && (b.validUntil.IsZero() || now.Before(b.validUntil)) {
		hit := *b
		hit.Cached = true
		return &hit, nil
	}
	st, err := a.session(ctx, sessionID, sv)
	if err != nil {
		return nil, err
	}
	m, err := a.global(ctx, gv)
	if err != nil {
		return nil, err
	}
	a.mu.RLock()
	b := a.assemble(st, m, sessionID, tier, gv, now)
	a.mu.RUnlock()
	a.briefings.Set(key, b)
	return b, nil
}

// assemble renders a briefing within its tier's budget: items in order of
// importance, each kept only if the text still fits.
func (a *Archive) assemble(st *sessionState, m *mirror, sessionID string, tier Tier, gv uint64, now time.Time) *Briefing {
	b := &Briefing{Status: StatusOK, Tier: tier, Session: sessionID, GV: gv, SV: st.sv}
	if tier == Micro {
		b.Text = a.micro(st, tier.Budget())
		// What the shared memory holds, if it fits: the counts the
		// standard tier draws from, so that even a session with no state
		// of its own learns there is something to read.
		if mem, until := memoryCounts(m, now); mem != "" && a.enc.Count(b.Text+":"+mem) <= tier.Budget() {
			b.Text += ":" + mem
			b.validUntil = until
		}
		b.Tokens = a.enc.Count(b.Text)
		return b
	}
	budget := tier.Budget()
	var lines []string
	used := 0
	full := false // an item did not fit: items come in order of importance, so the rest are left out
	add := func(line string) bool {
		if full {
			b.Omitted++
			return false
		}
		n := a.enc.Count(line + "\n")
		if used+n > budget {
			full = true
			b.Omitted++
			return false
		}
		lines = append(lines, line)
		used += n
		return true
	}
	r := st.resume
	add(fmt.Sprintf("# briefing %s (gv %d, sv %d)", sessionID, gv, st.sv))
	if r.Task != "" || r.Objective != "" {
		line := "task: " + r.Task
		if r.Objective != "" {
			line += " — objective: " + r.Objective
		}
		add(line)
	}
	if r.Current != "" || len(r.Next) > 0 || len(r.Done) > 0 {
		add(fmt.Sprintf("step %d/%d: %s", len(r.Done)+1, len(r.Done)+1+len(r.Next), orNone(r.Current)))
	}
	if len(r.Blockers) > 0 {
		add("blockers: " + strings.Join(r.Blockers, "; "))
	}
	if len(r.Next) > 0 {
		add("next: " + strings.Join(r.Next, "; "))
	}
	if len(r.FilesToRead) > 0 {
		add("read first: " + strings.Join(r.FilesToRead, ", "))
	}
	if tier == Full && len(r.Done) > 0 {
		add("done: " + strings.Join(r.Done, "; "))
	}
	files := slices.Clone(st.files)
	slices.SortStableFunc(files, func(x, y FileState) int { return y.Status.rank() - x.Status.rank() })
	for _, f := range files {
		if f.Status == Read && tier != Full {
			continue
		}
		line := fmt.Sprintf("file %s (%s by %s)", f.Path, f.Status, strings.Join(f.Agents, ","))
		if f.Summary != "" {
			line += ": " + f.Summary
		}
		add(line)
	}
	for _, w := range st.wants {
		add("user wants: " + w.Text)
	}
	for _, w := range st.rejects {
		add("user rejects: " + w.Text)
	}
	// The shared memory: each kind's items in order of importance, what
	// concerns this session first. Items are taken from every kind in
	// turn, the relevant ones of all kinds before the rest, so that one
	// kind cannot crowd out the others; a kind stops at its first item
	// that does not fit. The full tier keeps room for its stats line, and
	// every tier for the line saying how much was left out.
	var stats string
	if tier == Full {
		stats = a.statsLine(st, m)
	}
	note := func(n int) string {
		return fmt.Sprintf("(%d more left out: the full tier or recall shows them)", n)
	}
	kinds := a.globalItems(st, m, sessionID, tier, now)
	room := budget - used - a.enc.Count(note(9999)+"\n")
	if stats != "" {
		room -= a.enc.Count(stats + "\n")
	}
	shown := make([]int, len(kinds))
	stopped := make([]bool, len(kinds))
	for _, relevant := range []bool{true, false} {
		for more := true; more; {
			more = false
			for k, items := range kinds {
				if full || stopped[k] || shown[k] == len(items) || items[shown[k]].relevant != relevant {
					continue
				}
				n := a.enc.Count(items[shown[k]].line + "\n")
				if n > room {
					stopped[k] = true
					continue
				}
				room -= n
				shown[k]++
				more = true
			}
		}
	}
	for k, items := range kinds {
		for _, it := range items[:shown[k]] {
			lines = append(lines, it.line)
			if !it.expires.IsZero() && (b.validUntil.IsZero() || it.expires.Before(b.validUntil)) {
				b.validUntil = it.expires
			}
		}
		b.Omitted += len(items) - shown[k]
	}
	if stats != "" {
		lines = append(lines, stats)
	}
	if b.Omitted > 0 {
		lines = append(lines, note(b.Omitted))
	}
	b.Text = strings.Join(lines, "\n")
	b.Tokens = a.enc.Count(b.Text)
	// Counting line by line can differ from counting the whole by a token
	// where lines meet; drop lines until the whole fits.
	for b.Tokens > budget && len(lines) > 1 {
		lines = lines[:len(lines)-1]
		b.Omitted++
		b.Text = strings.Join(lines, "\n")
		b.Tokens = a.enc.Count(b.Text)
	}
	return b
}

// briefItem is one line of a briefing from the global history.
type briefItem struct {
	line string
	// relevant: the session wrote it, works in its category or on its
	// files, or (a pattern) it is mandated everywhere.
	relevant bool
	// rank orders a kind's items by importance, highest first; ties go to
	// the newest.
	rank int
	gv   uint64
	// expires is when an intent stops being shown.
	expires time.Time
}

// globalItems returns what a briefing may show of the global history, by
// kind (intents, patterns, failures, decisions, and in the full tier
// insights), each kind in order: relevant to the session first, then by
// the kind's importance, then newest first.
//
// Importance: an intent's priority; a pattern's authority; for a failure
// its last activity (a resolution brings a resolved failure forward, and
// old ones fall behind unresolved ones born since); for decisions and
// insights, recency.
func (a *Archive) globalItems(st *sessionState, m *mirror, sessionID string, tier Tier, now time.Time) [][]briefItem {
	var intents, patterns, failures, decisions, insights []briefItem
	for i := len(m.records) - 1; i >= 0; i-- {
		rec := &m.records[i]
		switch rec.Kind {
		case store.KindIntent:
			if !m.active(rec, now) {
				continue
			}
			in := rec.Intent
			own := rec.Session == sessionID
			who := "session " + rec.Session
			if own {
				who = "this session"
			}
			intents = append(intents, briefItem{
				line: fmt.Sprintf("intent %s (%s, %s, %s): %s [%s]", rec.ID, who, rec.Agent, in.Priority, in.Description,
					strings.Join(append(slices.Clone(in.Paths), in.Categories...), ", ")),
				relevant: own || st.touches(in.Paths, in.Categories),
				rank:     slices.Index([]string{"normal", "high", "critical"}, in.Priority),
				gv:       rec.GV, expires: in.ExpiresAt})
		case store.KindPattern:
			if !m.active(rec, now) {
				continue
			}
			p := rec.Pattern
			line := fmt.Sprintf("pattern %s [%s] %s", rec.ID, rec.Category, p.Pattern)
			if p.Authority != Suggestion {
				line += " (" + string(p.Authority) + ")"
			}
			if len(p.Scope) > 0 {
				line += " in " + strings.Join(p.Scope, ", ")
			}
			patterns = append(patterns, briefItem{line: line,
				relevant: p.Authority == Mandated || st.relevant(rec.Category, p.Scope, rec.Session, sessionID),
				rank:     slices.Index([]Authority{Suggestion, Established, Mandated}, p.Authority), gv: rec.GV})
		case store.KindFailure:
			f := rec.Failure
			line := fmt.Sprintf("failure %s: %s — %s", rec.ID, f.Approach, f.Reason)
			last := rec.GV
			if rs := m.resolutions[rec.ID]; len(rs) > 0 {
				best := rankResolutions(rs)[0]
				line += fmt.Sprintf(" → fix: %s (%d/%d succeeded)", best.Approach, best.Successes, best.Successes+best.Partials+best.Failures)
				last = rs[len(rs)-1].GV
			} else {
				line += " → no fix yet"
			}
			failures = append(failures, briefItem{line: line, relevant: st.relevant(rec.Category, f.Files, rec.Session, sessionID), gv: last})
		case store.KindDecision:
			if !m.active(rec, now) {
				continue
			}
			d := rec.Decision
			line := fmt.Sprintf("decision %s: %s", rec.ID, d.Decision)
			if d.Rationale != "" {
				line += " — because " + d.Rationale
			}
			decisions = append(decisions, briefItem{line: line, relevant: st.relevant(rec.Category, d.Scope, rec.Session, sessionID), gv: rec.GV})
		case store.KindInsight:
			if tier != Full {
				continue
			}
			in := rec.Insight
			insights = append(insights, briefItem{line: fmt.Sprintf("insight %s: %s", rec.ID, in.Insight),
				relevant: st.relevant(rec.Category, in.Scope, rec.Session, sessionID), gv: rec.GV})
		}
	}
	kinds := [][]briefItem{intents, patterns, failures, decisions, insights}
	for _, items := range kinds {
		slices.SortStableFunc(items, func(x, y briefItem) int {
			if x.relevant != y.relevant {
				if x.relevant {
					return -1
				}
				return 1
			}
			return cmp.Or(cmp.Compare(y.rank, x.rank), cmp.Compare(y.gv, x.gv))
		})
	}
	return kinds
}

// statsLine is the full tier's last line: the session's agents and what
// the history holds.
func (a *Archive) statsLine(st *sessionState, m *mirror) string {
	var agents []string
	for _, ag := range st.agents {
		s := ag.ID
		if ag.ParentID != "" {
			s += "<" + ag.ParentID
		}
		agents = append(agents, s)
	}
	counts := m.counts
	return fmt.Sprintf("stats: %d agents (%s); history: %d patterns, %d failures, %d resolutions, %d insights, %d decisions, %d intents",
		len(st.agents), strings.Join(agents, " "), counts[store.KindPattern], counts[store.KindFailure],
		counts[store.KindResolution], counts[store.KindInsight], counts[store.KindDecision], counts[store.KindIntent])
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// micro renders the seed's one-line status, task:step/total:files:block=…,
// shortened until it fits the budget.
func (a *Archive) micro(st *sessionState, budget int) string {
	r := st.resume
	task := slug(r.Task, 24)
	if task == "" {
		task = "none"
	}
	var files []string
	for _, f := range st.files {
		if f.Status == Modified || f.Status == Created || f.Status == Deleted {
			files = append(files, path.Base(f.Path)+"("+string(f.Status[:1])+")")
		}
	}
	block := "none"
	if len(r.Blockers) > 0 {
		block = slug(r.Blockers[0], 24)
	}
	render := func(nfiles int, task, block string) string {
		fs := "-"
		if nfiles > 0 {
			fs = strings.Join(files[:nfiles], ",")
			if nfiles < len(files) {
				fs += fmt.Sprintf("+%d", len(files)-nfiles)
			}
		}
		return fmt.Sprintf("%s:%d/%d:%s:block=%s", task, len(r.Done)+1, len(r.Done)+1+len(r.Next), fs, block)
	}
	for n := min(len(files), 3); n >= 0; n-- {
		if s := render(n, task, block); a.enc.Count(s) <= budget {
			return s
		}
	}
	return render(0, slug(task, 10), slug(block, 10))
}

// memoryCounts renders how many active patterns, failures, active
// decisions and open intents the global history holds, as mem=3p,2f,1d,1i
// (kinds with none left out; empty if it holds none), and when the first
// open intent expires.
func memoryCounts(m *mirror, now time.Time) (string, time.Time) {
	var p, f, d, i int
	var until time.Time
	for k := range m.records {
		rec := &m.records[k]
		switch {
		case rec.Kind == store.KindFailure:
			f++
		case !m.active(rec, now):
		case rec.Kind == store.KindPattern:
			p++
		case rec.Kind == store.KindDecision:
			d++
		case rec.Kind == store.KindIntent:
			i++
			if until.IsZero() || rec.Intent.ExpiresAt.Before(until) {
				until = rec.Intent.ExpiresAt
			}
		}
	}
	var parts []string
	for _, c := range []struct {
		n      int
		letter string
	}{{p, "p"}, {f, "f"}, {d, "d"}, {i, "i"}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprint(c.n)+c.letter)
		}
	}
	if len(parts) == 0 {
		return "", time.Time{}
	}
	return "mem=" + strings.Join(parts, ","), until
}

// slug shortens text to at most n bytes of lower-case words joined by -.
func slug(s string, n int) string {
	var b strings.Builder
	for w := range strings.FieldsSeq(strings.ToLower(s)) {
		w = strings.Trim(w, ".,;:!?()[]{}\"'`")
		if w == "" {
			continue
		}
		if b.Len()+len(w)+1 > n {
			break
		}
		if b.Len() > 0 {
			b.WriteByte('-')
		}
		b.WriteString(w)
	}
	if b.Len() == 0 && s != "" {
		return truncate(strings.ToLower(strings.Fields(s + " x")[0]), n)
	}
	return b.String()
}

// relevant reports whether a record of a category and scope concerns the
// session: it wrote it, works in its category, or touches its files.
func (st *sessionState) relevant(category string, scope []string, writer, session string) bool {
	if writer == session {
		return true
	}
	if category != "" {
		l1 := strings.SplitN(category, ".", 2)[0]
		if slices.Contains(st.categories, l1) {
			return true
		}
	}
	if len(scope) > 0 && len(st.paths) > 0 {
		for _, s := range scope {
			for _, p := range st.paths {
				if pathsOverlap(s, p) {
					return true
				}
			}
		}
	}
	return false
}

// touches reports whether an intent's paths or categories meet the
// session's files or categories.
func (st *sessionState) touches(paths, categories []string) bool {
	for _, c := range categories {
		if slices.Contains(st.categories, strings.SplitN(c, ".", 2)[0]) {
			return true
		}
	}
	for _, s := range paths {
		for _, p := range st.paths {
			if pathsOverlap(s, p) {
				return true
			}
		}
	}
	return false
}
