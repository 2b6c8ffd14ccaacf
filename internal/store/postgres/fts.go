package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
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
-- collection size and average length.
CREATE TABLE fts_stats (
	space smallint PRIMARY KEY,
	docs  bigint NOT NULL,
	len   bigint NOT NULL
);
INSERT INTO fts_stats (space, docs, len) VALUES (1, 0, 0), (2, 0, 0), (3, 0, 0);
`

// ftsDoc is one document to index: a chunk (its ID) or an archive record
// (its seq), with the terms of its fields as terms.Append makes them.
type ftsDoc struct {
	ID              int64
	Body, Meta, Ctx string
}

// indexDocs adds documents to a space of the index, in tx.
// TODO(search): not written yet; see issue 27.
func indexDocs(ctx context.Context, tx pgx.Tx, space int16, docs []ftsDoc) error { return nil }

// unindexDocs removes documents from a space of the index, in tx.
func unindexDocs(ctx context.Context, tx pgx.Tx, space int16, ids []int64) error { return nil }

// moveDocs moves documents from one space to another, in tx (a file
// version replaced goes from main to history; one current again comes
// back).
func moveDocs(ctx context.Context, tx pgx.Tx, from, to int16, ids []int64) error { return nil }
