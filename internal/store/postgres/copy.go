package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/storecopy"
	"github.com/engramhq/engram/internal/terms"
)

// The PostgreSQL side of engram store copy (package storecopy): tables
// read in one REPEATABLE READ transaction, and loaded into an empty store
// in one transaction, by COPY, ending with the full-text index built from
// the rows and the sequences moved past the copied IDs.

// Describe names the store for messages: its URL, which holds no
// password.
func (s *Store) Describe() string { return redact(s.url) }

// ReadTables implements storecopy.Source.
func (s *Store) ReadTables(ctx context.Context, fn func(read func(t storecopy.Table, row func(values []any) error) error) error) error {
	return s.read(ctx, func(tx pgx.Tx) error {
		return fn(func(t storecopy.Table, row func(values []any) error) error {
			return readTable(ctx, tx, t, 0, row)
		})
	})
}

// readTable calls row for every row of a table, or its first limit
// rows when limit > 0, its values as the SQLite
// side reads them.
func readTable(ctx context.Context, tx pgx.Tx, t storecopy.Table, limit int, row func(values []any) error) error {
	q := `SELECT ` + strings.Join(t.Columns, ", ") + ` FROM ` + t.Name
	if limit > 0 {
		q += ` LIMIT ` + strconv.Itoa(limit)
	}
	rows, err := tx.Query(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		values, err := rows.Values()
		if err != nil {
			return err
		}
		for i, v := range values {
			switch v := v.(type) {
			case int32:
				values[i] = int64(v)
			case int16:
				values[i] = int64(v)
			}
		}
		if err := row(values); err != nil {
			return err
		}
	}
	return rows.Err()
}

// serials are the columns whose values a sequence hands out, which a
// load sets past the copied values.
var serials = [][2]string{
	{"entries", "pk"}, {"occurrences", "seq"}, {"chunks", "id"}, {"vector_models", "id"},
	{"arch_records", "seq"}, {"arch_events", "seq"}, {"audit", "seq"},
}

// Load implements storecopy.Target. Its transaction is not retried: its
// rows are read once, from the source. It takes the archive's lock, so
// that no server writes records in between; a server's other writes are
// seen by check, which then fails the copy.
func (s *Store) Load(ctx context.Context, fill, check func(storecopy.Loader) error) error {
	return s.runTx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, archiveLock); err != nil {
			return err
		}
		l := &loader{ctx: ctx, tx: tx}
		if err := fill(l); err != nil {
			return err
		}
		// Counters the migrations seed that the source had at zero.
		if _, err := tx.Exec(ctx, `INSERT INTO counters (name, value) VALUES
			('chunks', 0), ('content_bytes', 0), ('entries', 0), ('occurrences', 0), ('purges', 0), ('tokens', 0)
			ON CONFLICT (name) DO NOTHING`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO arch_versions (scope, version) VALUES ('', 0) ON CONFLICT (scope) DO NOTHING`); err != nil {
			return err
		}
		if err := reindex(ctx, tx); err != nil {
			return fmt.Errorf("build the full-text index: %w", err)
		}
		if err := check(l); err != nil {
			return err
		}
		// Last: a sequence's setval is not undone by a rollback.
		for _, sc := range serials {
			if _, err := tx.Exec(ctx, fmt.Sprintf(`SELECT setval(pg_get_serial_sequence('%s', '%s'), coalesce(max(%s), 0) + 1, false) FROM %s`,
				sc[0], sc[1], sc[1], sc[0])); err != nil {
				return fmt.Errorf("sequence of %s.%s: %w", sc[0], sc[1], err)
			}
		}
		return nil
	})
}

// loader is a load's storecopy.Loader.
type loader struct {
	ctx context.Context
	tx  pgx.Tx
}

func (l *loader) Read(t storecopy.Table, limit int, row func(values []any) error) error {
	return readTable(l.ctx, l.tx, t, limit, row)
}

func (l *loader) Write(t storecopy.Table, next func() ([]any, bool, error)) error {
	ctx, tx := l.ctx, l.tx
	switch t.Name { // the rows the migrations seeded give way to the copy's
	case "counters", "arch_versions":
		if _, err := tx.Exec(ctx, `DELETE FROM `+t.Name); err != nil {
			return err
		}
	}
	types, err := columnTypes(ctx, tx, t)
	if err != nil {
		return err
	}
	src := &rowSource{next: next, types: types}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{t.Name}, t.Columns, src); err != nil {
		return err
	}
	return src.err
}

// columnTypes returns the PostgreSQL type of each of a table's columns.
func columnTypes(ctx context.Context, tx pgx.Tx, t storecopy.Table) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT column_name, data_type FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = $1`, t.Name)
	if err != nil {
		return nil, err
	}
	byName := map[string]string{}
	var name, typ string
	if _, err := pgx.ForEachRow(rows, []any{&name, &typ}, func() error { byName[name] = typ; return nil }); err != nil {
		return nil, err
	}
	types := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		if types[i] = byName[c]; types[i] == "" {
			return nil, fmt.Errorf("table %s has no column %s", t.Name, c)
		}
	}
	return types, nil
}

// rowSource feeds COPY from a table's rows, each value made the Go type
// its column takes: SQLite's integers become booleans, its text bytea
// and its blobs text where the schemas differ in kind but not meaning.
type rowSource struct {
	next   func() ([]any, bool, error)
	types  []string
	values []any
	err    error
}

func (r *rowSource) Next() bool {
	values, ok, err := r.next()
	if err != nil {
		r.err = err
	}
	if !ok || err != nil {
		return false
	}
	for i, v := range values {
		switch r.types[i] {
		case "boolean":
			if n, ok := v.(int64); ok {
				values[i] = n != 0
			}
		case "bytea":
			if s, ok := v.(string); ok {
				values[i] = []byte(s)
			}
		case "text":
			if b, ok := v.([]byte); ok {
				v = string(b)
			}
			if str, ok := v.(string); ok {
				values[i] = storecopy.Text(str)
			}
		}
	}
	r.values = values
	return true
}

func (r *rowSource) Values() ([]any, error) { return r.values, nil }
func (r *rowSource) Err() error             { return r.err }

// reindex builds the full-text index from the rows: every entry's chunks
// in the space its fts column names, every global archive record's text,
// as PutEntries, PutFiles and ArchiveWrite index them.
func reindex(ctx context.Context, tx pgx.Tx) error {
	for _, t := range []string{"fts_postings", "fts_docs"} {
		if _, err := tx.Exec(ctx, `DELETE FROM `+t); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE fts_stats SET docs = 0, len = 0`); err != nil {
		return err
	}
	rows, err := tx.Query(ctx, `SELECT pk, fts FROM entries ORDER BY pk`)
	if err != nil {
		return err
	}
	type entry struct {
		pk    int64
		space int16
	}
	entries, err := collectRows(rows, func(row pgx.CollectableRow) (entry, error) {
		var e entry
		return e, row.Scan(&e.pk, &e.space)
	})
	if err != nil {
		return err
	}
	fb := newFileBatch(ctx, tx)
	const flushAt = 2000
	pending := map[int16][]ftsDoc{}
	flush := func() error {
		for _, space := range []int16{spaceMain, spaceHistory} {
			if docs := pending[space]; len(docs) > 0 {
				if err := indexDocs(ctx, tx, space, docs); err != nil {
					return err
				}
				pending[space] = nil
			}
		}
		return nil
	}
	n := 0
	for _, e := range entries {
		st, err := fb.entryState(e.pk)
		if err != nil {
			return err
		}
		docs, err := fb.entryDocs(e.pk, st.words)
		if err != nil {
			return err
		}
		pending[e.space] = append(pending[e.space], docs...)
		if n += len(docs); n >= flushAt {
			if err := flush(); err != nil {
				return err
			}
			n = 0
		}
	}
	if err := flush(); err != nil {
		return err
	}
	rows, err = tx.Query(ctx, `SELECT seq, kind, text FROM arch_records WHERE text <> '' ORDER BY seq`)
	if err != nil {
		return err
	}
	var docs []ftsDoc
	var (
		seq        int64
		kind, text string
	)
	_, err = pgx.ForEachRow(rows, []any{&seq, &kind, &text}, func() error {
		if store.RecordKind(kind).Global() { // as Append indexes them
			docs = append(docs, ftsDoc{ID: seq, Body: terms.String(text)})
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(docs) > 0 {
		if err := indexDocs(ctx, tx, spaceArchive, docs); err != nil {
			return err
		}
	}
	return addCounters(ctx, tx, map[string]int64{ftsGeneration: 1})
}
