package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// IntegrityCheck verifies what PostgreSQL itself does not: that the
// totals engram keeps agree with the rows they count, that every chunk
// lies within its entry's content, and that the full-text index holds
// every chunk in its place and nothing else. (PostgreSQL checks its own pages
// and constraints; amcheck, where installed, checks its indexes.) It
// reads one snapshot of the store and names every problem it finds.
func (s *Store) IntegrityCheck(ctx context.Context) error {
	var problems []string
	err := s.read(ctx, func(tx pgx.Tx) error {
		problems = problems[:0]
		for _, c := range []struct{ name, count string }{
			{"entries", `SELECT count(*) FROM entries`},
			{"content_bytes", `SELECT coalesce(sum(size), 0) FROM entries`},
			{"tokens", `SELECT coalesce(sum(token_count), 0) FROM entries`},
			{"chunks", `SELECT count(*) FROM chunks`},
			{"occurrences", `SELECT count(*) FROM occurrences`},
		} {
			var kept, counted int64
			if err := tx.QueryRow(ctx, `SELECT value FROM counters WHERE name = $1`, c.name).Scan(&kept); err != nil {
				return fmt.Errorf("counter %s: %w", c.name, err)
			}
			if err := tx.QueryRow(ctx, c.count).Scan(&counted); err != nil {
				return fmt.Errorf("count %s: %w", c.name, err)
			}
			if kept != counted {
				problems = append(problems, fmt.Sprintf("counter %s is %d, the store holds %d", c.name, kept, counted))
			}
		}
		var bad int64
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM chunks c JOIN entries e ON e.pk = c.entry
			WHERE c.start_byte < 0 OR c.end_byte < c.start_byte OR c.end_byte > length(e.content)`).Scan(&bad); err != nil {
			return fmt.Errorf("chunk ranges: %w", err)
		}
		if bad > 0 {
			problems = append(problems, fmt.Sprintf("%d chunks lie outside their entry's content", bad))
		}
		// The full-text index: every chunk is a document of its entry's
		// space, nothing else is, and the statistics add up.
		for _, c := range []struct{ what, count string }{
			{"chunks missing from the full-text index", `SELECT count(*) FROM chunks c JOIN entries e ON e.pk = c.entry
				WHERE NOT EXISTS (SELECT 1 FROM fts_docs d WHERE d.space = e.fts AND d.doc = c.id)`},
			{"full-text documents of no chunk", `SELECT count(*) FROM fts_docs d WHERE d.space IN (1, 2)
				AND NOT EXISTS (SELECT 1 FROM chunks c JOIN entries e ON e.pk = c.entry WHERE c.id = d.doc AND e.fts = d.space)`},
			{"full-text documents of no archive record", `SELECT count(*) FROM fts_docs d WHERE d.space = 3
				AND NOT EXISTS (SELECT 1 FROM arch_records r WHERE r.seq = d.doc)`},
			{"full-text spaces whose statistics do not add up", `SELECT count(*) FROM fts_stats s
				LEFT JOIN (SELECT space, count(*) AS docs, sum(len) AS len FROM fts_docs GROUP BY space) d ON d.space = s.space
				WHERE s.docs <> coalesce(d.docs, 0) OR s.len <> coalesce(d.len, 0)`},
		} {
			if err := tx.QueryRow(ctx, c.count).Scan(&bad); err != nil {
				return fmt.Errorf("%s: %w", c.what, err)
			}
			if bad > 0 {
				problems = append(problems, fmt.Sprintf("%d %s", bad, c.what))
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("integrity check: %w", err)
	}
	if len(problems) > 0 {
		return errors.New("integrity check: " + strings.Join(problems, "; "))
	}
	return nil
}
