package postgres_test

import (
	"context"
	"testing"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/postgres"
	"github.com/engramhq/engram/internal/store/storetest"
)

// openStore opens a store on a database of its own, checked and closed
// when the test ends.
func openStore(t testing.TB) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), database(t), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.IntegrityCheck(context.Background()); err != nil {
			t.Error(err)
		}
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// TestContract runs the store contract suite against PostgreSQL.
func TestContract(t *testing.T) {
	storetest.Run(t, func(t testing.TB) store.Store { return openStore(t) })
}
