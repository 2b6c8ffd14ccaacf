package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/lexical"
	"github.com/engramhq/engram/internal/terms"
)

// How lexical search stays fast: package lexical plans a query's words
// within a budget of postings (see its doc), and this file matches the plan
// with FTS5. FTS5 ranks by BM25 by scoring every chunk that matches any
// query word, reading each word's whole posting list for its IDF, so a
// query costs about the sum of its words' document frequencies (about 1 µs
// per posting here).
//
// A filter that matches very few occurrences (a short session, a turn
// range) is applied before the match: only those chunks are matched. FTS5
// then seeks each of them in every word's postings, and a seek reads the
// postings up to the chunk, so that costs about the filter's occurrences
// times the matches times 30 to 170 ns, against 1.5 to 5 µs a match for
// checking each match against the filter (measured on the LongMemEval
// store of engram eval, 10,866 turns, and the 100,000-chunk bench store:
// a time range of 1,700 turns took 90 to 2,200 ms applied first and 2 to
// 23 ms checked per match). Applying it first pays only under about 40
// occurrences, whatever the words.

// Defaults for SearchOptions.
const (
	DefaultMaxPostings     = lexical.DefaultMaxPostings
	DefaultWindow          = lexical.DefaultWindow
	DefaultMetaWeight      = lexical.DefaultMetaWeight
	DefaultContextWeight   = lexical.DefaultContextWeight
	DefaultSelectiveFilter = lexical.DefaultSelectiveFilter
	// DefaultMmapSize maps up to 2 GiB of the file, SQLite's own ceiling:
	// a search then reads the full-text index in place rather than through
	// a read system call per page, which took about 2 ms off the p95 of
	// hybrid search on a 100,000-chunk store (BENCHMARKS.md). The map takes
	// address space, not memory: its pages are the kernel's page cache,
	// shared by every reader.
	DefaultMmapSize = 2 << 30
	// MaxLimit bounds Query.Limit.
	MaxLimit = lexical.MaxLimit
)

// SearchOptions tune lexical search. The zero value uses the defaults.
type SearchOptions struct {
	// MaxPostings bounds the work of one query, in postings read: words
	// are taken rarest first until their document frequencies would sum past
	// it. Zero means DefaultMaxPostings.
	MaxPostings int
	// Window is how many of the newest matches are scored when every word
	// is more common than MaxPostings allows. Zero means DefaultWindow.
	Window int
	// MetaWeight is the BM25 weight of a chunk's paths, symbols, keywords
	// and entities relative to its text, which weighs 1. Zero means
	// DefaultMetaWeight.
	MetaWeight float64
	// ContextWeight is the BM25 weight of a chunk's conversation context
	// (the end of the previous entry of its session; see context.go).
	// Zero means DefaultContextWeight.
	ContextWeight float64
	// SelectiveFilter is the most occurrences a filter may match to be
	// applied before the full-text match. Zero means DefaultSelectiveFilter.
	SelectiveFilter int
	// MmapSize is how many bytes of the file each read connection maps
	// into memory (SQLite's mmap_size; SQLite caps it at 2 GiB). Writes
	// never go through the map. Zero means DefaultMmapSize; negative turns
	// mapping off.
	MmapSize int64
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
	if o.ContextWeight <= 0 {
		o.ContextWeight = DefaultContextWeight
	}
	if o.SelectiveFilter <= 0 {
		o.SelectiveFilter = DefaultSelectiveFilter
	}
	if o.MmapSize == 0 {
		o.MmapSize = DefaultMmapSize
	}
	return o
}

// plan is a query made ready for FTS5.
type plan struct {
	match    string  // the MATCH expression; empty if nothing can match
	groups   []group // the words in match
	windowed bool    // every word is very common: score the newest matches here
	dropped  []group // planned out as too common; see searchRescored
}

// group is one query word with its frequencies.
type group = lexical.Group

func (s *Store) planQuery(ctx context.Context, groups []terms.Group, tables []string) (plan, error) {
	lp, err := lexical.PlanQuery(groups, int64(s.opts.Search.MaxPostings), func(words []string) (map[string]int64, error) {
		return s.docFreqs(ctx, words, tables)
	})
	if err != nil {
		return plan{}, err
	}
	p := plan{groups: lp.Groups, windowed: lp.Windowed, dropped: lp.Dropped}
	keep := make([]string, len(p.groups))
	for i, g := range p.groups {
		keep[i] = matchGroup(g.Group)
	}
	p.match = strings.Join(keep, " OR ")
	return p, nil
}

// lexical is the plan as package lexical made it.
func (p plan) lexical() lexical.Plan {
	return lexical.Plan{Groups: p.groups, Windowed: p.windowed, Dropped: p.dropped}
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

// dfCache remembers document frequencies between queries.
type dfCache struct {
	mu sync.Mutex // guards m
	m  map[string]dfEntry
	// hits and misses count lookups, for CacheStats.
	hits, misses atomic.Int64
}

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

type dfEntry struct {
	n      int64 // chunks holding the word, counted up to a cap
	capped bool  // the count reached the cap: the word is at least that common
	gen    int64 // the full-text generation when counted
}

// dfCacheMax bounds the cache; it is cleared when full.
const dfCacheMax = 100_000

// docFreqs returns how many chunks of the given full-text tables hold each
// word, counting at most MaxPostings+1 of them.
func (s *Store) docFreqs(ctx context.Context, words []string, tables []string) (map[string]int64, error) {
	_, gen, err := s.ftsState(ctx)
	if err != nil {
		return nil, err
	}
	limit := int64(s.opts.Search.MaxPostings) + 1
	df := map[string]int64{}
	var missing []string
	key := func(table, w string) string { return table + " " + w }
	s.df.mu.Lock()
	for _, w := range words {
		if _, done := df[w]; done {
			continue
		}
		df[w] = 0
		for _, table := range tables {
			if e, ok := s.df.m[key(table, w)]; ok && (e.capped && e.n >= limit || !e.capped && e.gen == gen) {
				df[w] = min(df[w]+e.n, limit)
				s.df.hits.Add(1)
			} else {
				missing = append(missing, key(table, w))
				s.df.misses.Add(1)
			}
		}
	}
	s.df.mu.Unlock()
	for _, k := range missing {
		table, w, _ := strings.Cut(k, " ")
		var n int64
		err := s.read(ctx, func(db *sql.DB) error {
			return db.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT rowid FROM `+table+` WHERE `+table+` MATCH ? LIMIT ?)`,
				`"`+w+`"`, limit).Scan(&n)
		})
		if err != nil {
			return nil, fmt.Errorf("count %q: %w", w, err)
		}
		df[w] = min(df[w]+n, limit)
		s.df.mu.Lock()
		if s.df.m == nil || len(s.df.m) >= dfCacheMax {
			s.df.m = map[string]dfEntry{}
		}
		s.df.m[k] = dfEntry{n: n, capped: n >= limit, gen: gen}
		s.df.mu.Unlock()
	}
	return df, nil
}

// ftsState returns the number of chunks stored and the full-text
// generation.
func (s *Store) ftsState(ctx context.Context) (chunks, gen int64, err error) {
	err = s.query(ctx, `SELECT name, value FROM counters WHERE name IN ('chunks', '`+ftsGeneration+`')`, nil,
		func(rows *sql.Rows) error {
			var name string
			var v int64
			if err := rows.Scan(&name, &v); err != nil {
				return err
			}
			if name == "chunks" {
				chunks = v
			} else {
				gen = v
			}
			return nil
		})
	return chunks, gen, err
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
	if len(f.Paths) > 0 {
		var ors []string
		var pargs []any
		for _, p := range f.Paths {
			if strings.ContainsAny(p, "*?[") {
				ors = append(ors, "j.value GLOB ?")
				pargs = append(pargs, p)
				continue
			}
			p = strings.TrimSuffix(p, "/")
			// p holds no glob characters, so p + "/*" globs its subtree.
			ors = append(ors, "j.value = ? OR j.value GLOB ?")
			pargs = append(pargs, p, p+"/*")
		}
		add("EXISTS (SELECT 1 FROM json_each(o.files) j WHERE "+strings.Join(ors, " OR ")+")", pargs...)
	}
	if len(conds) == 0 {
		return "1", nil
	}
	return strings.Join(conds, " AND "), args
}

// candidate is a matching chunk before its details are read.
type candidate struct {
	rowid int64
	bm25  float64 // FTS5's BM25: lower is better
}

// Search implements store.Store.
func (s *Store) Search(ctx context.Context, q store.Query) ([]store.Hit, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = store.DefaultLimit
	}
	limit = min(limit, MaxLimit)
	if err := q.Filter.Validate(); err != nil {
		return nil, err
	}
	groups := terms.Query(q.Text)
	if len(groups) == 0 {
		return nil, nil
	}
	tables := []string{ftsTable(ftsMain)}
	if q.Filter.History {
		tables = append(tables, ftsTable(ftsHistory))
	}
	p, err := s.planQuery(ctx, groups, tables)
	if err != nil {
		return nil, fmt.Errorf("search %q: %w", q.Text, err)
	}
	if p.match == "" {
		return nil, nil
	}
	if len(p.dropped) > 0 || p.windowed {
		s.log.Debug("search planned", "dropped", p.dropped, "windowed", p.windowed)
	}
	cond, condArgs := filterSQL(q.Filter)
	selective := !q.Filter.IsZero() && s.selective(ctx, cond, condArgs)
	total, _, err := s.ftsState(ctx)
	if err != nil {
		return nil, fmt.Errorf("search %q: %w", q.Text, err)
	}
	counter := lexical.Counter(groups)
	var hits []store.Hit
	var counted map[int64]map[string]int // term counts by chunk, where known
	if len(p.dropped) > 0 && !p.windowed {
		hits, counted, err = s.searchRescored(ctx, tables, p, q.Filter, selective, limit, counter, total)
	} else {
		for _, table := range tables {
			var more []store.Hit
			if p.windowed {
				more, err = s.searchWindow(ctx, table, p, q.Filter, selective, limit)
			} else {
				more, err = s.searchRanked(ctx, table, p, q.Filter, selective, limit)
			}
			if err != nil {
				break
			}
			hits = append(hits, more...)
		}
		if len(tables) > 1 {
			sort.SliceStable(hits, func(i, j int) bool { return hits[i].Score > hits[j].Score })
			hits = hits[:min(limit, len(hits))]
		}
	}
	if err != nil {
		return nil, fmt.Errorf("search %q: %w", q.Text, err)
	}
	counts := make([]map[string]int, len(hits))
	for i := range hits {
		if c, ok := counted[hits[i].Chunk.ID]; ok {
			counts[i] = c
		} else {
			counts[i] = counter.Count(hits[i].Chunk.Text)
		}
	}
	lexical.Coverage(groups, p.lexical(), hits, counts, total, int64(s.opts.Search.MaxPostings)+1)
	return hits, nil
}

// searchRescored ranks more candidates than asked for by the words the
// plan kept, adds to each the weight of the dropped words it holds
// (lexical.CappedBM25), and reads the best in full. It returns the candidates'
// term counts by chunk too.
func (s *Store) searchRescored(ctx context.Context, tables []string, p plan, f store.Filter, selective bool, limit int,
	counter *terms.Counter, total int64) ([]store.Hit, map[int64]map[string]int, error) {
	fetch := min(MaxLimit, max(2*limit, limit+lexical.RescoreExtra))
	var cands []candidate
	for _, table := range tables {
		more, err := s.rankCandidates(ctx, table, p, f, selective, fetch)
		if err != nil {
			return nil, nil, err
		}
		cands = append(cands, more...)
	}
	if len(cands) == 0 {
		return nil, nil, nil
	}
	texts, err := s.chunkTexts(ctx, cands)
	if err != nil {
		return nil, nil, err
	}
	counted := make(map[int64]map[string]int, len(cands))
	for i := range cands {
		c := counter.Count(texts[cands[i].rowid])
		counted[cands[i].rowid] = c
		cands[i].bm25 -= lexical.CappedBM25(c, p.dropped, total)
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].bm25 < cands[j].bm25 })
	// Read the best; more if some are no longer current.
	var hits []store.Hit
	for next := 0; len(hits) < limit && next < len(cands); {
		end := min(len(cands), next+limit-len(hits))
		more, err := s.hydrate(ctx, cands[next:end], f)
		if err != nil {
			return nil, nil, err
		}
		hits, next = append(hits, more...), end
	}
	return hits, counted, nil
}

// restrict returns the SQL that limits FTS rows f to the filter, and its
// arguments: a list of candidate chunks for a selective filter, a check per
// row otherwise.
func restrict(f store.Filter, selective bool) (string, []any) {
	if f.IsZero() {
		return "", nil
	}
	cond, args := filterSQL(f)
	if selective {
		return ` AND f.rowid IN (SELECT c.id FROM occurrences o JOIN chunks c ON c.entry = o.entry WHERE ` + cond + `)`, args
	}
	return ` AND EXISTS (SELECT 1 FROM chunks c JOIN occurrences o ON o.entry = c.entry
		WHERE c.id = f.rowid AND ` + cond + `)`, args
}

// searchRanked ranks every match of the planned words with FTS5's BM25.
func (s *Store) searchRanked(ctx context.Context, table string, p plan, f store.Filter, selective bool, limit int) ([]store.Hit, error) {
	cands, err := s.rankCandidates(ctx, table, p, f, selective, limit)
	if err != nil {
		return nil, err
	}
	return s.hydrate(ctx, cands, f)
}

// rankCandidates returns the best limit matches of table by FTS5's BM25.
func (s *Store) rankCandidates(ctx context.Context, table string, p plan, f store.Filter, selective bool, limit int) ([]candidate, error) {
	rank := "bm25(" + table + ", 1.0, " + strconv.FormatFloat(s.opts.Search.MetaWeight, 'f', -1, 64) + ", " +
		strconv.FormatFloat(s.opts.Search.ContextWeight, 'f', -1, 64) + ")"
	where, args := restrict(f, selective)
	q := `SELECT f.rowid, ` + rank + ` AS s FROM ` + table + ` f WHERE ` + table + ` MATCH ?` + where + ` ORDER BY s, f.rowid DESC LIMIT ?`
	var cands []candidate
	err := s.query(ctx, q, append(append([]any{p.match}, args...), limit), func(rows *sql.Rows) error {
		var c candidate
		if err := rows.Scan(&c.rowid, &c.bm25); err != nil {
			return err
		}
		cands = append(cands, c)
		return nil
	})
	return cands, err
}

// searchWindow scores the newest Window matches of very common words here,
// without FTS5's BM25, whose IDF would read every posting of every word.
func (s *Store) searchWindow(ctx context.Context, table string, p plan, f store.Filter, selective bool, limit int) ([]store.Hit, error) {
	where, args := restrict(f, selective)
	q := `SELECT f.rowid FROM ` + table + ` f WHERE ` + table + ` MATCH ?` + where + ` ORDER BY f.rowid DESC LIMIT ?`
	var cands []candidate
	err := s.query(ctx, q, append(append([]any{p.match}, args...), max(limit, s.opts.Search.Window)), func(rows *sql.Rows) error {
		var c candidate
		if err := rows.Scan(&c.rowid); err != nil {
			return err
		}
		cands = append(cands, c)
		return nil
	})
	if err != nil || len(cands) == 0 {
		return nil, err
	}
	texts, err := s.chunkTexts(ctx, cands)
	if err != nil {
		return nil, err
	}
	total, _, err := s.ftsState(ctx)
	if err != nil {
		return nil, err
	}
	counter := lexical.Counter(lexical.TermGroups(p.groups))
	for i := range cands {
		cands[i].bm25 = -lexical.CappedBM25(counter.Count(texts[cands[i].rowid]), p.groups, total)
	}
	// Best first; among equal scores the newest, as cands come newest first.
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].bm25 < cands[j].bm25 })
	return s.hydrate(ctx, cands[:min(limit, len(cands))], f)
}

// chunkTexts reads the text of chunks in one query.
func (s *Store) chunkTexts(ctx context.Context, cands []candidate) (map[int64]string, error) {
	ids := make([]any, len(cands))
	for i, c := range cands {
		ids[i] = c.rowid
	}
	out := make(map[int64]string, len(cands))
	err := s.query(ctx, `SELECT c.id, substr(e.content, c.start_byte + 1, c.end_byte - c.start_byte)
		FROM chunks c JOIN entries e ON e.pk = c.entry WHERE c.id IN (`+placeholders(len(ids))+`)`, ids,
		func(rows *sql.Rows) error {
			var id int64
			var text []byte
			if err := rows.Scan(&id, &text); err != nil {
				return err
			}
			out[id] = string(text)
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
// that matches the filter, in two queries, keeping the candidates' order.
// Candidates that are no longer current (unless f.History) or whose entry
// has no occurrence matching the filter are left out.
func (s *Store) hydrate(ctx context.Context, cands []candidate, f store.Filter) ([]store.Hit, error) {
	if len(cands) == 0 {
		return nil, nil
	}
	cond, condArgs := filterSQL(f)
	type row struct {
		hit   store.Hit
		entry int64
	}
	chunks := make(map[int64]*row, len(cands))
	occ := map[int64]store.Occurrence{}
	err := s.read(ctx, func(db *sql.DB) error {
		ids := make([]any, len(cands))
		for i, c := range cands {
			ids[i] = c.rowid
		}
		rows, err := db.QueryContext(ctx, `SELECT `+chunkColumns+`, e.token_count, e.pk, e.fts
			FROM chunks c JOIN entries e ON e.pk = c.entry WHERE c.id IN (`+placeholders(len(ids))+`)`, ids...)
		if err != nil {
			return err
		}
		var entries []any
		seen := map[int64]bool{}
		for rows.Next() {
			r := &row{}
			var fts int
			if r.hit.Chunk, _, err = scanChunk(rows, &r.hit.EntryTokens, &r.entry, &fts); err != nil {
				return errors.Join(err, rows.Close())
			}
			if fts == ftsHistory && !f.History {
				continue // no longer current
			}
			chunks[r.hit.Chunk.ID] = r
			if !seen[r.entry] {
				seen[r.entry] = true
				entries = append(entries, r.entry)
			}
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil || len(entries) == 0 {
			return err
		}
		// The latest matching occurrence of each entry.
		rows, err = db.QueryContext(ctx, `SELECT * FROM (SELECT `+occColumns+`, o.entry,
				row_number() OVER (PARTITION BY o.entry ORDER BY o.seq DESC) AS n
			FROM occurrences o JOIN entries e ON e.pk = o.entry
			WHERE o.entry IN (`+placeholders(len(entries))+`) AND `+cond+`) WHERE n = 1`,
			append(entries, condArgs...)...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var entry, n int64
			o, err := scanOccurrence(rows, &entry, &n)
			if err != nil {
				return errors.Join(err, rows.Close())
			}
			occ[entry] = o
		}
		return errors.Join(rows.Err(), rows.Close())
	})
	if err != nil {
		return nil, fmt.Errorf("read hits: %w", err)
	}
	hits := make([]store.Hit, 0, len(cands))
	for _, c := range cands {
		r, ok := chunks[c.rowid]
		if !ok {
			continue
		}
		o, ok := occ[r.entry]
		if !ok {
			continue // no occurrence matches the filter
		}
		h := r.hit
		h.Occurrence = o
		h.Score = -c.bm25
		hits = append(hits, h)
	}
	return hits, nil
}
