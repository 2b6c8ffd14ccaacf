package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// IntegrityCheck verifies what PostgreSQL itself does not: that the
// totals engram keeps agree with the rows they count, and that every
// chunk lies within its entry's content. (PostgreSQL checks its own pages
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
