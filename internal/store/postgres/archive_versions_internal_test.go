package postgres

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// BenchmarkArchiveVersions: the versions read as ArchiveVersions reads
// them (one statement), against the same statement in a read-only
// transaction (BEGIN, the read, COMMIT), the baseline.
func BenchmarkArchiveVersions(b *testing.B) {
	s := openInternal(b)
	ctx := context.Background()
	b.Run("statement", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := s.ArchiveVersions(ctx, "s1"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("transaction", func(b *testing.B) {
		for b.Loop() {
			err := s.read(ctx, func(tx pgx.Tx) error {
				_, _, err := archVersions(ctx, tx, "s1")
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
