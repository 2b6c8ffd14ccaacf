package archive

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/viterin/vek/vek32"

	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store"
)

// Answer is what one query got.
type Answer struct {
	// Query is the DSL query that ran (for words: the classification's).
	Query string `json:"query"`
	// Question is the question in words this answers, if it was one.
	Question string `json:"question,omitempty"`
	// Classification is set for a question in words.
	Classification *Classification `json:"classification,omitempty"`
	// Status is OK, REFUSED (not about the past, or too unsure) or SUGGEST
	// (unsure: confirm by sending Query).
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	GV     uint64 `json:"gv"`
	// Text is the answer for a model, within the budget; Tokens its size.
	Text    string   `json:"text"`
	Tokens  int      `json:"tokens"`
	Records []Record `json:"records,omitempty"`
	Files   []FileAt `json:"files,omitempty"`
	// Found answers a check.
	Found *bool `json:"found,omitempty"`
	// Write is what a store did.
	Write *WriteResult `json:"write,omitempty"`
	// Signals names the retrieval signals that ranked a recall: lexical,
	// and vector when an embedder is ready.
	Signals []string `json:"signals,omitempty"`
	Omitted int      `json:"omitted,omitempty"`
}

// FileAt is a file state in a session.
type FileAt struct {
	Session string `json:"session"`
	FileState
}

// Answer statuses beyond the read statuses.
const (
	StatusRefused = "REFUSED"
	StatusSuggest = "SUGGEST"
	// StatusFailed answers a read that failed after its request's stores
	// were written (a store's failure is the request's error instead).
	StatusFailed = "FAILED"
)

// AskOptions tune Ask.
type AskOptions struct {
	// Budget is the most tokens one answer may take, 1 to MaxAskBudget;
	// zero means DefaultAskBudget.
	Budget int
}

// DefaultAskBudget bounds an answer's text by default; MaxAskBudget is
// the most a caller may ask for.
const (
	DefaultAskBudget = 1000
	MaxAskBudget     = 8000
)

// Ask runs a DSL query (or several, joined by ';') or a question in words
// (several questions are answered in turn). Stores need a handle: the
// writer; reads do not. Refused and unsure questions are answers, not
// errors; malformed DSL and bad data are errors, and nothing is written:
// every query of the input is checked before any runs.
//
// The stores of one input are one transaction: all of them are written,
// or none is. A store sees the stores before it, as it would in a request
// of its own after theirs (a duplicate merges into a record an earlier
// store created; a contradiction of one is refused). The stores commit
// where the first of them stands: a read before it sees none of them, a
// read after it sees all. An error (a store refused when it runs, by a
// conflict or a limit, a store's failure, a read before the commit)
// comes with no answers: it names the query that failed, says that
// nothing was written, and wraps the cause (*ConflictError,
// *RateLimitError, ...). A read that fails after the commit cannot
// unwrite the stores: it is answered StatusFailed, with its reason.
func (a *Archive) Ask(ctx context.Context, h *Handle, input string, opts AskOptions) ([]Answer, error) {
	if opts.Budget < 0 || opts.Budget > MaxAskBudget {
		return nil, invalid("budget", "is %d; it must be from 1 to %d, or 0 (the default, %d)", opts.Budget, MaxAskBudget, DefaultAskBudget)
	}
	if opts.Budget == 0 {
		opts.Budget = DefaultAskBudget
	}
	input = strings.TrimSpace(input)
	if input == "" {
		return nil, invalid("query", "is empty: write an @arch: query or a question about what was done, seen or learned")
	}
	if len(input) > MaxQueryBytes {
		return nil, invalid("query", "is %d bytes; at most %d", len(input), MaxQueryBytes)
	}
	if IsDSL(input) {
		qs, err := ParseAll(input)
		if err != nil {
			return nil, err
		}
		// Check every query (its parameters, a store's data) before
		// running any, so that one malformed anywhere refuses the whole
		// request: a store before it writes nothing.
		args := make([]queryArgs, len(qs))
		for i, q := range qs {
			if args[i], err = checkQuery(q, opts.Budget); err != nil {
				return nil, err
			}
			if q.Intent == Store && h == nil {
				return nil, invalid("agent", "a store needs a writer: name the agent (or session)")
			}
		}
		return a.runAll(ctx, h, qs, args)
	}
	var out []Answer
	for _, question := range SplitQuestions(input) {
		c := Classify(question)
		if a.opts.Classifier != nil {
			if lc, err := a.opts.Classifier.Classify(ctx, question); err == nil {
				c = lc
			} else {
				a.log.Warn("question classified by rules: the model failed", "err", err)
				c.By = fmt.Sprintf("rules (the model failed: %v)", err)
			}
		}
		ans := Answer{Query: c.Query, Classification: &c}
		switch {
		case !c.Retrospective || c.Action == ActionReject:
			ans.Status, ans.Reason = StatusRefused, c.Reason
		case c.Intent == Store:
			ans.Status = StatusSuggest
			ans.Reason = "a store in words is not run: write it as @arch:store:" + string(orDomain(c.Domain, Learnings)) + "{...}"
		case c.Action == ActionSuggest:
			ans.Status = StatusSuggest
			ans.Reason = fmt.Sprintf("unsure (confidence %.2f): send %s to run it", c.Confidence, c.Query)
		default:
			q, err := Parse(c.Query)
			if err != nil {
				return out, err
			}
			if c.Action == ActionExecuteLog {
				a.log.Info("archivalist question run at moderate confidence", "question", question, "query", c.Query, "confidence", c.Confidence)
			}
			res, err := a.run(ctx, h, q, opts)
			if err != nil {
				return out, err
			}
			res.Classification = &c
			ans = res
		}
		ans.Question = question
		if ans.Status != StatusOK && ans.Text == "" {
			ans.Text = ans.Status + ": " + ans.Reason
			ans.Tokens = a.enc.Count(ans.Text)
		}
		out = append(out, ans)
	}
	return out, nil
}

func orDomain(d, def Domain) Domain {
	if d == "" {
		return def
	}
	return d
}

// queryArgs are a query's parameters, checked: what run needs of them.
type queryArgs struct {
	budget int
	// Of a recall or check of the records: the kinds asked for, the most
	// records, the version they must be born after, the category and the
	// words to search for.
	kinds    []store.RecordKind
	limit    int
	since    uint64
	category string
	text     string
	// Of a store: the write.
	prepare prepareFunc
}

// checkQuery checks a parsed query's parameters (and a store's data),
// writing and reading nothing; budget is the request's.
func checkQuery(q Query, budget int) (queryArgs, error) {
	known := map[string]bool{"q": true, "scope": true, "category": true, "limit": true, "since": true, "agent": true,
		"session": true, "error": true, "id": true, "all": true, "path": true, "status": true, "budget": true, "approach": true}
	for k := range q.Params {
		if !known[k] {
			return queryArgs{}, invalid("params", "unknown parameter %q (known: q, scope, category, id, path, error, approach, agent, session, since, limit, all, budget)", k)
		}
	}
	qa := queryArgs{budget: budget, limit: 10}
	p := q.Params
	if b, ok := p["budget"]; ok {
		n, err := strconv.Atoi(b)
		if err != nil || n <= 0 || n > MaxAskBudget {
			return qa, invalid("budget", "%q is not a number of tokens from 1 to %d", b, MaxAskBudget)
		}
		qa.budget = n
	}
	switch {
	case q.Intent == Store:
		prepare, err := storeCall(q)
		qa.prepare = prepare
		return qa, err
	case q.Intent != Recall && q.Intent != Check:
		return qa, fmt.Errorf("intent %q", q.Intent)
	case q.Domain == Files:
		if st := p["status"]; st != "" && FileStatus(st).rank() < 0 {
			return qa, invalid("status", "%q is not one of read, modified, created, deleted", st)
		}
		return qa, nil
	}
	qa.kinds = domainKinds(q.Domain, p["all"] == "true")
	if s, ok := p["limit"]; ok {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 || n > 1000 {
			return qa, invalid("limit", "%q is not a number from 1 to 1000", s)
		}
		qa.limit = n
	}
	if s, ok := p["since"]; ok {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return qa, invalid("since", "%q is not a version", s)
		}
		qa.since = n
	}
	qa.category = p["category"]
	qa.text = strings.TrimSpace(p["q"] + " " + p["error"] + " " + p["approach"])
	if sc := p["scope"]; sc != "" {
		if ValidateCategory(sc) == nil || isL1(sc) {
			if qa.category == "" {
				qa.category = sc
			}
		} else {
			qa.text = strings.TrimSpace(qa.text + " " + sc)
		}
	}
	if qa.category != "" && !isL1(qa.category) {
		if err := checkCategory(qa.category, true); err != nil {
			return qa, err
		}
	}
	return qa, nil
}

// run runs one parsed query.
func (a *Archive) run(ctx context.Context, h *Handle, q Query, opts AskOptions) (Answer, error) {
	qa, err := checkQuery(q, opts.Budget)
	if err != nil {
		return Answer{Query: q.String(), Status: StatusOK}, err
	}
	return a.runChecked(ctx, h, q, qa)
}

// runChecked runs one query checkQuery passed.
func (a *Archive) runChecked(ctx context.Context, h *Handle, q Query, qa queryArgs) (Answer, error) {
	ans := Answer{Query: q.String(), Status: StatusOK}
	switch q.Intent {
	case Recall, Check:
		var err error
		if q.Domain == Files {
			ans, err = a.recallFiles(ctx, q, ans, qa.budget)
		} else if ans, err = a.recall(ctx, q, qa, ans); err == nil {
			err = a.currentUses(ctx, ans.Records)
		}
		if err != nil {
			return ans, err
		}
		if q.Intent == Check {
			found := len(ans.Records) > 0 || len(ans.Files) > 0 || ans.Omitted > 0
			ans.Found = &found
			verdict := "no: nothing in the history matches"
			if found {
				verdict = "yes: the history holds it"
			}
			ans.Text = strings.TrimSpace(verdict + "\n" + ans.Text)
			ans.Tokens = a.enc.Count(ans.Text)
		}
		return ans, nil
	}
	return ans, fmt.Errorf("intent %q", q.Intent)
}

// runAll runs the queries of one request, which checkQuery passed, in
// order. Their stores are one transaction, committed where the first
// store stands: every store is written, or none is. So a query before
// the first store sees none of them, and a query after it sees them all.
// A store sees the stores before it as a request of its own after theirs
// would. Until the commit, an error refuses the whole request, naming the
// query that failed; after it, a read that fails is answered FAILED with
// its reason (the stores stay written, and their answers say so).
func (a *Archive) runAll(ctx context.Context, h *Handle, qs []Query, args []queryArgs) ([]Answer, error) {
	var b batch
	stepOf := make([]int, len(qs)) // the query's step in b, or -1
	first := -1                    // the first store
	for i, q := range qs {
		stepOf[i] = -1
		if q.Intent != Store {
			continue
		}
		s, err := args[i].prepare(ctx, h, &b)
		if err != nil {
			return nil, queryFailed(qs, i, err)
		}
		stepOf[i] = len(b.steps)
		b.steps = append(b.steps, s)
		if first < 0 {
			first = i
		}
	}
	out := make([]Answer, 0, len(qs))
	var wrs []WriteResult
	for i, q := range qs {
		if i == first {
			var failed int
			var err error
			if wrs, failed, err = h.commit(ctx, &b); err != nil {
				at := -1 // the transaction, not a store of it
				if failed >= 0 {
					at = slices.Index(stepOf, failed)
					err = fmt.Errorf("%s: %w", b.steps[failed].what, a.overLimit(&b, wrs, failed, err))
				}
				qe := queryFailed(qs, at, err)
				qe.stores = len(b.steps)
				return nil, qe
			}
		}
		if stepOf[i] >= 0 {
			out = append(out, a.storeAnswer(q, wrs[stepOf[i]]))
			continue
		}
		ans, err := a.runChecked(ctx, h, q, args[i])
		switch {
		case err != nil && first < 0:
			return nil, err // a request that reads only
		case err != nil && i < first:
			return nil, queryFailed(qs, i, err)
		case err != nil:
			ans = Answer{Query: q.String(), Status: StatusFailed, Reason: err.Error()}
			ans.Text = ans.Status + ": " + ans.Reason
			ans.Tokens = a.enc.Count(ans.Text)
		}
		out = append(out, ans)
	}
	return out, nil
}

// overLimit returns err, unless it is a rate limit that the request
// reaches by itself: the records its stores before the one that failed
// would have created fill the limit. Then waiting cannot help (the same
// request would fail again), and the error says to split the request.
func (a *Archive) overLimit(b *batch, wrs []WriteResult, failed int, err error) error {
	var rl *RateLimitError
	if !errors.As(err, &rl) || rl.RetryAfter == 0 || b.steps[failed].g == nil {
		return err
	}
	kind, limit, what := store.RecordKind(""), a.opts.Limits.WritesPerMinute, "global records"
	if b.steps[failed].g.kind == store.KindPattern {
		kind, limit, what = store.KindPattern, a.opts.Limits.PatternsPerMinute, "patterns"
	}
	n := 0
	for i, wr := range wrs[:failed] {
		if g := b.steps[i].g; g != nil && wr.Status == "created" && (kind == "" || g.kind == kind) {
			n++
		}
	}
	if n < limit {
		return err
	}
	return &RateLimitError{Msg: fmt.Sprintf("the request stores more than %d %s, the most one writer may add in a minute: send its stores in smaller requests", limit, what)}
}

// queryError is a request refused at one of its queries, before anything
// of it was written.
type queryError struct {
	// n is the number of queries; at is the one that failed, from 0, or -1
	// when the transaction of the stores did (not any one store), and
	// stores is then how many there were.
	at, n, stores int
	query         string // clipped
	err           error
}

func queryFailed(qs []Query, at int, err error) *queryError {
	e := &queryError{at: at, n: len(qs), err: err}
	if at >= 0 {
		e.query = truncate(qs[at].String(), maxQueryShown)
	}
	return e
}

// maxQueryShown is the most bytes of a query an error shows.
const maxQueryShown = 80

func (e *queryError) Error() string {
	if e.at < 0 {
		return fmt.Sprintf("nothing was written: the transaction of the request's %d stores: %v", e.stores, e.err)
	}
	return fmt.Sprintf("nothing was written: query %d of %d (%s): %v", e.at+1, e.n, e.query, e.err)
}

func (e *queryError) Unwrap() error { return e.err }

func domainKinds(d Domain, all bool) []store.RecordKind {
	if all {
		return []store.RecordKind{store.KindPattern, store.KindFailure, store.KindInsight, store.KindDecision, store.KindIntent}
	}
	switch d {
	case Patterns:
		return []store.RecordKind{store.KindPattern}
	case Failures:
		return []store.RecordKind{store.KindFailure}
	case Decisions:
		return []store.RecordKind{store.KindDecision}
	case Learnings:
		return []store.RecordKind{store.KindInsight}
	}
	return nil
}

// recall answers from the global history, most relevant first: hybrid
// retrieval (full-text and, with an embedder, vectors, fused) when the
// query has words, the newest active records when it has only filters.
func (a *Archive) recall(ctx context.Context, q Query, qa queryArgs, ans Answer) (Answer, error) {
	p := q.Params
	all := p["all"] == "true"
	kinds, limit, since, category, text, budget := qa.kinds, qa.limit, qa.since, qa.category, qa.text, qa.budget
	id := p["id"]
	gv, _, err := a.st.ArchiveVersions(ctx, "")
	if err != nil {
		return ans, err
	}
	ans.GV = gv
	m, err := a.global(ctx, gv)
	if err != nil {
		return ans, err
	}
	if id != "" && !isRecordID(id) {
		// The seed's check:decisions?id=api-versioning names a topic.
		text = strings.TrimSpace(text + " " + strings.ReplaceAll(id, "-", " "))
		id = ""
	}
	keep := func(r *Record) bool {
		if !slices.Contains(kinds, r.Kind) {
			return false
		}
		if r.GV <= since {
			return false
		}
		if category != "" && r.Category != category && !strings.HasPrefix(r.Category, category+".") {
			return false
		}
		if v := p["agent"]; v != "" && r.Agent != v {
			return false
		}
		if v := p["session"]; v != "" && r.Session != v {
			return false
		}
		return all || m.active(r, a.now())
	}
	var ranked []*Record
	below := "" // why the records ranked are no answer
	a.mu.RLock()
	defer a.mu.RUnlock()
	switch {
	case id != "":
		if i, ok := m.byID[id]; ok {
			ranked = append(ranked, &m.records[i])
		}
	case text == "":
		for i := len(m.records) - 1; i >= 0 && len(ranked) < limit; i-- {
			if keep(&m.records[i]) {
				ranked = append(ranked, &m.records[i])
			}
		}
	default:
		ans.Signals = []string{"lexical"}
		hits, err := a.st.ArchiveSearch(ctx, text, kinds, 100)
		if err != nil {
			return ans, err
		}
		// Both lists name a record by its position in the mirror.
		var lex []retrieve.Ranked
		for _, hit := range hits {
			i, ok := m.byID[hit.Record.ID]
			if !ok || !keep(&m.records[i]) {
				continue
			}
			lex = append(lex, retrieve.Ranked{ID: int64(i), Score: hit.Score, Time: hit.Record.CreatedAt.UnixNano()})
		}
		var vec []retrieve.Ranked
		var mean float64 // of the cosines of the records compared
		if a.opts.Embedder != nil {
			v, mu, err := a.vectorRank(ctx, m, text, keep)
			if err != nil {
				a.log.Warn("archive recall without vectors", "err", err)
			} else {
				ans.Signals = append(ans.Signals, "vector")
				vec, mean = v, mu
			}
		}
		for _, f := range retrieve.Fuse(lex, vec, a.opts.Fusion) {
			ranked = append(ranked, &m.records[f.ID])
			if len(ranked) >= limit {
				break
			}
		}
		// Words and vectors rank every record somewhere: the ranking is an
		// answer only if its best record holds enough of the words.
		if floor := a.opts.RelevanceFloor; floor > 0 && len(ranked) > 0 {
			cosines := make(map[int]float64, len(vec))
			for _, v := range vec {
				cosines[int(v.ID)] = v.Score
			}
			best := slices.Max(m.relevance(text, ranked, cosines, mean))
			if best < floor {
				ranked = nil
				below = fmt.Sprintf(" (the closest record matches %.0f%% of the query; the floor is %.0f%%)", 100*best, 100*floor)
			}
		}
	}
	lines := make([]string, 0, len(ranked))
	for _, r := range ranked {
		rec := m.reader(*r)
		ans.Records = append(ans.Records, rec)
		lines = append(lines, recordLine(&rec))
	}
	ans.Text, ans.Tokens, ans.Omitted = a.fit(lines, budget)
	// The budget bounds the whole answer: the records the text leaves out
	// are left out of it too (Omitted counts them).
	ans.Records = ans.Records[:len(ans.Records)-ans.Omitted]
	if len(ranked) == 0 {
		ans.Text = "nothing found" + below
		ans.Tokens = a.enc.Count(ans.Text)
	}
	return ans, nil
}

func isRecordID(id string) bool {
	i := strings.LastIndexByte(id, '-')
	if i <= 0 {
		return false
	}
	if _, err := strconv.ParseUint(id[i+1:], 10, 64); err != nil {
		return false
	}
	for _, p := range kindPrefix {
		if id[:i] == p {
			return true
		}
	}
	return false
}

// vectorRank ranks the records keep accepts by the cosine of their
// embedding with text's, naming each by its position in the mirror, and
// returns the mean cosine of the records compared. Records never change,
// so their vectors are cached by model and text; at most the newest 5,000 are
// compared.
func (a *Archive) vectorRank(ctx context.Context, m *mirror, text string, keep func(*Record) bool) ([]retrieve.Ranked, float64, error) {
	var pos []int
	for i := len(m.records) - 1; i >= 0 && len(pos) < 5000; i-- {
		if keep(&m.records[i]) {
			pos = append(pos, i)
		}
	}
	if len(pos) == 0 {
		return nil, 0, nil
	}
	texts := make([]string, 0, len(pos)+1)
	texts = append(texts, text)
	for _, i := range pos {
		texts = append(texts, m.records[i].Text())
	}
	vecs, err := a.embedTexts(ctx, texts)
	if err != nil {
		return nil, 0, err
	}
	out := make([]retrieve.Ranked, 0, len(pos))
	var sum float64
	for k, i := range pos {
		cos := float64(vek32.Dot(vecs[0], vecs[k+1]))
		sum += cos
		if cos > 0 {
			out = append(out, retrieve.Ranked{ID: int64(i), Score: cos, Time: m.records[i].CreatedAt.UnixNano()})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Score > out[j].Score })
	return out[:min(len(out), 100)], sum / float64(len(pos)), nil
}

// recordLine renders a record in one line for a model.
func recordLine(r *Record) string {
	cat := ""
	if r.Category != "" {
		cat = " [" + r.Category + "]"
	}
	line := fmt.Sprintf("%s %s%s %s", r.Kind, r.ID, cat, r.Text())
	switch {
	case r.Pattern != nil && r.Pattern.Authority != "" && r.Pattern.Authority != Suggestion:
		line += " (" + string(r.Pattern.Authority) + ")"
	case r.Decision != nil && r.Decision.Rationale != "":
		line += " — because " + r.Decision.Rationale
	case r.Failure != nil && len(r.Resolutions) > 0:
		best := r.Resolutions[0]
		line += fmt.Sprintf(" → fix: %s (%d/%d succeeded)", best.Approach, best.Successes, best.Successes+best.Partials+best.Failures)
	}
	if r.SupersededBy != "" {
		line += " (superseded by " + r.SupersededBy + ")"
	}
	return line + fmt.Sprintf(" — %s, %s", r.Agent, r.CreatedAt.Format("2006-01-02"))
}

// fit joins lines, in order, while they fit budget tokens.
func (a *Archive) fit(lines []string, budget int) (string, int, int) {
	var kept []string
	used := 0
	for i, l := range lines {
		n := a.enc.Count(l + "\n")
		if used+n > budget {
			return strings.Join(kept, "\n"), a.enc.Count(strings.Join(kept, "\n")), len(lines) - i
		}
		kept = append(kept, l)
		used += n
	}
	text := strings.Join(kept, "\n")
	return text, a.enc.Count(text), 0
}

// recallFiles answers about file states across sessions.
func (a *Archive) recallFiles(ctx context.Context, q Query, ans Answer, budget int) (Answer, error) {
	p := q.Params
	path := strings.TrimPrefix(strings.TrimSpace(p["path"]+p["q"]), "./")
	recs, err := a.st.ArchiveRecords(ctx, store.RecordQuery{Kinds: []store.RecordKind{store.KindFile}, SessionID: p["session"], Newest: true, Limit: 20000})
	if err != nil {
		return ans, err
	}
	seen := map[string]bool{}
	var lines []string
	for _, r := range recs {
		k := r.SessionID + "\x00" + r.Key
		if seen[k] {
			continue
		}
		seen[k] = true
		if path != "" && !pathsOverlap(path, r.Key) && !strings.Contains(r.Key, path) {
			continue
		}
		var f FileState
		if err := json.Unmarshal(r.Body, &f); err != nil {
			return ans, err
		}
		if st := p["status"]; st != "" && string(f.Status) != st {
			continue
		}
		if v := p["agent"]; v != "" && !slices.Contains(f.Agents, v) {
			continue
		}
		ans.Files = append(ans.Files, FileAt{Session: r.SessionID, FileState: f})
		line := fmt.Sprintf("file %s (%s by %s in session %s)", f.Path, f.Status, strings.Join(f.Agents, ","), r.SessionID)
		if f.Summary != "" {
			line += ": " + f.Summary
		}
		lines = append(lines, line)
	}
	gv, _, err := a.st.ArchiveVersions(ctx, "")
	if err != nil {
		return ans, err
	}
	ans.GV = gv
	ans.Text, ans.Tokens, ans.Omitted = a.fit(lines, budget)
	ans.Files = ans.Files[:len(ans.Files)-ans.Omitted]
	if len(lines) == 0 {
		ans.Text = "nothing found"
		ans.Tokens = a.enc.Count(ans.Text)
	}
	return ans, nil
}

// prepareFunc prepares a store's write as a step of a batch.
type prepareFunc func(ctx context.Context, h *Handle, b *batch) (step, error)

// storeCall decodes a store's data into the write it asks for, refusing
// unknown fields by name.
func storeCall(q Query) (prepareFunc, error) {
	dec := func(v any) error {
		d := json.NewDecoder(bytes.NewReader(q.Data))
		d.DisallowUnknownFields()
		if err := d.Decode(v); err != nil {
			return invalid("data", "%s: %v", q.Domain, err)
		}
		return nil
	}
	switch q.Domain {
	case Patterns:
		var p Pattern
		if err := dec(&p); err != nil {
			return nil, err
		}
		if err := p.validate(); err != nil {
			return nil, err
		}
		return func(ctx context.Context, h *Handle, b *batch) (step, error) { return h.patternStep(ctx, b, p) }, nil
	case Failures:
		// The seed's own example: {approach, outcome, resolution}, where
		// outcome is what happened and the resolution's outcome is given
		// as resolution_outcome.
		var in struct {
			Category          string   `json:"category"`
			Approach          string   `json:"approach"`
			Reason            string   `json:"reason"`
			Outcome           string   `json:"outcome"`
			Context           string   `json:"context"`
			Error             string   `json:"error"`
			Files             []string `json:"files"`
			Resolution        string   `json:"resolution"`
			ResolutionOutcome Outcome  `json:"resolution_outcome"`
			Notes             string   `json:"notes"`
		}
		if err := dec(&in); err != nil {
			return nil, err
		}
		f := Failure{Category: in.Category, Approach: in.Approach, Reason: in.Reason, Context: in.Context, Error: in.Error, Files: in.Files}
		if f.Reason == "" {
			f.Reason = in.Outcome
		}
		if in.Resolution != "" || in.ResolutionOutcome != "" {
			f.Resolution = &Resolution{Approach: in.Resolution, Outcome: in.ResolutionOutcome, Notes: in.Notes}
			if in.ResolutionOutcome == "" {
				return nil, invalid("resolution_outcome", "the resolution %q needs an outcome: success, partial or failure", in.Resolution)
			}
		}
		if err := f.validate(); err != nil {
			return nil, err
		}
		return func(ctx context.Context, h *Handle, b *batch) (step, error) { return h.failureStep(ctx, b, f) }, nil
	case Decisions:
		var d Decision
		if err := dec(&d); err != nil {
			return nil, err
		}
		if err := d.validate(); err != nil {
			return nil, err
		}
		return func(ctx context.Context, h *Handle, b *batch) (step, error) { return h.decisionStep(ctx, b, d) }, nil
	case Learnings:
		var in struct {
			Insight  string   `json:"insight"`
			Learning string   `json:"learning"`
			Text     string   `json:"text"`
			Category string   `json:"category"`
			Evidence string   `json:"evidence"`
			Scope    []string `json:"scope"`
		}
		if err := dec(&in); err != nil {
			return nil, err
		}
		i := Insight{Insight: cmpOr(in.Insight, in.Learning, in.Text), Category: in.Category, Evidence: in.Evidence, Scope: in.Scope}
		if err := i.validate(); err != nil {
			return nil, err
		}
		return func(ctx context.Context, h *Handle, b *batch) (step, error) { return h.insightStep(ctx, b, i) }, nil
	case Files:
		var f FileState
		if err := dec(&f); err != nil {
			return nil, err
		}
		if f.Status == "" {
			f.Status = Modified
		}
		if err := f.validate(); err != nil {
			return nil, err
		}
		return func(_ context.Context, h *Handle, _ *batch) (step, error) { return h.fileStep(f) }, nil
	}
	return nil, errors.New("unknown domain")
}

func cmpOr(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// storeAnswer is the answer of a store that wrote wr.
func (a *Archive) storeAnswer(q Query, wr WriteResult) Answer {
	ans := Answer{Query: q.String(), Status: StatusOK, Write: &wr, GV: wr.GV}
	switch wr.Status {
	case "merged":
		ans.Text = fmt.Sprintf("merged into %s (%s, similarity %.2f)", wr.ID, wr.Merged.Method, wr.Merged.Similarity)
	default:
		ans.Text = fmt.Sprintf("%s %s (gv %d)", wr.Status, wr.ID, wr.GV)
		if wr.ID == "" {
			ans.Text = fmt.Sprintf("%s (sv %d)", wr.Status, wr.SV)
		}
	}
	ans.Tokens = a.enc.Count(ans.Text)
	return ans
}
