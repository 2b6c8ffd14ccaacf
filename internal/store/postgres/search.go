package postgres

import (
	"context"
	"time"

	"github.com/engramhq/engram/internal/store"
)

var _ = time.Time{}

// Search implements store.Store.
func (s *Store) Search(ctx context.Context, q store.Query) (_ []store.Hit, err error) {
	err = errNotYet("Search")
	return
}

// EntryCoverage implements store.Store.
func (s *Store) EntryCoverage(ctx context.Context, text string, ids []string) (_ map[string]float64, err error) {
	err = errNotYet("EntryCoverage")
	return
}
