package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"golang.org/x/text/unicode/norm"
)

// The full-text index. PostgreSQL's own full-text search ranks with
// ts_rank, which is not BM25, and its parser is not engram's; so engram
// keeps its own postings: one row per term and document, with the term's
// frequency in each of a document's three fields and its positions (for
// the phrase of a compound identifier's parts), and each document's
// length. Search (search.go) computes BM25 from them exactly as FTS5
// does on the SQLite backend, with the same field weights and the same
// planning of common words. Terms are made by internal/terms on both
// backends.
//
// A document lives in a space: the chunks searched by default, the
// chunks of old file versions (searched with history), the archivalist's
// records.
const (
	spaceMain    int16 = 1
	spaceHistory int16 = 2
	spaceArchive int16 = 3
)

const schemaFTS = `
-- fts_docs holds each indexed document's length in terms, all fields
-- together (as FTS5 counts it for BM25).
CREATE TABLE fts_docs (
	space smallint NOT NULL,
	doc   bigint NOT NULL,
	len   integer NOT NULL,
	PRIMARY KEY (space, doc)
);

-- fts_postings: tf in body, meta and ctx, and positions (meta's offset by
-- 1<<20, ctx's by 2<<20, so that a phrase never spans two fields).
CREATE TABLE fts_postings (
	term  text COLLATE "C" NOT NULL,
	space smallint NOT NULL,
	doc   bigint NOT NULL,
	body  integer NOT NULL,
	meta  integer NOT NULL,
	ctx   integer NOT NULL,
	pos   integer[] NOT NULL,
	PRIMARY KEY (term, space, doc)
);
CREATE INDEX fts_postings_doc ON fts_postings (doc, space);

-- fts_stats: documents and their summed lengths per space, for BM25's
-- collection size and average length, and gen, bumped by every change to
-- the space: the document frequencies a server caches for planning are
-- good only while gen stays as it was when they were counted, whichever
-- server wrote since. A hot row: writers update it last, before counters.
CREATE TABLE fts_stats (
	space smallint PRIMARY KEY,
	docs  bigint NOT NULL,
	len   bigint NOT NULL,
	gen   bigint NOT NULL
);
INSERT INTO fts_stats (space, docs, len, gen) VALUES (1, 0, 0, 0), (2, 0, 0, 0), (3, 0, 0, 0);
`

// ftsDoc is one document to index: a chunk (its ID) or an archive record
// (its seq), with the terms of its fields as terms.Append makes them.
type ftsDoc struct {
	ID              int64
	Body, Meta, Ctx string
}

// Field offsets of positions: a phrase never spans two fields.
const (
	fieldShift = 20
	fieldMask  = 1<<fieldShift - 1
)

// posting is one term of one document.
type posting struct {
	tf  [3]int32
	pos []int32
}

// indexDocs adds documents to a space of the index, in tx. The postings go
// in by COPY (the ingest path); the space's statistics are updated last,
// since other writers wait on that row until tx commits.
func indexDocs(ctx context.Context, tx pgx.Tx, space int16, docs []ftsDoc) error {
	if len(docs) == 0 {
		return nil
	}
	type row struct {
		term string
		doc  int64
		p    *posting
	}
	var rows []row
	docRows := make([][]any, 0, len(docs))
	var total int64
	for _, d := range docs {
		ps := map[string]*posting{}
		n := 0
		for f, text := range [3]string{d.Body, d.Meta, d.Ctx} {
			i := 0
			eachToken(text, func(tok string) {
				p := ps[tok]
				if p == nil {
					p = &posting{}
					ps[tok] = p
					rows = append(rows, row{tok, d.ID, p})
				}
				p.tf[f]++
				p.pos = append(p.pos, int32(f<<fieldShift|min(i, fieldMask)))
				i++
			})
			n += i
		}
		docRows = append(docRows, []any{space, d.ID, int32(n)})
		total += int64(n)
	}
	// In index order, so that the index is written page by page.
	slices.SortFunc(rows, func(a, b row) int {
		if c := strings.Compare(a.term, b.term); c != 0 {
			return c
		}
		return int(a.doc - b.doc)
	})
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"fts_docs"}, []string{"space", "doc", "len"}, pgx.CopyFromRows(docRows)); err != nil {
		return fmt.Errorf("index: %w", err)
	}
	i := 0
	_, err := tx.CopyFrom(ctx, pgx.Identifier{"fts_postings"}, []string{"term", "space", "doc", "body", "meta", "ctx", "pos"},
		pgx.CopyFromFunc(func() ([]any, error) {
			if i == len(rows) {
				return nil, nil
			}
			r := rows[i]
			i++
			return []any{r.term, space, r.doc, r.p.tf[0], r.p.tf[1], r.p.tf[2], r.p.pos}, nil
		}))
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	return bumpStats(ctx, tx, space, int64(len(docs)), total)
}

// bumpStats adds to a space's documents and length and moves its
// generation on.
func bumpStats(ctx context.Context, tx pgx.Tx, space int16, docs, length int64) error {
	_, err := tx.Exec(ctx, `UPDATE fts_stats SET docs = docs + $2, len = len + $3, gen = gen + 1 WHERE space = $1`,
		space, docs, length)
	if err != nil {
		return fmt.Errorf("index statistics: %w", err)
	}
	return nil
}

// unindexDocs removes documents from a space of the index, in tx.
func unindexDocs(ctx context.Context, tx pgx.Tx, space int16, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	var n, length int64
	err := tx.QueryRow(ctx, `WITH d AS (DELETE FROM fts_docs WHERE space = $1 AND doc = ANY($2) RETURNING len)
		SELECT count(*), coalesce(sum(len), 0) FROM d`, space, ids).Scan(&n, &length)
	if err != nil {
		return fmt.Errorf("unindex: %w", err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM fts_postings WHERE doc = ANY($2) AND space = $1`, space, ids); err != nil {
		return fmt.Errorf("unindex: %w", err)
	}
	return bumpStats(ctx, tx, space, -n, -length)
}

// moveDocs moves documents from one space to another, in tx (a file
// version replaced goes from main to history; one current again comes
// back).
func moveDocs(ctx context.Context, tx pgx.Tx, from, to int16, ids []int64) error {
	if len(ids) == 0 || from == to {
		return nil
	}
	var n, length int64
	err := tx.QueryRow(ctx, `WITH d AS (UPDATE fts_docs SET space = $2 WHERE space = $1 AND doc = ANY($3) RETURNING len)
		SELECT count(*), coalesce(sum(len), 0) FROM d`, from, to, ids).Scan(&n, &length)
	if err != nil {
		return fmt.Errorf("move in the index: %w", err)
	}
	if n == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `UPDATE fts_postings SET space = $2 WHERE doc = ANY($3) AND space = $1`, from, to, ids); err != nil {
		return fmt.Errorf("move in the index: %w", err)
	}
	// Both rows, in space order: two moves the other way cannot deadlock.
	for _, sp := range []int16{min(from, to), max(from, to)} {
		d, l := n, length
		if sp == from {
			d, l = -n, -length
		}
		if err := bumpStats(ctx, tx, sp, d, l); err != nil {
			return err
		}
	}
	return nil
}

// eachToken calls fn with each token of a field's terms as FTS5's
// unicode61 tokenizer (remove_diacritics 2) makes them on the SQLite
// backend, which indexes the same terms: terms.Append's words are
// separated by spaces and lower-case already, so an ASCII word is one
// token as it is. Other words are folded: Latin letters lose their
// diacritics, combining diacritics are dropped, and any other character
// that is not a letter, a number or private-use (a spacing mark, say)
// separates tokens, as unicode61 does. TestSearchParity holds this to
// SQLite's own tokenizer on Latin, Greek, Turkish and Devanagari text.
func eachToken(text string, fn func(tok string)) {
	for len(text) > 0 {
		word, rest, _ := strings.Cut(text, " ")
		text = rest
		if word == "" {
			continue
		}
		if ascii(word) {
			fn(word)
			continue
		}
		foldWord(word, fn)
	}
}

func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// foldWord folds a word that is not all ASCII into its tokens.
func foldWord(word string, fn func(tok string)) {
	var b strings.Builder
	flush := func() {
		if b.Len() > 0 {
			fn(b.String())
			b.Reset()
		}
	}
	for _, r := range word {
		switch {
		case unicode.Is(unicode.Mn, r) && (0x300 <= r && r < 0x370 || 0x1dc0 <= r && r < 0x1e00):
			// a combining diacritic: part of the token, removed
		case unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.Co, r):
			b.WriteRune(foldRune(r))
		default:
			flush()
		}
	}
	flush()
}

// foldRune lower-cases a letter and takes away its diacritics, if it is
// a Latin letter.
func foldRune(r rune) rune {
	r = unicode.ToLower(r)
	if r < 0xc0 {
		return r
	}
	d := norm.NFD.String(string(r))
	base, n := utf8.DecodeRuneInString(d)
	for _, m := range d[n:] {
		if !unicode.Is(unicode.Mn, m) {
			return r // not a letter with diacritics
		}
	}
	// unicode61 takes diacritics off Latin letters only: ά stays ά.
	if n < len(d) && unicode.Is(unicode.Latin, base) {
		return base
	}
	return r
}

// tokens returns eachToken's tokens of text.
func tokens(text string) []string {
	var out []string
	eachToken(text, func(tok string) { out = append(out, tok) })
	return out
}
