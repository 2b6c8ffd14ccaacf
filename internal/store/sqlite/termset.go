package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/lexical"
	"github.com/engramhq/engram/internal/terms"
)

// A file of more than one chunk keeps the set of its index terms (see
// terms.Set) in entry_terms, so that a search can tell which of a query's
// words the file holds anywhere without reading and tokenizing it
// (EntryCoverage).

// EntryCoverage returns the share of the query that each of the entries
// holds anywhere in its content, each query word weighted by its inverse
// document frequency as in Hit.Coverage, which measures one chunk. Entries
// that are not stored are left out. An entry's chunks hold its words as
// separate chunks: a compound identifier counts as held where its parts
// are, wherever they are.
func (s *Store) EntryCoverage(ctx context.Context, text string, ids []string) (map[string]float64, error) {
	groups := terms.Query(text)
	if len(groups) == 0 || len(ids) == 0 {
		return nil, nil
	}
	tables := []string{ftsTable(ftsMain)}
	p, err := s.planQuery(ctx, groups, tables)
	if err != nil {
		return nil, fmt.Errorf("coverage of %q: %w", text, err)
	}
	total, _, err := s.ftsState(ctx)
	if err != nil {
		return nil, fmt.Errorf("coverage of %q: %w", text, err)
	}
	cov := lexical.NewEntryCoverage(groups)
	const batch = 500 // stay far below SQLite's limit on bound parameters
	for start := 0; start < len(ids); start += batch {
		part := ids[start:min(start+batch, len(ids))]
		err := s.query(ctx, `SELECT e.id, t.terms, CASE WHEN t.terms IS NULL THEN e.content END
			FROM entries e LEFT JOIN entry_terms t ON t.entry = e.pk WHERE e.id IN (`+placeholders(len(part))+`)`, anySlice(part),
			func(rows *sql.Rows) error {
				var (
					id      string
					set     []byte
					content []byte
				)
				if err := rows.Scan(&id, &set, &content); err != nil {
					return err
				}
				cov.Add(id, set, content)
				return nil
			})
		if err != nil {
			return nil, fmt.Errorf("coverage of %q: %w", text, err)
		}
	}
	return cov.Shares(p.lexical(), total, int64(s.opts.Search.MaxPostings)+1), nil
}

// buildEntryTerms writes the term set of every stored file of more than
// one chunk (migration 10; a change to the way terms are made needs it run
// again after rebuildTerms).
func buildEntryTerms(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM entry_terms`); err != nil {
		return err
	}
	type span struct{ start, end int }
	var (
		pks    []int64
		chunks = map[int64][]span{}
	)
	rows, err := tx.QueryContext(ctx, `SELECT entry, start_byte, end_byte FROM chunks
		WHERE entry IN (SELECT entry FROM chunks GROUP BY entry HAVING count(*) > 1)
		AND entry IN (SELECT entry FROM occurrences WHERE type = ?) ORDER BY entry, ordinal`, store.CodeFile)
	if err != nil {
		return err
	}
	for rows.Next() {
		var (
			pk int64
			c  span
		)
		if err := rows.Scan(&pk, &c.start, &c.end); err != nil {
			return errors.Join(err, rows.Close())
		}
		if len(chunks[pk]) == 0 {
			pks = append(pks, pk)
		}
		chunks[pk] = append(chunks[pk], c)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	read, err := tx.PrepareContext(ctx, `SELECT content FROM entries WHERE pk = ?`)
	if err != nil {
		return err
	}
	defer read.Close()
	insert, err := tx.PrepareContext(ctx, `INSERT INTO entry_terms(entry, terms) VALUES (?, ?)`)
	if err != nil {
		return err
	}
	defer insert.Close()
	for _, pk := range pks {
		var content []byte
		if err := read.QueryRowContext(ctx, pk).Scan(&content); err != nil {
			return err
		}
		bodies := make([]string, 0, len(chunks[pk]))
		for _, c := range chunks[pk] {
			bodies = append(bodies, terms.String(string(content[c.start:c.end])))
		}
		if _, err := insert.ExecContext(ctx, pk, terms.Set(bodies)); err != nil {
			return err
		}
	}
	return nil
}
