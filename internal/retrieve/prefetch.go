package retrieve

import (
	"context"
	"fmt"
	"path"
	"strings"
	"time"
	"unicode"

	"github.com/engramhq/engram/internal/chunk"
	"github.com/engramhq/engram/internal/store"
)

// Pre-fetch defaults. The seed's priors (excerpts over confidence 0.90,
// at most two; hints over 0.85) left 82 % of LoCoMo's blocks empty and
// carried evidence for 6 % of its questions: with an offline embedder no
// signal here is right nine times in ten. The defaults are calibrated
// instead on what a block must do (BENCHMARKS.md, "Pre-fetch
// calibration"): carry evidence for at least half of the questions whose
// answer is in the store, and stay empty for those whose answer is not.
// The relevance floor (MinCoverage, MinSignal) decides whether anything
// is injected; above it, the best hits are excerpts until their share of
// the budget is full.
const (
	DefaultBudgetShare         = 0.10
	DefaultExcerptThreshold    = 0
	DefaultConfidenceThreshold = 0
	DefaultMaxExcerpts         = 8
	DefaultMaxHints            = 3
	DefaultExcerptShare        = 0.6
	DefaultHintShare           = 0.3
	DefaultMaxExcerptLines     = 50
	// DefaultMinCoverage is the relevance floor: the least share of a
	// query's words (IDF-weighted) a hit must hold to be injected. On
	// LoCoMo, 0.35 carries evidence for half the questions and injects
	// something for one in twenty asked of another conversation.
	DefaultMinCoverage = 0.35
	// DefaultMinSignal is the least cosine (and coverage) a hit must have
	// to be injected when both backends answered.
	DefaultMinSignal = 0.25
	// DefaultSingleSignalFactor raises the thresholds when only one
	// backend answered, to make up for the missing corroboration.
	DefaultSingleSignalFactor = 1.1
	// DefaultCandidates is how many hits pre-fetch considers.
	DefaultCandidates = 20
)

// PrefetchOptions configure Prefetch. The zero value uses the defaults;
// a negative MaxExcerpts or MaxHints means none.
type PrefetchOptions struct {
	// BudgetShare of the tokens left in the window is the block's budget.
	BudgetShare float64
	// Budget, if positive, is the budget in tokens, overriding
	// BudgetShare.
	Budget int
	// ExcerptThreshold is the confidence for an excerpt (tier A),
	// ConfidenceThreshold for a one-line hint (tier B).
	ExcerptThreshold, ConfidenceThreshold float64
	MaxExcerpts, MaxHints                 int
	// ExcerptShare and HintShare of the budget go to each tier.
	ExcerptShare, HintShare float64
	MaxExcerptLines         int
	// MinCoverage is the relevance floor: a hit that holds less of the
	// query's words (Hit.Coverage) is never injected, whatever else says
	// it matches; below it the block says nothing rather than the least
	// bad record. Negative means no floor.
	MinCoverage float64
	// MinSignal is the least confidence each backend must give a hit when
	// both answered: injection needs lexical and vector support.
	// Negative means no minimum.
	MinSignal float64
	// SingleSignalFactor multiplies the thresholds when only one backend
	// answered (the other failed, or no embedder is configured).
	SingleSignalFactor float64
	// Candidates is how many of the best hits are considered.
	Candidates int
	Filter     store.Filter
	// Now is when the query is asked (Query.Now).
	Now time.Time
	// NoRecord leaves the access record alone: the injected excerpts do
	// not join the hot tier (for measuring, not for agents).
	NoRecord bool
	// Exclude are entries never injected: what the context shows already.
	Exclude map[string]bool
	// Compact writes an excerpt of what was said (not code) as one line
	// of its source and its words, without the fence and the confidence:
	// for packing many short turns.
	Compact bool
}

// PrefetchDefaults returns o with its zero fields set to the defaults,
// as Prefetch uses them.
func PrefetchDefaults(o PrefetchOptions) PrefetchOptions {
	o.defaults()
	return o
}

func (o *PrefetchOptions) defaults() {
	def := func(v *float64, d float64) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.BudgetShare, DefaultBudgetShare)
	def(&o.ExcerptThreshold, DefaultExcerptThreshold)
	def(&o.ConfidenceThreshold, DefaultConfidenceThreshold)
	def(&o.ExcerptShare, DefaultExcerptShare)
	def(&o.HintShare, DefaultHintShare)
	if o.MinSignal == 0 {
		o.MinSignal = DefaultMinSignal
	}
	if o.MinCoverage == 0 {
		o.MinCoverage = DefaultMinCoverage
	}
	def(&o.SingleSignalFactor, DefaultSingleSignalFactor)
	if o.MaxExcerpts == 0 {
		o.MaxExcerpts = DefaultMaxExcerpts
	}
	if o.MaxHints == 0 {
		o.MaxHints = DefaultMaxHints
	}
	if o.MaxExcerptLines <= 0 {
		o.MaxExcerptLines = DefaultMaxExcerptLines
	}
	if o.Candidates <= 0 {
		o.Candidates = DefaultCandidates
	}
}

// Injected is one item of a pre-fetch block.
type Injected struct {
	ChunkID int64  `json:"chunk_id"`
	EntryID string `json:"entry_id"`
	// MsgID is the message's own ID, if it gave one.
	MsgID      string  `json:"msg_id,omitempty"`
	Source     string  `json:"source"`
	Confidence float64 `json:"confidence"`
	Tokens     int     `json:"tokens"`
	// Lines is the excerpt's line count, or for a hint the chunk's.
	Lines int `json:"lines"`
}

// Block is a pre-fetch block: excerpts (tier A) and hints (tier B), with
// the text to inject.
type Block struct {
	Text     string     `json:"text"`
	Tokens   int        `json:"tokens"`
	Budget   int        `json:"budget"`
	Excerpts []Injected `json:"excerpts"`
	Hints    []Injected `json:"hints"`
	// SingleSignal is set when only one backend answered and the raised
	// thresholds applied.
	SingleSignal bool     `json:"single_signal"`
	Degraded     bool     `json:"degraded"`
	Faults       []string `json:"faults,omitempty"`
}

// Best is what Confidence measures a hit's standing against: the best
// fused score among the candidates, and the best re-ranked relevance
// (times its boosts and prior).
type Best struct{ Score, Rerank float64 }

// BestOf returns the Best of a search's hits.
func BestOf(hits []Hit) Best {
	var b Best
	for _, h := range hits {
		b.Score = max(b.Score, h.Score)
		if h.Reranked {
			b.Rerank = max(b.Rerank, h.Rerank*h.weight())
		}
	}
	return b
}

// Confidence is a hit's confidence, from 0 to 1: the mean of its lexical
// coverage (the IDF-weighted share of the query's words it holds), its
// cosine to the query, and its standing among the candidates (its fused
// score over the best one's), each counted only if its backend answered.
// Standing carries what the two signals alone miss: the boosts and the
// speaker prior, and how far the hit is behind the best. A re-ranked hit
// stands by the re-ranker's relevance (times the same boosts and prior)
// over the best re-ranked one's: its judgment of the passage replaces the
// fused score's. ok is false when both backends answered and either signal
// is under minSignal: high confidence needs lexical and vector support.
func Confidence(h Hit, best Best, lexical, vector bool, minSignal float64) (c float64, ok bool) {
	cos := min(max(h.Vector, 0), 1)
	standing := 0.0
	switch {
	case h.Reranked && best.Rerank > 0:
		standing = min(max(h.Rerank*h.weight()/best.Rerank, 0), 1)
	case !h.Reranked && best.Score > 0:
		standing = min(max(h.Score/best.Score, 0), 1)
	}
	switch {
	case lexical && vector:
		return (h.Coverage + cos + standing) / 3, h.Coverage >= minSignal && cos >= minSignal
	case lexical:
		return (h.Coverage + standing) / 2, true
	case vector:
		return (cos + standing) / 2, true
	}
	return 0, false
}

// Prefetch builds the block to inject with a query, given the tokens left
// in the agent's window: at most MaxExcerpts excerpts of hits over
// ExcerptThreshold in ExcerptShare of the budget, then at most MaxHints
// one-line hints of hits over ConfidenceThreshold in HintShare of it.
// count counts tokens. The injected excerpts count as used: they join the
// hot tier.
func (h *Hybrid) Prefetch(ctx context.Context, query string, remaining int, opts PrefetchOptions, count func(string) int) (Block, error) {
	opts.defaults()
	budget := opts.Budget
	if budget <= 0 {
		budget = int(float64(max(remaining, 0)) * opts.BudgetShare)
	}
	b := Block{Budget: budget, Excerpts: []Injected{}, Hints: []Injected{}}
	if budget <= 0 || strings.TrimSpace(query) == "" {
		return b, nil
	}
	res, err := h.Search(ctx, Query{Text: query, Filter: opts.Filter, Limit: opts.Candidates, Now: opts.Now})
	if err != nil {
		return b, err
	}
	b.Degraded, b.Faults = res.Degraded, res.Faults
	excerptT, hintT, floor := opts.ExcerptThreshold, opts.ConfidenceThreshold, opts.MinCoverage
	if !res.Lexical || !res.Vector {
		b.SingleSignal = true
		excerptT *= opts.SingleSignalFactor
		hintT *= opts.SingleSignalFactor
		floor *= opts.SingleSignalFactor
	}
	excerptBudget := int(float64(budget) * opts.ExcerptShare)
	hintBudget := int(float64(budget) * opts.HintShare)
	var parts []string
	usedExcerpt, usedHint := 0, 0
	// Parts are joined by a line break, which costs the tier of the part
	// it comes before.
	joint := 0
	sep := count("\n")
	var injected []int64
	best := BestOf(res.Hits)
	for _, hit := range res.Hits {
		if opts.Exclude[hit.Chunk.EntryID] {
			continue
		}
		conf, ok := Confidence(hit, best, res.Lexical, res.Vector, opts.MinSignal)
		if !ok || conf < hintT || !aboveFloor(hit, res, floor, opts.MinSignal*opts.SingleSignalFactor) {
			continue
		}
		if conf >= excerptT && len(b.Excerpts) < opts.MaxExcerpts && opts.MaxExcerpts > 0 {
			text, in, fits := excerpt(hit, conf, opts.MaxExcerptLines, excerptBudget-usedExcerpt-joint, opts.Compact, opts.Filter.SessionID != "", count)
			if fits {
				parts = append(parts, text)
				b.Excerpts = append(b.Excerpts, in)
				usedExcerpt += in.Tokens + joint
				joint = sep
				injected = append(injected, hit.Chunk.ID)
				continue
			}
		}
		if len(b.Hints) < opts.MaxHints && opts.MaxHints > 0 {
			text := hint(hit)
			n := count(text)
			if usedHint+joint+n > hintBudget {
				continue
			}
			parts = append(parts, text)
			b.Hints = append(b.Hints, Injected{ChunkID: hit.Chunk.ID, EntryID: hit.Chunk.EntryID, MsgID: hit.Occurrence.MsgID, Source: source(hit),
				Confidence: conf, Tokens: n, Lines: hit.Chunk.EndLine - hit.Chunk.StartLine + 1})
			usedHint += n + joint
			joint = sep
		}
	}
	if len(parts) == 0 {
		return b, nil
	}
	b.Text = strings.Join(parts, "\n")
	b.Tokens = count(b.Text)
	if opts.NoRecord {
		return b, nil
	}
	if err := h.Used(ctx, injected); err != nil {
		h.opts.Log.Warn("record pre-fetch access", "err", err)
	}
	return b, nil
}

// aboveFloor reports whether a hit clears the relevance floor: its
// coverage of the query, where the lexical backend answered; its cosine,
// where only the vector backend did.
func aboveFloor(hit Hit, res Result, coverage, cosine float64) bool {
	if res.Lexical {
		return hit.Coverage >= coverage
	}
	return hit.Vector >= cosine
}

// source names where a hit is from: path:start-end for files, the session
// and turn for conversation.
func source(h Hit) string {
	c := h.Chunk
	if len(h.Occurrence.Files) > 0 && h.Occurrence.Type == store.CodeFile {
		return fmt.Sprintf("%s:%d-%d", h.Occurrence.Files[0], c.StartLine, c.EndLine)
	}
	s := string(h.Occurrence.Type)
	if h.Occurrence.SessionID != "" {
		s = fmt.Sprintf("session %s turn %d %s", h.Occurrence.SessionID, h.Occurrence.Turn, h.Occurrence.Type)
	}
	if c.StartLine > 1 || c.Ordinal > 0 {
		s += fmt.Sprintf(" lines %d-%d", c.StartLine, c.EndLine)
	}
	return s
}

// compactSource names where a hit said in a conversation is from, short:
// its turn and speaker, and its session unless the search is of one.
func compactSource(h Hit, oneSession bool) string {
	who := string(h.Occurrence.Type)
	switch h.Occurrence.Type {
	case store.UserPrompt:
		who = "user"
	case store.AgentResponse:
		who = "assistant"
	case store.ToolCall:
		who = "tool call"
	case store.ToolResult:
		who = "tool result"
	}
	s := fmt.Sprintf("turn %d, %s", h.Occurrence.Turn, who)
	if h.Occurrence.SessionID != "" && !oneSession {
		s = "session " + h.Occurrence.SessionID + " " + s
	}
	if c := h.Chunk; c.StartLine > 1 || c.Ordinal > 0 {
		s += fmt.Sprintf(" lines %d-%d", c.StartLine, c.EndLine)
	}
	return s
}

// excerpt renders a tier-A excerpt of at most maxLines lines that fits in
// budget tokens, cut at a line end; fits is false if not even one line
// fits.
func excerpt(h Hit, conf float64, maxLines, budget int, compact, oneSession bool, count func(string) int) (string, Injected, bool) {
	lang := ""
	if len(h.Occurrence.Files) > 0 {
		lang = chunk.Language(h.Occurrence.Files[0], nil)
	}
	lines := strings.SplitAfter(strings.TrimRight(h.Chunk.Text, "\n"), "\n")
	lines = lines[:min(len(lines), maxLines)]
	file := len(h.Occurrence.Files) > 0 && h.Occurrence.Type == store.CodeFile
	render := func(n int) (string, Injected) {
		in := Injected{ChunkID: h.Chunk.ID, EntryID: h.Chunk.EntryID, MsgID: h.Occurrence.MsgID, Confidence: conf, Lines: n}
		start := h.Chunk.StartLine
		src := source(h)
		if file {
			src = fmt.Sprintf("%s:%d-%d", h.Occurrence.Files[0], start, start+n-1)
		}
		in.Source = src
		body := strings.TrimRight(strings.Join(lines[:n], ""), "\n")
		fence := fenceFor(body)
		text := fmt.Sprintf("[AUTO-RETRIEVED: %s | confidence: %.2f]\n%s%s\n%s\n%s", src, conf, fence, lang, body, fence)
		if compact && lang == "" && !file {
			// Said, not a file: where (the turn and who spoke, the session
			// too when the search spans several) and the words, no fence.
			// A file keeps its path and fence, whatever its language.
			text = fmt.Sprintf("[%s] %s", compactSource(h, oneSession), body)
		}
		if n < len(lines) || h.Chunk.EndLine > start+n-1 {
			if len(h.Occurrence.Files) > 0 {
				text += fmt.Sprintf("\n[more: engram show %s]", path.Clean(h.Occurrence.Files[0]))
			} else {
				text += fmt.Sprintf("\n[more: engram show %.12s]", h.Chunk.EntryID)
			}
		}
		in.Tokens = count(text)
		return text, in
	}
	// The most lines that fit: the count only shrinks as lines go.
	lo, hi := 0, len(lines)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if _, in := render(mid); in.Tokens <= budget {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if lo == 0 || !saysSomething(lines[:lo]) {
		return "", Injected{}, false
	}
	text, in := render(lo)
	return text, in, true
}

// saysSomething reports whether lines hold a letter or a digit outside
// fences: a budget that takes only a Markdown file's fence line, or blank
// lines, leaves an excerpt that tells the model nothing.
func saysSomething(lines []string) bool {
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			continue
		}
		if strings.IndexFunc(t, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) >= 0 {
			return true
		}
	}
	return false
}

// fenceFor is a code fence for body: three backticks, or one more than
// the longest run of them that opens a line of body (a Markdown file's
// own fences), so that body cannot close it.
func fenceFor(body string) string {
	n := 3
	for l := range strings.SplitSeq(body, "\n") {
		t := strings.TrimLeft(l, " ")
		run := len(t) - len(strings.TrimLeft(t, "`"))
		n = max(n, run+1)
	}
	return strings.Repeat("`", n)
}

// hint renders a tier-B one-line hint: where, what, how long.
func hint(h Hit) string {
	what := ""
	if len(h.Chunk.Symbols) > 0 {
		what = strings.Join(h.Chunk.Symbols[:min(3, len(h.Chunk.Symbols))], ", ")
	} else {
		for line := range strings.SplitSeq(h.Chunk.Text, "\n") {
			if line = strings.TrimSpace(line); line != "" {
				what = line
				break
			}
		}
	}
	if r := []rune(what); len(r) > 80 {
		what = string(r[:79]) + "…"
	}
	lines := h.Chunk.EndLine - h.Chunk.StartLine + 1
	return fmt.Sprintf("[RELATED: %s - %s, %d lines]", source(h), what, lines)
}
