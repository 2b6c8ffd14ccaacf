package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/terms"
)

// How lexical search stays fast. FTS5 ranks by BM25 by scoring every chunk
// that matches any query term, so a query's cost grows with the document
// frequencies of its terms: "the" or "error" in a million chunks means
// scoring hundreds of thousands of rows. Such terms also carry almost no
// information (BM25's IDF of a term in half the chunks is near zero). So a
// query is planned before it runs:
//
//  1. Each word's document frequency is read from the FTS vocabulary.
//  2. Words are taken rarest first while their combined frequency stays
//     within MaxPostings; the common rest is dropped. Words that occur
//     nowhere are dropped too.
//  3. If even the rarest word is over the budget, the query is made only of
//     very common words; then the newest Window matches are ranked, newest
//     winning ties: recency is the best prior left.
//
// A filter that matches few occurrences (a session, a turn range) is applied
// first: only that session's chunks are matched, whatever the words.

// Defaults for SearchOptions.
const (
	DefaultMaxPostings     = 150_000
	DefaultWindow          = 4_000
	DefaultMetaWeight      = 2.0
	DefaultSelectiveFilter = 20_000
	// MaxLimit bounds Query.Limit.
	MaxLimit = 1000
)

// SearchOptions tune lexical search. The zero value uses the defaults.
type SearchOptions struct {
	// MaxPostings bounds the work of one query, in postings read: words
	// are taken rarest first until their document frequencies would sum past
	// it. Zero means DefaultMaxPostings.
	MaxPostings int
	// Window is how many of the newest matches are ranked when every word
	// is more common than MaxPostings allows. Zero means DefaultWindow.
	Window int
	// MetaWeight is the BM25 weight of a chunk's paths, symbols, keywords
	// and entities relative to its text, which weighs 1. Zero means
	// DefaultMetaWeight.
	MetaWeight float64
	// SelectiveFilter is the most occurrences a filter may match to be
	// applied before the full-text match. Zero means DefaultSelectiveFilter.
	SelectiveFilter int
}

func (o SearchOptions) withDefaults() SearchOptions {
	if o.MaxPostings <= 0 {
		o.MaxPostings = DefaultMaxPostings
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.MetaWeight <= 0 {
		o.MetaWeight = DefaultMetaWeight
	}
	if o.SelectiveFilter <= 0 {
		o.SelectiveFilter = DefaultSelectiveFilter
	}
	return o
}

// plan is a query made ready for FTS5.
type plan struct {
	match    string // the MATCH expression; empty if nothing can match
	windowed bool   // rank only the newest Window matches
	dropped  []string
}

// group is one query word with its frequencies.
type group struct {
	terms.Group
	// matches estimates how many chunks match the word; cost is the
	// postings read to find them.
	matches, cost int64
}

// unknownDF stands for the frequency of a term the vocabulary cannot be
// asked about: terms with non-ASCII letters, which the FTS tokenizer folds
// (diacritics, case) in ways this package does not repeat. They are
// treated as rare, which at worst costs one slower query.
const unknownDF = -1

func (s *Store) planQuery(ctx context.Context, groups []terms.Group) (plan, error) {
	var words []string
	for _, g := range groups {
		words = append(words, g.Whole)
		words = append(words, g.Parts...)
	}
	df, err := s.docFreqs(ctx, words)
	if err != nil {
		return plan{}, err
	}
	freq := func(t string) int64 {
		if n, ok := df[t]; ok {
			return n
		}
		if isASCII(t) {
			return 0
		}
		return unknownDF
	}
	var gs []group
	for _, g := range groups {
		w := freq(g.Whole)
		matches, cost := max(w, 0), max(w, 0)
		if len(g.Parts) > 0 {
			// The phrase of the parts matches at most as often as its
			// rarest part, and reading it costs all of their postings.
			phrase, phraseCost := int64(-2), int64(0)
			for _, p := range g.Parts {
				f := freq(p)
				if f == 0 {
					phrase, phraseCost = 0, 0
					break
				}
				phraseCost += max(f, 0)
				if phrase == -2 || f < phrase {
					phrase = f
				}
			}
			if phrase != 0 {
				matches += max(phrase, 0)
				cost += phraseCost
			} else {
				g.Parts = nil // the phrase cannot match
			}
		}
		if w == 0 && len(g.Parts) == 0 {
			continue // occurs nowhere
		}
		gs = append(gs, group{Group: g, matches: matches, cost: cost})
	}
	if len(gs) == 0 {
		return plan{}, nil
	}
	sort.SliceStable(gs, func(i, j int) bool { return gs[i].matches < gs[j].matches })
	var p plan
	var keep []string
	var total int64
	for i, g := range gs {
		if i > 0 && total+g.cost > int64(s.opts.Search.MaxPostings) {
			p.dropped = append(p.dropped, g.Whole)
			continue
		}
		total += g.cost
		keep = append(keep, matchGroup(g.Group))
	}
	p.windowed = gs[0].cost > int64(s.opts.Search.MaxPostings)
	p.match = strings.Join(keep, " OR ")
	return p, nil
}

// matchGroup renders one word as an FTS5 expression: the whole word, or
// for a compound identifier the whole or the phrase of its parts. Terms are
// letters and digits only; quoting keeps words like NEAR or AND literal.
func matchGroup(g terms.Group) string {
	if len(g.Parts) == 0 {
		return `"` + g.Whole + `"`
	}
	return `("` + g.Whole + `" OR "` + strings.Join(g.Parts, " ") + `")`
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// docFreqs returns how many chunks hold each term.
func (s *Store) docFreqs(ctx context.Context, words []string) (map[string]int64, error) {
	df := map[string]int64{}
	var ascii []string
	for _, w := range words {
		if isASCII(w) {
			ascii = append(ascii, w)
		}
	}
	const batch = 500
	for start := 0; start < len(ascii); start += batch {
		part := ascii[start:min(start+batch, len(ascii))]
		err := s.query(ctx, `SELECT term, doc FROM chunks_vocab WHERE term IN (`+placeholders(len(part))+`)`,
			anySlice(part), func(rows *sql.Rows) error {
				var t string
				var n int64
				if err := rows.Scan(&t, &n); err != nil {
					return err
				}
				df[t] = n
				return nil
			})
		if err != nil {
			return nil, fmt.Errorf("read term frequencies: %w", err)
		}
	}
	return df, nil
}

// filterSQL renders a filter as a condition on occurrences o.
func filterSQL(f store.Filter) (string, []any) {
	var conds []string
	var args []any
	add := func(cond string, v ...any) {
		conds = append(conds, cond)
		args = append(args, v...)
	}
	if f.SessionID != "" {
		add("o.session_id = ?", f.SessionID)
	}
	if f.AgentID != "" {
		add("o.agent_id = ?", f.AgentID)
	}
	if f.AgentType != "" {
		add("o.agent_type = ?", f.AgentType)
	}
	if len(f.Types) > 0 {
		add("o.type IN ("+placeholders(len(f.Types))+")", anySlice(f.Types)...)
	}
	if f.TurnFrom > 0 {
		add("o.turn >= ?", f.TurnFrom)
	}
	if f.TurnTo > 0 {
		add("o.turn <= ?", f.TurnTo)
	}
	if !f.Since.IsZero() {
		add("o.time >= ?", unixNano(f.Since))
	}
	if !f.Until.IsZero() {
		add("o.time <= ?", unixNano(f.Until))
	}
	if len(conds) == 0 {
		return "1", nil
	}
	return strings.Join(conds, " AND "), args
}

// candidate is a matching chunk before its details are read.
type candidate struct {
	rowid int64
	bm25  float64
}

// Search implements store.Store.
func (s *Store) Search(ctx context.Context, q store.Query) ([]store.Hit, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = store.DefaultLimit
	}
	limit = min(limit, MaxLimit)
	for _, t := range q.Filter.Types {
		if !t.Valid() {
			return nil, &store.ValidationError{Field: "type", Msg: fmt.Sprintf("unknown content type %q", t)}
		}
	}
	groups := terms.Query(q.Text)
	if len(groups) == 0 {
		return nil, nil
	}
	p, err := s.planQuery(ctx, groups)
	if err != nil {
		return nil, fmt.Errorf("search %q: %w", q.Text, err)
	}
	if p.match == "" {
		return nil, nil
	}
	if len(p.dropped) > 0 {
		s.log.Debug("search dropped common words", "dropped", p.dropped, "windowed", p.windowed)
	}
	cands, err := s.candidates(ctx, p, q.Filter, limit)
	if err != nil {
		return nil, fmt.Errorf("search %q: %w", q.Text, err)
	}
	hits, err := s.hydrate(ctx, cands, q.Filter)
	if err != nil {
		return nil, fmt.Errorf("search %q: %w", q.Text, err)
	}
	return hits, nil
}

func (s *Store) candidates(ctx context.Context, p plan, f store.Filter, limit int) ([]candidate, error) {
	rank := "bm25(chunks_fts, 1.0, " + strconv.FormatFloat(s.opts.Search.MetaWeight, 'f', -1, 64) + ")"
	cond, condArgs := filterSQL(f)
	args := []any{p.match}
	var q string
	switch {
	case !f.IsZero() && s.selective(ctx, cond, condArgs):
		q = `SELECT f.rowid, ` + rank + ` AS s FROM chunks_fts f
			WHERE chunks_fts MATCH ? AND f.rowid IN (
				SELECT c.id FROM occurrences o JOIN chunks c ON c.entry = o.entry WHERE ` + cond + `)
			ORDER BY s, f.rowid DESC LIMIT ?`
		args = append(append(args, condArgs...), limit)
	default:
		exists := ""
		if !f.IsZero() {
			exists = ` AND EXISTS (SELECT 1 FROM chunks c JOIN occurrences o ON o.entry = c.entry
				WHERE c.id = f.rowid AND ` + cond + `)`
			args = append(args, condArgs...)
		}
		if p.windowed {
			q = `SELECT rowid, s FROM (
				SELECT f.rowid AS rowid, ` + rank + ` AS s FROM chunks_fts f
				WHERE chunks_fts MATCH ?` + exists + ` ORDER BY f.rowid DESC LIMIT ?)
				ORDER BY s, rowid DESC LIMIT ?`
			args = append(args, s.opts.Search.Window, limit)
		} else {
			q = `SELECT f.rowid, ` + rank + ` AS s FROM chunks_fts f
				WHERE chunks_fts MATCH ?` + exists + ` ORDER BY s, f.rowid DESC LIMIT ?`
			args = append(args, limit)
		}
	}
	var out []candidate
	err := s.query(ctx, q, args, func(rows *sql.Rows) error {
		var c candidate
		if err := rows.Scan(&c.rowid, &c.bm25); err != nil {
			return err
		}
		out = append(out, c)
		return nil
	})
	return out, err
}

// selective reports whether the filter matches few enough occurrences to be
// applied before the full-text match.
func (s *Store) selective(ctx context.Context, cond string, args []any) bool {
	var n int
	err := s.read(ctx, func(db *sql.DB) error {
		return db.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM occurrences o WHERE `+cond+` LIMIT ?)`,
			append(append([]any(nil), args...), s.opts.Search.SelectiveFilter+1)...).Scan(&n)
	})
	return err == nil && n <= s.opts.Search.SelectiveFilter
}

// hydrate reads the chunks of candidates and the latest occurrence of each
// that matches the filter.
func (s *Store) hydrate(ctx context.Context, cands []candidate, f store.Filter) ([]store.Hit, error) {
	cond, condArgs := filterSQL(f)
	hits := make([]store.Hit, 0, len(cands))
	for _, c := range cands {
		var h store.Hit
		var entryPK int64
		err := s.read(ctx, func(db *sql.DB) error {
			row := db.QueryRowContext(ctx, `SELECT `+chunkColumns+`, e.token_count, e.pk
				FROM chunks c JOIN entries e ON e.pk = c.entry WHERE c.id = ?`, c.rowid)
			var err error
			h.Chunk, _, err = scanChunk(row, &h.EntryTokens, &entryPK)
			if err != nil {
				return err
			}
			row = db.QueryRowContext(ctx, `SELECT `+occColumns+` FROM occurrences o JOIN entries e ON e.pk = o.entry
				WHERE o.entry = ? AND `+cond+` ORDER BY o.seq DESC LIMIT 1`, append([]any{entryPK}, condArgs...)...)
			h.Occurrence, err = scanOccurrence(row)
			return err
		})
		if errors.Is(err, sql.ErrNoRows) {
			continue // cannot happen: content is never deleted
		}
		if err != nil {
			return nil, fmt.Errorf("read hit %d: %w", c.rowid, err)
		}
		h.Score = -c.bm25
		hits = append(hits, h)
	}
	return hits, nil
}
