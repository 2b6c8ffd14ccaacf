package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/terms"
)

// The full-text table that holds an entry's chunks, by entries.fts.
const (
	ftsMain    = 1 // chunks_fts: searched by default
	ftsHistory = 2 // history_fts: versions no longer current, searched on request
)

func ftsTable(state int) string {
	if state == ftsHistory {
		return "history_fts"
	}
	return "chunks_fts"
}

// PutFiles implements store.Store.
func (s *Store) PutFiles(ctx context.Context, changes []store.FileChange) error {
	if len(changes) == 0 {
		return nil
	}
	var errs []error
	var entries []store.Entry
	entryOf := make([]int, len(changes)) // index into entries of a version's content
	for i := range changes {
		c := &changes[i]
		if err := c.Validate(); err != nil {
			errs = append(errs, &store.ItemError{Index: i, Err: err})
			continue
		}
		entryOf[i] = -1
		if c.Kind == store.ChangeVersion {
			entryOf[i] = len(entries)
			entries = append(entries, *c.Entry)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("put files: %w", errors.Join(errs...))
	}
	ps, err := s.prepare(ctx, entries)
	if err != nil {
		return fmt.Errorf("put files: %w", err)
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		b := newBatch(ctx, tx)
		defer b.close()
		for i := range changes {
			var p *pending
			if entryOf[i] >= 0 {
				p = &ps[entryOf[i]]
			}
			if err := b.putFile(&changes[i], p); err != nil {
				return &store.ItemError{Index: i, Err: err}
			}
		}
		return b.finish()
	})
	if err != nil {
		return fmt.Errorf("put files: %w", err)
	}
	return nil
}

// fileRow is what putFile reads of a path's manifest record.
type fileRow struct {
	exists  bool
	state   store.FileState
	entry   sql.NullInt64
	entryID string
	version int
}

func (b *batch) fileRow(path string) (fileRow, error) {
	var r fileRow
	var state string
	var id sql.NullString
	err := b.row("fileRow", path).Scan(&state, &r.entry, &id, &r.version)
	if errors.Is(err, sql.ErrNoRows) {
		return r, nil
	}
	r.exists, r.state, r.entryID = err == nil, store.FileState(state), id.String
	return r, err
}

func (b *batch) putFile(c *store.FileChange, p *pending) error {
	old, err := b.fileRow(c.Path)
	if err != nil {
		return err
	}
	now := unixNano(b.now)
	// leaves notes that the current version leaves the path.
	leaves := func() {
		if old.state == store.FileCurrent && old.entry.Valid {
			b.refreshLater(old.entry.Int64)
		}
	}
	switch c.Kind {
	case store.ChangeVersion:
		if old.state == store.FileCurrent && old.entryID == c.Entry.ID {
			// Same content as the current version: only the manifest moves.
			_, err := b.exec("fileSame", c.Size, unixNano(c.ModTime), c.Hash, c.Language, c.Reason, now, c.Path)
			return err
		}
		leaves()
		res, err := b.put(p)
		if err != nil {
			return err
		}
		pk := b.pks[res.ID]
		if !res.NewContent || b.versioned[pk] {
			// Content also stored or current elsewhere: its meta (paths)
			// and table must be worked out again.
			b.refreshLater(pk)
		}
		b.versioned[pk] = true
		version := old.version + 1
		if _, err := b.exec("fileVersion", c.Path, c.Reason, pk, c.Size, unixNano(c.ModTime), c.Hash, c.Language, version, now); err != nil {
			return err
		}
		_, err = b.exec("fileHistory", c.Path, version, pk, c.Size, unixNano(c.ModTime), now)
		return err
	case store.ChangeTouch:
		if old.state != store.FileCurrent {
			return &store.ValidationError{Field: "path", Msg: fmt.Sprintf("%s is not a current file: nothing to touch", c.Path)}
		}
		_, err := b.exec("fileTouch", c.Size, unixNano(c.ModTime), c.Hash, now, c.Path)
		return err
	case store.ChangeSkip:
		leaves()
		_, err := b.exec("fileSkip", c.Path, c.Reason, c.Size, unixNano(c.ModTime), c.Hash, c.Language, old.version, now)
		return err
	case store.ChangeDelete:
		if !old.exists {
			return fmt.Errorf("file %s: %w", c.Path, store.ErrNotFound)
		}
		leaves()
		_, err := b.exec("fileDelete", c.Reason, now, c.Path)
		return err
	}
	return fmt.Errorf("unknown change kind %q", c.Kind)
}

// refreshLater marks an entry whose full-text rows must be worked out
// again when the batch finishes.
func (b *batch) refreshLater(pk int64) { b.refresh[pk] = true }

// refreshEntry puts an entry's chunks in the full-text table they belong
// in, with their meta column up to date. An entry belongs in the main table
// while it is the current version of a file or was seen in a session, and
// in the history table otherwise; its meta holds its current paths (or, for
// content that is no file's now, the files of its first occurrence), its
// keywords and entities, and each chunk's symbols.
func (b *batch) refreshEntry(pk int64) error { return b.indexEntry(pk, false) }

// indexEntry writes an entry's full-text rows as refreshEntry describes;
// with fresh, its rows are known to be absent (the tables were emptied) and
// are not deleted first.
func (b *batch) indexEntry(pk int64, fresh bool) error {
	var (
		content                   []byte
		fts                       int
		files, keywords, entities sql.NullString
		inSession                 bool
	)
	err := b.tx.QueryRowContext(b.ctx, `SELECT e.content, e.fts, o.files, o.keywords, o.entities,
			EXISTS (SELECT 1 FROM occurrences s WHERE s.entry = e.pk AND s.session_id != '')
		FROM entries e JOIN occurrences o ON o.seq = (SELECT min(seq) FROM occurrences WHERE entry = e.pk)
		WHERE e.pk = ?`, pk).Scan(&content, &fts, &files, &keywords, &entities, &inSession)
	if err != nil {
		return fmt.Errorf("refresh entry %d: %w", pk, err)
	}
	var paths []string
	rows, err := b.tx.QueryContext(b.ctx, `SELECT path FROM files WHERE entry = ? AND state = 'current' ORDER BY path`, pk)
	if err != nil {
		return err
	}
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return errors.Join(err, rows.Close())
		}
		paths = append(paths, p)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	target := ftsHistory
	if len(paths) > 0 || inSession {
		target = ftsMain
	}
	words := paths
	if len(words) == 0 {
		if words, err = decodeList(files); err != nil {
			return err
		}
	}
	for _, list := range []sql.NullString{keywords, entities} {
		more, err := decodeList(list)
		if err != nil {
			return err
		}
		words = append(words, more...)
	}
	entryMeta := terms.String(strings.Join(words, " "))

	var ctxTerms string
	var ctxText sql.NullString
	if err := b.tx.QueryRowContext(b.ctx, `SELECT text FROM contexts WHERE entry = ?`, pk).Scan(&ctxText); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if ctxText.Valid {
		ctxTerms = terms.String(ctxText.String)
	}

	type chunkRow struct {
		id, ordinal int64
		start, end  int
		symbols     sql.NullString
	}
	var chunks []chunkRow
	rows, err = b.tx.QueryContext(b.ctx, `SELECT id, ordinal, start_byte, end_byte, symbols FROM chunks WHERE entry = ? ORDER BY ordinal`, pk)
	if err != nil {
		return err
	}
	for rows.Next() {
		var c chunkRow
		if err := rows.Scan(&c.id, &c.ordinal, &c.start, &c.end, &c.symbols); err != nil {
			return errors.Join(err, rows.Close())
		}
		chunks = append(chunks, c)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	for _, c := range chunks {
		if !fresh {
			if _, err := b.tx.ExecContext(b.ctx, `DELETE FROM `+ftsTable(fts)+` WHERE rowid = ?`, c.id); err != nil {
				return err
			}
		}
		meta := entryMeta
		if syms, err := decodeList(c.symbols); err != nil {
			return err
		} else if len(syms) > 0 {
			meta = strings.TrimSpace(meta + " " + terms.String(strings.Join(syms, " ")))
		}
		body := terms.String(string(content[c.start:c.end]))
		ctx := ""
		if c.ordinal == 0 {
			ctx = ctxTerms
		}
		if _, err := b.tx.ExecContext(b.ctx, `INSERT INTO `+ftsTable(target)+`(rowid, body, meta, ctx) VALUES (?, ?, ?, ?)`, c.id, body, meta, ctx); err != nil {
			return err
		}
	}
	if target != fts {
		if _, err := b.tx.ExecContext(b.ctx, `UPDATE entries SET fts = ? WHERE pk = ?`, target, pk); err != nil {
			return err
		}
	}
	return nil
}

const fileColumns = `f.path, f.state, f.reason, coalesce(e.id, ''), f.size, f.mtime, f.hash, f.language, f.version, f.indexed_at,
	coalesce(e.token_count, 0), (SELECT count(*) FROM chunks c WHERE c.entry = f.entry)`

func scanFile(sc scanner) (store.File, error) {
	var (
		f            store.File
		state        string
		mtime, index int64
	)
	err := sc.Scan(&f.Path, &state, &f.Reason, &f.EntryID, &f.Size, &mtime, &f.Hash, &f.Language, &f.Version, &index, &f.TokenCount, &f.Chunks)
	f.State, f.ModTime, f.IndexedAt = store.FileState(state), fromUnixNano(mtime), fromUnixNano(index)
	return f, err
}

// briefColumns are fileColumns without the entry's details.
const briefColumns = `f.path, f.state, f.reason, '', f.size, f.mtime, f.hash, f.language, f.version, f.indexed_at, 0, 0`

// Files implements store.Store.
func (s *Store) Files(ctx context.Context, filter store.FileFilter) ([]store.File, error) {
	q := `SELECT ` + fileColumns + ` FROM files f LEFT JOIN entries e ON e.pk = f.entry WHERE f.path >= ? AND f.path < ?`
	if filter.Brief {
		q = `SELECT ` + briefColumns + ` FROM files f WHERE f.path >= ? AND f.path < ?`
	}
	// Paths are UTF-8, so no path starting with the prefix sorts after
	// the prefix followed by the byte 0xFF.
	args := []any{filter.Prefix, filter.Prefix + "\xff"}
	if len(filter.States) > 0 {
		q += ` AND f.state IN (` + placeholders(len(filter.States)) + `)`
		args = append(args, anySlice(filter.States)...)
	}
	q += ` ORDER BY f.path`
	var out []store.File
	err := s.query(ctx, q, args, func(rows *sql.Rows) error {
		f, err := scanFile(rows)
		out = append(out, f)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list files: %w", err)
	}
	return out, nil
}

// File implements store.Store.
func (s *Store) File(ctx context.Context, path string) (store.File, error) {
	var out []store.File
	err := s.query(ctx, `SELECT `+fileColumns+` FROM files f LEFT JOIN entries e ON e.pk = f.entry WHERE f.path = ?`,
		[]any{path}, func(rows *sql.Rows) error {
			f, err := scanFile(rows)
			out = append(out, f)
			return err
		})
	if err != nil {
		return store.File{}, fmt.Errorf("get file %s: %w", path, err)
	}
	if len(out) == 0 {
		return store.File{}, fmt.Errorf("file %s: %w", path, store.ErrNotFound)
	}
	return out[0], nil
}

// FileVersions implements store.Store.
func (s *Store) FileVersions(ctx context.Context, path string) ([]store.FileVersion, error) {
	var out []store.FileVersion
	err := s.query(ctx, `SELECT v.path, v.version, e.id, v.size, v.mtime, v.indexed_at FROM file_versions v
		JOIN entries e ON e.pk = v.entry WHERE v.path = ? ORDER BY v.version`, []any{path}, func(rows *sql.Rows) error {
		var v store.FileVersion
		var mtime, indexed int64
		if err := rows.Scan(&v.Path, &v.Version, &v.EntryID, &v.Size, &mtime, &indexed); err != nil {
			return err
		}
		v.ModTime, v.IndexedAt = fromUnixNano(mtime), fromUnixNano(indexed)
		out = append(out, v)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("versions of %s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("file %s: %w", path, store.ErrNotFound)
	}
	return out, nil
}

// Setting implements store.Store.
func (s *Store) Setting(ctx context.Context, key string) (string, error) {
	var v string
	err := s.read(ctx, func(db *sql.DB) error {
		return db.QueryRowContext(ctx, `SELECT value FROM settings WHERE key = ?`, key).Scan(&v)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("setting %s: %w", key, store.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("get setting %s: %w", key, err)
	}
	return v, nil
}

// PutSetting implements store.Store.
func (s *Store) PutSetting(ctx context.Context, key, value string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO settings(key, value) VALUES (?, ?)
			ON CONFLICT(key) DO UPDATE SET value = excluded.value`, key, value)
		return err
	})
	if err != nil {
		return fmt.Errorf("put setting %s: %w", key, err)
	}
	return nil
}
