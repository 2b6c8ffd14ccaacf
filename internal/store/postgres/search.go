package postgres

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/lexical"
	"github.com/engramhq/engram/internal/terms"
)

// Lexical search plans a query as the SQLite backend does (package
// lexical: words taken rarest first within a budget of postings, common
// ones dropped and rescored, the newest matches scored when every word is
// very common) and ranks the planned words with BM25 over engram's own
// postings exactly as FTS5 does (fts_bm25.go), so that both backends return
// the same hits in the same order. A search reads in one REPEATABLE READ
// transaction: its counts, statistics and postings are of one state of
// the index, whatever other servers write meanwhile.
//
// A filter that matches few occurrences (SelectiveFilter) is applied
// first: only its chunks are scored. Any other is checked on the ranked
// chunks, best first, until enough pass.

// SearchOptions tune lexical search. The zero value uses the defaults of
// package lexical, the SQLite backend's.
type SearchOptions struct {
	// MaxPostings bounds the work of one query, in postings read: words
	// are taken rarest first until their document frequencies would sum past
	// it. Zero means lexical.DefaultMaxPostings.
	MaxPostings int
	// Window is how many of the newest matches are scored when every word
	// is more common than MaxPostings allows. Zero means
	// lexical.DefaultWindow.
	Window int
	// MetaWeight is the BM25 weight of a chunk's paths, symbols, keywords
	// and entities relative to its text, which weighs 1. Zero means
	// lexical.DefaultMetaWeight.
	MetaWeight float64
	// ContextWeight is the BM25 weight of a chunk's conversation context.
	// Zero means lexical.DefaultContextWeight.
	ContextWeight float64
	// SelectiveFilter is the most occurrences a filter may match to be
	// applied before ranking. Zero means lexical.DefaultSelectiveFilter.
	SelectiveFilter int
}

func (o SearchOptions) withDefaults() SearchOptions {
	if o.MaxPostings <= 0 {
		o.MaxPostings = lexical.DefaultMaxPostings
	}
	if o.Window <= 0 {
		o.Window = lexical.DefaultWindow
	}
	if o.MetaWeight <= 0 {
		o.MetaWeight = lexical.DefaultMetaWeight
	}
	if o.ContextWeight <= 0 {
		o.ContextWeight = lexical.DefaultContextWeight
	}
	if o.SelectiveFilter <= 0 {
		o.SelectiveFilter = lexical.DefaultSelectiveFilter
	}
	return o
}

// weights are the BM25 weights of a chunk's fields: body, meta, ctx.
func (s *Store) weights() [3]float64 {
	return [3]float64{1, s.search.MetaWeight, s.search.ContextWeight}
}

// dfCache remembers document frequencies between queries. An exact count
// is good while its space's generation (fts_stats.gen, moved on by every
// server's every change to the space) is the one it was counted at; a
// count that reached the cap is kept, as the SQLite backend keeps it.
type dfCache struct {
	mu sync.Mutex // guards m
	m  map[dfKey]dfEntry
	// hits and misses count lookups, for CacheStats.
	hits, misses atomic.Int64
}

type dfKey struct {
	space int16
	word  string
}

type dfEntry struct {
	n      int64 // documents holding the word, counted up to a cap
	capped bool  // the count reached the cap: the word is at least that common
	gen    int64 // the space's generation when counted
}

// dfCacheMax bounds the cache; it is cleared when full.
const dfCacheMax = 100_000

// CacheStat counts the lookups of one of the store's caches.
type CacheStat struct {
	Name         string
	Hits, Misses int64
}

// CacheStats reports the store's caches: word_counts, the document
// frequencies query planning counts and keeps.
func (s *Store) CacheStats() []CacheStat {
	return []CacheStat{{Name: "word_counts", Hits: s.df.hits.Load(), Misses: s.df.misses.Load()}}
}

// docFreqs returns how many documents of the spaces hold each word,
// counting at most MaxPostings+1 of them.
func (s *Store) docFreqs(ctx context.Context, q querier, words []string, spaces []int16, stats map[int16]spaceStats) (map[string]int64, error) {
	limit := int64(s.search.MaxPostings) + 1
	df := map[string]int64{}
	var missing []dfKey
	s.df.mu.Lock()
	for _, w := range words {
		if _, done := df[w]; done {
			continue
		}
		df[w] = 0
		for _, sp := range spaces {
			k := dfKey{sp, w}
			if e, ok := s.df.m[k]; ok && (e.capped && e.n >= limit || !e.capped && e.gen == stats[sp].gen) {
				df[w] = min(df[w]+e.n, limit)
				s.df.hits.Add(1)
			} else {
				missing = append(missing, k)
				s.df.misses.Add(1)
			}
		}
	}
	s.df.mu.Unlock()
	if len(missing) == 0 {
		return df, nil
	}
	counts := make(map[dfKey]int64, len(missing))
	bySpace := map[int16][]string{}
	for _, k := range missing {
		switch toks := tokens(k.word); len(toks) {
		case 0:
			counts[k] = 0
		case 1:
			bySpace[k.space] = append(bySpace[k.space], toks[0])
		default:
			// A word that FTS5 would cut in several tokens matches as
			// their phrase.
			ps, err := loadPostings(ctx, q, k.space, toks, toks)
			if err != nil {
				return nil, fmt.Errorf("count %q: %w", k.word, err)
			}
			counts[k] = min(int64(len(matchPhrase(toks, ps))), limit)
		}
	}
	for sp, toks := range bySpace {
		rows, err := q.Query(ctx, `SELECT w, (SELECT count(*) FROM (SELECT 1 FROM fts_postings
				WHERE term = w AND space = $2 LIMIT $3) x) FROM unnest($1::text[]) w`, toks, sp, limit)
		if err != nil {
			return nil, fmt.Errorf("count words: %w", err)
		}
		byTok := map[string]int64{}
		for rows.Next() {
			var tok string
			var n int64
			if err := rows.Scan(&tok, &n); err != nil {
				rows.Close()
				return nil, fmt.Errorf("count words: %w", err)
			}
			byTok[tok] = n
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("count words: %w", err)
		}
		for _, k := range missing {
			if toks := tokens(k.word); k.space == sp && len(toks) == 1 {
				counts[k] = byTok[toks[0]]
			}
		}
	}
	s.df.mu.Lock()
	for _, k := range missing {
		n := counts[k]
		df[k.word] = min(df[k.word]+n, limit)
		if s.df.m == nil || len(s.df.m) >= dfCacheMax {
			s.df.m = map[dfKey]dfEntry{}
		}
		s.df.m[k] = dfEntry{n: n, capped: n >= limit, gen: stats[k.space].gen}
	}
	s.df.mu.Unlock()
	return df, nil
}

// searchState is what one search reads before it ranks.
type searchState struct {
	stats  map[int16]spaceStats
	chunks int64 // chunks stored, the corpus size of coverage and capped BM25
}

func readSearchState(ctx context.Context, q querier) (searchState, error) {
	var st searchState
	var err error
	if st.stats, err = readStats(ctx, q); err != nil {
		return st, err
	}
	err = q.QueryRow(ctx, `SELECT coalesce((SELECT value FROM counters WHERE name = 'chunks'), 0)`).Scan(&st.chunks)
	return st, err
}

// plan plans a query's words over spaces.
func (s *Store) plan(ctx context.Context, q querier, groups []terms.Group, spaces []int16, st searchState) (lexical.Plan, error) {
	return lexical.PlanQuery(groups, int64(s.search.MaxPostings), func(words []string) (map[string]int64, error) {
		return s.docFreqs(ctx, q, words, spaces, st.stats)
	})
}

// Search implements store.Store.
func (s *Store) Search(ctx context.Context, q store.Query) ([]store.Hit, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = store.DefaultLimit
	}
	limit = min(limit, lexical.MaxLimit)
	if err := q.Filter.Validate(); err != nil {
		return nil, err
	}
	groups := terms.Query(q.Text)
	if len(groups) == 0 {
		return nil, nil
	}
	spaces := []int16{spaceMain}
	if q.Filter.History {
		spaces = append(spaces, spaceHistory)
	}
	var hits []store.Hit
	err := s.read(ctx, func(tx pgx.Tx) error {
		var err error
		hits, err = s.searchTx(ctx, tx, q.Filter, groups, spaces, limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("search %q: %w", q.Text, err)
	}
	return hits, nil
}

func (s *Store) searchTx(ctx context.Context, tx pgx.Tx, f store.Filter, groups []terms.Group, spaces []int16, limit int) ([]store.Hit, error) {
	st, err := readSearchState(ctx, tx)
	if err != nil {
		return nil, err
	}
	p, err := s.plan(ctx, tx, groups, spaces, st)
	if err != nil {
		return nil, err
	}
	if len(p.Groups) == 0 {
		return nil, nil
	}
	if len(p.Dropped) > 0 || p.Windowed {
		s.log.Debug("search planned", "dropped", p.Dropped, "windowed", p.Windowed)
	}
	fc, err := s.newFilterCheck(ctx, tx, f)
	if err != nil {
		return nil, err
	}
	counter := lexical.Counter(groups)
	var hits []store.Hit
	var counted map[int64]map[string]int // term counts by chunk, where known
	if len(p.Dropped) > 0 && !p.Windowed {
		hits, counted, err = s.searchRescored(ctx, tx, spaces, st, p, fc, limit, counter)
	} else {
		for _, sp := range spaces {
			var more []store.Hit
			if p.Windowed {
				more, err = s.searchWindow(ctx, tx, sp, st, p, fc, limit)
			} else {
				more, err = s.searchRanked(ctx, tx, sp, st, p, fc, limit)
			}
			if err != nil {
				break
			}
			hits = append(hits, more...)
		}
		if len(spaces) > 1 {
			sort.SliceStable(hits, func(i, j int) bool { return hits[i].Score > hits[j].Score })
			hits = hits[:min(limit, len(hits))]
		}
	}
	if err != nil {
		return nil, err
	}
	counts := make([]map[string]int, len(hits))
	for i := range hits {
		if c, ok := counted[hits[i].Chunk.ID]; ok {
			counts[i] = c
		} else {
			counts[i] = counter.Count(hits[i].Chunk.Text)
		}
	}
	lexical.Coverage(groups, p, hits, counts, st.chunks, int64(s.search.MaxPostings)+1)
	return hits, nil
}

// filterCheck applies a search's filter to chunks: a selective filter by
// the set of its chunks, read first; any other on ranked chunks.
type filterCheck struct {
	f       store.Filter
	allowed map[int64]bool // the filter's chunks, if selective
}

func (s *Store) newFilterCheck(ctx context.Context, q querier, f store.Filter) (*filterCheck, error) {
	fc := &filterCheck{f: f}
	if f.IsZero() {
		return fc, nil
	}
	var a args
	cond := filterSQL(f, &a)
	var n int
	err := q.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM occurrences o WHERE `+cond+` LIMIT `+
		a.add(s.search.SelectiveFilter+1)+`) x`, a...).Scan(&n)
	if err != nil {
		return nil, fmt.Errorf("filter: %w", err)
	}
	if n > s.search.SelectiveFilter {
		return fc, nil
	}
	a = nil
	cond = filterSQL(f, &a)
	rows, err := q.Query(ctx, `SELECT c.id FROM occurrences o JOIN chunks c ON c.entry = o.entry WHERE `+cond, a...)
	if err != nil {
		return nil, fmt.Errorf("filter: %w", err)
	}
	fc.allowed = map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("filter: %w", err)
		}
		fc.allowed[id] = true
	}
	rows.Close()
	return fc, rows.Err()
}

// keep says which documents to score: nil for all.
func (fc *filterCheck) keep() func(doc int64) bool {
	if fc.allowed == nil {
		return nil
	}
	return func(doc int64) bool { return fc.allowed[doc] }
}

// checked reports whether the filter is applied before ranking (or there
// is none).
func (fc *filterCheck) checked() bool { return fc.allowed != nil || fc.f.IsZero() }

// take returns the first limit ranked chunks that pass the filter.
func (fc *filterCheck) take(ctx context.Context, q querier, ranked []docScore, limit int) ([]docScore, error) {
	if fc.checked() {
		return ranked[:min(limit, len(ranked))], nil
	}
	var out []docScore
	for start := 0; start < len(ranked) && len(out) < limit; {
		end := min(len(ranked), start+max(2*(limit-len(out)), 100))
		ids := make([]int64, 0, end-start)
		for _, d := range ranked[start:end] {
			ids = append(ids, d.Doc)
		}
		var a args
		idArg := a.add(ids)
		cond := filterSQL(fc.f, &a)
		rows, err := q.Query(ctx, `SELECT c.id FROM chunks c WHERE c.id = ANY(`+idArg+`)
			AND EXISTS (SELECT 1 FROM occurrences o WHERE o.entry = c.entry AND `+cond+`)`, a...)
		if err != nil {
			return nil, fmt.Errorf("filter: %w", err)
		}
		pass := map[int64]bool{}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, fmt.Errorf("filter: %w", err)
			}
			pass[id] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("filter: %w", err)
		}
		for _, d := range ranked[start:end] {
			if pass[d.Doc] && len(out) < limit {
				out = append(out, d)
			}
		}
		start = end
	}
	return out, nil
}

// rankCandidates returns the best limit chunks of a space by BM25 of the
// planned words that pass the filter.
func (s *Store) rankCandidates(ctx context.Context, q querier, space int16, st searchState, p lexical.Plan, fc *filterCheck, limit int) ([]docScore, error) {
	ranked, err := rank(ctx, q, space, st.stats[space], lexical.TermGroups(p.Groups), s.weights(), fc.keep())
	if err != nil {
		return nil, err
	}
	return fc.take(ctx, q, ranked, limit)
}

// searchRanked ranks every match of the planned words by BM25.
func (s *Store) searchRanked(ctx context.Context, q querier, space int16, st searchState, p lexical.Plan, fc *filterCheck, limit int) ([]store.Hit, error) {
	cands, err := s.rankCandidates(ctx, q, space, st, p, fc, limit)
	if err != nil {
		return nil, err
	}
	return s.hydrate(ctx, q, cands, fc.f)
}

// searchRescored ranks more candidates than asked for by the words the
// plan kept, adds to each the weight of the dropped words it holds
// (lexical.CappedBM25), and reads the best in full. It returns the
// candidates' term counts by chunk too.
func (s *Store) searchRescored(ctx context.Context, q querier, spaces []int16, st searchState, p lexical.Plan, fc *filterCheck,
	limit int, counter *terms.Counter) ([]store.Hit, map[int64]map[string]int, error) {
	fetch := min(lexical.MaxLimit, max(2*limit, limit+lexical.RescoreExtra))
	var cands []docScore
	for _, sp := range spaces {
		more, err := s.rankCandidates(ctx, q, sp, st, p, fc, fetch)
		if err != nil {
			return nil, nil, err
		}
		cands = append(cands, more...)
	}
	if len(cands) == 0 {
		return nil, nil, nil
	}
	texts, err := chunkTexts(ctx, q, cands)
	if err != nil {
		return nil, nil, err
	}
	counted := make(map[int64]map[string]int, len(cands))
	for i := range cands {
		c := counter.Count(texts[cands[i].Doc])
		counted[cands[i].Doc] = c
		cands[i].Score += lexical.CappedBM25(c, p.Dropped, st.chunks)
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].Score > cands[j].Score })
	// Read the best; more if some are no longer current.
	var hits []store.Hit
	for next := 0; len(hits) < limit && next < len(cands); {
		end := min(len(cands), next+limit-len(hits))
		more, err := s.hydrate(ctx, q, cands[next:end], fc.f)
		if err != nil {
			return nil, nil, err
		}
		hits, next = append(hits, more...), end
	}
	return hits, counted, nil
}

// searchWindow scores the newest Window matches of very common words with
// capped BM25, without reading every posting of every word.
func (s *Store) searchWindow(ctx context.Context, q querier, space int16, st searchState, p lexical.Plan, fc *filterCheck, limit int) ([]store.Hit, error) {
	gs := lexical.TermGroups(p.Groups)
	docs, err := s.newestMatches(ctx, q, space, gs, fc, max(limit, s.search.Window))
	if err != nil || len(docs) == 0 {
		return nil, err
	}
	cands := make([]docScore, len(docs))
	for i, d := range docs {
		cands[i].Doc = d
	}
	texts, err := chunkTexts(ctx, q, cands)
	if err != nil {
		return nil, err
	}
	counter := lexical.Counter(gs)
	for i := range cands {
		cands[i].Score = lexical.CappedBM25(counter.Count(texts[cands[i].Doc]), p.Groups, st.chunks)
	}
	// Best first; among equal scores the newest, as cands come newest first.
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].Score > cands[j].Score })
	return s.hydrate(ctx, q, cands[:min(limit, len(cands))], fc.f)
}

// newestMatches returns the n newest documents of space matching any of
// groups that pass the filter, newest first. It reads each token's
// postings newest first, a page at a time: the documents at or above the
// oldest one of the token whose page is newest are known in full, and the
// next page starts below it.
func (s *Store) newestMatches(ctx context.Context, q querier, space int16, groups []terms.Group, fc *filterCheck, n int) ([]int64, error) {
	phrases := queryPhrases(groups)
	var toks []string
	for _, ph := range phrases {
		for _, tok := range ph {
			if !slices.Contains(toks, tok) {
				toks = append(toks, tok)
			}
		}
	}
	// The planner takes each term's rows to be few and reads them all
	// with a bitmap scan and a sort; they are the most common terms, so
	// that read every posting (127 ms for three common words at 100,000
	// chunks). Without bitmap scans it walks the primary key backwards
	// and stops at the page: 1 to 1.5 ms. Only for these queries, within
	// the search's transaction.
	if _, err := q.Exec(ctx, `SET LOCAL enable_bitmapscan = off`); err != nil {
		return nil, err
	}
	defer func() { _, _ = q.Exec(ctx, `SET LOCAL enable_bitmapscan TO DEFAULT`) }()
	page := 2 * n
	var found []int64
	cursor := int64(math.MaxInt64)
	for len(found) < n {
		var a args
		where := ""
		switch {
		case fc.allowed != nil:
			ids := make([]int64, 0, len(fc.allowed))
			for id := range fc.allowed {
				ids = append(ids, id)
			}
			where = " AND p.doc = ANY(" + a.add(ids) + ")"
		case !fc.f.IsZero():
			where = " AND EXISTS (SELECT 1 FROM chunks c JOIN occurrences o ON o.entry = c.entry WHERE c.id = p.doc AND " +
				filterSQL(fc.f, &a) + ")"
		}
		sql := `SELECT t.term, x.doc, x.body, x.meta, x.ctx, x.pos FROM unnest(` + a.add(toks) + `::text[]) t(term)
			CROSS JOIN LATERAL (SELECT p.doc, p.body, p.meta, p.ctx, p.pos FROM fts_postings p
				WHERE p.term = t.term AND p.space = ` + a.add(space) + ` AND p.doc < ` + a.add(cursor) + where + `
				ORDER BY p.doc DESC LIMIT ` + a.add(page) + `) x`
		rows, err := q.Query(ctx, sql, a...)
		if err != nil {
			return nil, err
		}
		postings := map[string]map[int64]posting{}
		fetched := map[string]int{}
		oldest := map[string]int64{}
		for rows.Next() {
			var (
				tok string
				doc int64
				p   posting
			)
			if err := rows.Scan(&tok, &doc, &p.tf[0], &p.tf[1], &p.tf[2], &p.pos); err != nil {
				rows.Close()
				return nil, err
			}
			if postings[tok] == nil {
				postings[tok] = map[int64]posting{}
			}
			postings[tok][doc] = p
			fetched[tok]++
			if o, ok := oldest[tok]; !ok || doc < o {
				oldest[tok] = doc
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		bound, more := int64(-1), false
		for tok, k := range fetched {
			if k == page {
				more = true
				bound = max(bound, oldest[tok])
			}
		}
		match := map[int64]bool{}
		for _, ph := range phrases {
			for doc := range matchPhrase(ph, postings) {
				if doc >= bound {
					match[doc] = true
				}
			}
		}
		docs := make([]int64, 0, len(match))
		for doc := range match {
			docs = append(docs, doc)
		}
		sort.Slice(docs, func(i, j int) bool { return docs[i] > docs[j] })
		found = append(found, docs...)
		if !more {
			break
		}
		cursor = bound
	}
	return found[:min(n, len(found))], nil
}

// chunkTexts reads the text of chunks in one query.
func chunkTexts(ctx context.Context, q querier, cands []docScore) (map[int64]string, error) {
	ids := make([]int64, len(cands))
	for i, c := range cands {
		ids[i] = c.Doc
	}
	rows, err := q.Query(ctx, `SELECT c.id, substring(e.content FROM c.start_byte + 1 FOR c.end_byte - c.start_byte)
		FROM chunks c JOIN entries e ON e.pk = c.entry WHERE c.id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[int64]string, len(cands))
	for rows.Next() {
		var id int64
		var text []byte
		if err := rows.Scan(&id, &text); err != nil {
			return nil, err
		}
		out[id] = string(text)
	}
	return out, rows.Err()
}

// hydrate reads the chunks of candidates and the latest occurrence of each
// that matches the filter, in two queries, keeping the candidates' order.
// Candidates that are no longer current (unless f.History) or whose entry
// has no occurrence matching the filter are left out.
func (s *Store) hydrate(ctx context.Context, q querier, cands []docScore, f store.Filter) ([]store.Hit, error) {
	if len(cands) == 0 {
		return nil, nil
	}
	type row struct {
		hit   store.Hit
		entry int64
	}
	ids := make([]int64, len(cands))
	for i, c := range cands {
		ids[i] = c.Doc
	}
	chunks := make(map[int64]*row, len(cands))
	rows, err := q.Query(ctx, `SELECT `+chunkColumns+`, e.token_count, e.pk, e.fts
		FROM chunks c JOIN entries e ON e.pk = c.entry WHERE c.id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("read hits: %w", err)
	}
	var entries []int64
	seen := map[int64]bool{}
	for rows.Next() {
		r := &row{}
		var tokens int64
		var fts int16
		if r.hit.Chunk, err = scanChunk(rows, &tokens, &r.entry, &fts); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read hits: %w", err)
		}
		r.hit.EntryTokens = int(tokens)
		if fts == spaceHistory && !f.History {
			continue // no longer current
		}
		chunks[r.hit.Chunk.ID] = r
		if !seen[r.entry] {
			seen[r.entry] = true
			entries = append(entries, r.entry)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(entries) == 0 {
		return nil, err
	}
	// The latest matching occurrence of each entry.
	var a args
	entryArg := a.add(entries)
	cond := filterSQL(f, &a)
	rows, err = q.Query(ctx, `SELECT DISTINCT ON (o.entry) `+occColumns+`, o.entry
		FROM occurrences o JOIN entries e ON e.pk = o.entry
		WHERE o.entry = ANY(`+entryArg+`) AND `+cond+` ORDER BY o.entry, o.seq DESC`, a...)
	if err != nil {
		return nil, fmt.Errorf("read hits: %w", err)
	}
	occ := map[int64]store.Occurrence{}
	for rows.Next() {
		var entry int64
		o, err := scanOccurrence(rows, &entry)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("read hits: %w", err)
		}
		occ[entry] = o
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read hits: %w", err)
	}
	hits := make([]store.Hit, 0, len(cands))
	for _, c := range cands {
		r, ok := chunks[c.Doc]
		if !ok {
			continue
		}
		o, ok := occ[r.entry]
		if !ok {
			continue // no occurrence matches the filter
		}
		h := r.hit
		h.Occurrence = o
		h.Score = c.Score
		hits = append(hits, h)
	}
	return hits, nil
}

// A file of more than one chunk keeps the set of its index terms (see
// terms.Set) in entry_terms, so that a search can tell which of a query's
// words the file holds anywhere without reading and tokenizing it.

// EntryCoverage implements store.Store.
func (s *Store) EntryCoverage(ctx context.Context, text string, ids []string) (map[string]float64, error) {
	groups := terms.Query(text)
	if len(groups) == 0 || len(ids) == 0 {
		return nil, nil
	}
	var out map[string]float64
	err := s.read(ctx, func(tx pgx.Tx) error {
		st, err := readSearchState(ctx, tx)
		if err != nil {
			return err
		}
		p, err := s.plan(ctx, tx, groups, []int16{spaceMain}, st)
		if err != nil {
			return err
		}
		cov := lexical.NewEntryCoverage(groups)
		rows, err := tx.Query(ctx, `SELECT e.id, t.terms, CASE WHEN t.terms IS NULL THEN e.content END
			FROM entries e LEFT JOIN entry_terms t ON t.entry = e.pk WHERE e.id = ANY($1)`, ids)
		if err != nil {
			return err
		}
		for rows.Next() {
			var (
				id      string
				set     []byte
				content []byte
			)
			if err := rows.Scan(&id, &set, &content); err != nil {
				rows.Close()
				return err
			}
			cov.Add(id, set, content)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		out = cov.Shares(p, st.chunks, int64(s.search.MaxPostings)+1)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("coverage of %q: %w", text, err)
	}
	return out, nil
}
