package postgres

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/terms"
)

// Versions in and out of default search. An entry's chunks are searched
// by default (entries.fts = spaceMain) while the entry is the current
// version of some file or was seen in a session, and only with History
// (spaceHistory) otherwise: a version replaced, the last version of a
// deleted or skipped file. Their documents' meta field holds the entry's
// current paths, or, for content that is no file's now, the files of its
// first occurrence, then its keywords and entities, then each chunk's
// symbols (as the SQLite backend's refreshEntry).
//
// PutFiles marks the entries whose place or paths a change may alter
// (refreshLater), and works each out once at the end of its transaction
// (refreshEntry): moving its documents between the spaces (moveDocs)
// when its meta stays the same, or indexing them again when it changes
// (a rename, a second path with the same content).

// fileBatch is the state of one PutFiles transaction: the entries batch
// that stores the versions' content, and the entries to refresh.
type fileBatch struct {
	*batch
	ctx context.Context
	tx  pgx.Tx
	now time.Time
	// refresh holds the entries marked by refreshLater, each with the
	// meta words it had when marked, which its documents hold.
	refresh map[int64][]string
	// versioned holds the entries made a file's version in this batch;
	// fresh those whose content this batch stored.
	versioned, fresh map[int64]bool
}

func newFileBatch(ctx context.Context, tx pgx.Tx) *fileBatch {
	return &fileBatch{batch: newBatch(ctx, tx), ctx: ctx, tx: tx, now: time.Now().UTC(),
		refresh: map[int64][]string{}, versioned: map[int64]bool{}, fresh: map[int64]bool{}}
}

// fileRow is what putFile reads of a path's manifest record.
type fileRow struct {
	exists  bool // not the row lockFiles made for a new path
	state   store.FileState
	entry   *int64
	entryID string
	version int64
}

func (fb *fileBatch) fileRow(path string) (fileRow, error) {
	var r fileRow
	var state string
	var id *string
	err := fb.tx.QueryRow(fb.ctx, `SELECT f.state, f.entry, e.id, f.version FROM files f
		LEFT JOIN entries e ON e.pk = f.entry WHERE f.path = $1`, path).Scan(&state, &r.entry, &id, &r.version)
	if err != nil {
		return r, fmt.Errorf("file %s: %w", path, err) // locked by lockFiles: never missing
	}
	r.exists, r.state, r.entryID = state != "", store.FileState(state), deref(id)
	return r, nil
}

func (fb *fileBatch) putFile(c *store.FileChange, p *pending) error {
	old, err := fb.fileRow(c.Path)
	if err != nil {
		return err
	}
	now := unixNano(fb.now)
	// leaves notes that the current version leaves the path.
	leaves := func() error {
		if old.state == store.FileCurrent && old.entry != nil {
			return fb.refreshLater(*old.entry)
		}
		return nil
	}
	switch c.Kind {
	case store.ChangeVersion:
		if old.state == store.FileCurrent && old.entryID == c.Entry.ID {
			// Same content as the current version: only the manifest moves.
			_, err := fb.tx.Exec(fb.ctx, `UPDATE files SET size = $1, mtime = $2, hash = $3, language = $4, reason = $5,
				indexed_at = $6 WHERE path = $7`, c.Size, unixNano(c.ModTime), c.Hash, c.Language, c.Reason, now, c.Path)
			return err
		}
		if err := leaves(); err != nil {
			return err
		}
		res, err := fb.put(p)
		if err != nil {
			return err
		}
		pk, err := fb.entryPK(res.ID)
		if err != nil {
			return err
		}
		if res.NewContent {
			fb.fresh[pk] = true
		}
		if !res.NewContent || fb.versioned[pk] {
			// Content also stored or current elsewhere: its meta (paths)
			// and space must be worked out again.
			if err := fb.refreshLater(pk); err != nil {
				return err
			}
		}
		fb.versioned[pk] = true
		version := old.version + 1
		if _, err := fb.tx.Exec(fb.ctx, `UPDATE files SET state = 'current', reason = $1, entry = $2, size = $3, mtime = $4,
				hash = $5, language = $6, version = $7, indexed_at = $8 WHERE path = $9`,
			c.Reason, pk, c.Size, unixNano(c.ModTime), c.Hash, c.Language, version, now, c.Path); err != nil {
			return err
		}
		_, err = fb.tx.Exec(fb.ctx, `INSERT INTO file_versions (path, version, entry, size, mtime, indexed_at)
			VALUES ($1, $2, $3, $4, $5, $6)`, c.Path, version, pk, c.Size, unixNano(c.ModTime), now)
		return err
	case store.ChangeTouch:
		if old.state != store.FileCurrent {
			return &store.ValidationError{Field: "path", Msg: fmt.Sprintf("%s is not a current file: nothing to touch", c.Path)}
		}
		_, err := fb.tx.Exec(fb.ctx, `UPDATE files SET size = $1, mtime = $2, hash = $3, indexed_at = $4 WHERE path = $5`,
			c.Size, unixNano(c.ModTime), c.Hash, now, c.Path)
		return err
	case store.ChangeSkip:
		if err := leaves(); err != nil {
			return err
		}
		_, err := fb.tx.Exec(fb.ctx, `UPDATE files SET state = 'skipped', reason = $1, entry = NULL, size = $2, mtime = $3,
				hash = $4, language = $5, indexed_at = $6 WHERE path = $7`,
			c.Reason, c.Size, unixNano(c.ModTime), c.Hash, c.Language, now, c.Path)
		return err
	case store.ChangeDelete:
		if !old.exists {
			return fmt.Errorf("file %s: %w", c.Path, store.ErrNotFound)
		}
		if err := leaves(); err != nil {
			return err
		}
		_, err := fb.tx.Exec(fb.ctx, `UPDATE files SET state = 'deleted', reason = $1, indexed_at = $2 WHERE path = $3`,
			c.Reason, now, c.Path)
		return err
	}
	return fmt.Errorf("unknown change kind %q", c.Kind)
}

// refreshLater marks an entry whose place in the full-text index must be
// worked out again when the batch finishes. The first mark locks the
// entry's row until the transaction ends, so that two servers changing
// the files of one content refresh it one after the other, the second
// seeing what the first committed; and notes the meta words its
// documents hold now.
func (fb *fileBatch) refreshLater(pk int64) error {
	if _, ok := fb.refresh[pk]; ok {
		return nil
	}
	if _, err := fb.tx.Exec(fb.ctx, `SELECT 1 FROM entries WHERE pk = $1 FOR UPDATE`, pk); err != nil {
		return fmt.Errorf("lock entry %d: %w", pk, err)
	}
	st, err := fb.entryState(pk)
	if err != nil {
		return err
	}
	fb.refresh[pk] = st.words
	return nil
}

// finish refreshes the marked entries, in pk order, then finishes the
// entries batch (its counters last). The documents of the chunks the
// batch wrote are indexed first (flushDocs), for a refresh may index
// them again. (The index's own generations, per space, move on with
// every change to it: see fts.go.)
func (fb *fileBatch) finish(paths []string) error {
	if err := fb.flushDocs(); err != nil {
		return err
	}
	for _, pk := range slices.Sorted(maps.Keys(fb.refresh)) {
		if err := fb.refreshEntry(pk); err != nil {
			return err
		}
	}
	// The rows lockFiles made are all set by the changes that follow (a
	// version or a skip) or fail the batch (a touch, a delete); none is
	// left, but one would be invisible yet in the way, so make sure.
	if _, err := fb.tx.Exec(fb.ctx, `DELETE FROM files WHERE path = ANY($1) AND state = ''`, paths); err != nil {
		return err
	}
	return fb.batch.finish()
}

// entryState is where an entry's chunks belong and what their meta says.
type entryState struct {
	space int16 // where they are
	// target is where they belong; words are the meta's words before the
	// symbols: the current paths (or the first occurrence's files), then
	// the first occurrence's keywords and entities.
	target int16
	words  []string
}

func (fb *fileBatch) entryState(pk int64) (entryState, error) {
	var (
		st                        entryState
		paths                     []string
		files, keywords, entities *string
		inSession                 bool
	)
	err := fb.tx.QueryRow(fb.ctx, `SELECT e.fts,
			coalesce((SELECT array_agg(f.path ORDER BY f.path) FROM files f WHERE f.entry = e.pk AND f.state = 'current'), '{}'),
			o.files, o.keywords, o.entities,
			EXISTS (SELECT 1 FROM occurrences s WHERE s.entry = e.pk AND s.session_id <> '')
		FROM entries e JOIN occurrences o ON o.seq = (SELECT min(seq) FROM occurrences WHERE entry = e.pk)
		WHERE e.pk = $1`, pk).Scan(&st.space, &paths, &files, &keywords, &entities, &inSession)
	if err != nil {
		return st, fmt.Errorf("state of entry %d: %w", pk, err)
	}
	st.target = spaceHistory
	if len(paths) > 0 || inSession {
		st.target = spaceMain
	}
	st.words = paths
	if len(st.words) == 0 {
		if st.words, err = decodeList(files); err != nil {
			return st, err
		}
	}
	for _, list := range []*string{keywords, entities} {
		more, err := decodeList(list)
		if err != nil {
			return st, err
		}
		st.words = append(st.words, more...)
	}
	return st, nil
}

// refreshEntry puts an entry's documents in the space they belong in,
// with their meta up to date (see the top of this file). Content stored
// by this batch is indexed again whenever it was marked: its documents'
// meta is that of the occurrence that stored it, which need not be what
// entryState says when it was marked.
func (fb *fileBatch) refreshEntry(pk int64) error {
	st, err := fb.entryState(pk)
	if err != nil {
		return err
	}
	if !fb.fresh[pk] && slices.Equal(st.words, fb.refresh[pk]) {
		if st.target == st.space {
			return nil
		}
		ids, err := fb.chunkIDs(pk)
		if err != nil {
			return err
		}
		if err := moveDocs(fb.ctx, fb.tx, st.space, st.target, ids); err != nil {
			return fmt.Errorf("move entry %d: %w", pk, err)
		}
	} else {
		docs, err := fb.entryDocs(pk, st.words)
		if err != nil {
			return err
		}
		ids := make([]int64, len(docs))
		for i, d := range docs {
			ids[i] = d.ID
		}
		if err := unindexDocs(fb.ctx, fb.tx, st.space, ids); err != nil {
			return fmt.Errorf("unindex entry %d: %w", pk, err)
		}
		if err := indexDocs(fb.ctx, fb.tx, st.target, docs); err != nil {
			return fmt.Errorf("index entry %d: %w", pk, err)
		}
	}
	if st.target != st.space {
		if _, err := fb.tx.Exec(fb.ctx, `UPDATE entries SET fts = $1 WHERE pk = $2`, st.target, pk); err != nil {
			return err
		}
	}
	return nil
}

func (fb *fileBatch) chunkIDs(pk int64) ([]int64, error) {
	rows, err := fb.tx.Query(fb.ctx, `SELECT id FROM chunks WHERE entry = $1 ORDER BY id`, pk)
	if err != nil {
		return nil, err
	}
	return collectRows(rows, pgx.RowTo[int64])
}

// entryDocs makes the documents of an entry's chunks, words the meta's
// words before each chunk's symbols.
func (fb *fileBatch) entryDocs(pk int64, words []string) ([]ftsDoc, error) {
	var content []byte
	var ctxText *string
	err := fb.tx.QueryRow(fb.ctx, `SELECT e.content, (SELECT x.text FROM contexts x WHERE x.entry = e.pk)
		FROM entries e WHERE e.pk = $1`, pk).Scan(&content, &ctxText)
	if err != nil {
		return nil, fmt.Errorf("content of entry %d: %w", pk, err)
	}
	entryMeta := terms.String(strings.Join(words, " "))
	var ctxTerms string
	if ctxText != nil {
		ctxTerms = terms.String(*ctxText)
	}
	rows, err := fb.tx.Query(fb.ctx, `SELECT id, ordinal, start_byte, end_byte, symbols FROM chunks WHERE entry = $1 ORDER BY ordinal`, pk)
	if err != nil {
		return nil, err
	}
	var docs []ftsDoc
	var (
		id                  int64
		ordinal, start, end int32
		symbols             *string
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &ordinal, &start, &end, &symbols}, func() error {
		syms, err := decodeList(symbols)
		if err != nil {
			return err
		}
		d := ftsDoc{ID: id, Meta: entryMeta}
		if len(syms) > 0 {
			d.Meta = strings.TrimSpace(entryMeta + " " + terms.String(strings.Join(syms, " ")))
		}
		s, e := min(int(start), len(content)), min(int(end), len(content))
		d.Body = terms.String(string(content[s:max(s, e)]))
		if ordinal == 0 {
			d.Ctx = ctxTerms
		}
		docs = append(docs, d)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("chunks of entry %d: %w", pk, err)
	}
	return docs, nil
}
