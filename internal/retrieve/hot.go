package retrieve

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/terms"
)

// Hot tier defaults.
const (
	// HotWindow is how long a used chunk stays hot.
	HotWindow = 2 * time.Hour
	// HotSize bounds the hot set.
	HotSize = 256
	// hotRefresh is how often the hot set is re-read from the store, which
	// other processes write too.
	hotRefresh = 10 * time.Second
)

// hotSet holds the recently used chunks in memory: the first tier of a
// search, answered without touching the store, and a small boost for them
// in the full search.
type hotSet struct {
	mu       sync.RWMutex
	hits     map[int64]store.Hit
	terms    map[int64][]string
	loadedAt time.Time
}

func newHotSet() *hotSet { return &hotSet{hits: map[int64]store.Hit{}} }

func (s *hotSet) snapshot() map[int64]bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[int64]bool, len(s.hits))
	for id := range s.hits {
		out[id] = true
	}
	return out
}

// refresh re-reads the hot set from the store when it is older than
// hotRefresh, or when forced.
func (h *Hybrid) refreshHot(ctx context.Context, force bool) error {
	h.hot.mu.RLock()
	fresh := time.Since(h.hot.loadedAt) < hotRefresh
	h.hot.mu.RUnlock()
	if fresh && !force {
		return nil
	}
	used, err := h.st.HotChunks(ctx, time.Now().Add(-HotWindow), HotSize)
	if err != nil {
		return err
	}
	ids := make([]int64, len(used))
	for i, u := range used {
		ids[i] = u.ChunkID
	}
	hits, err := h.st.ChunkHits(ctx, ids, store.Filter{})
	if err != nil {
		return err
	}
	m := make(map[int64]store.Hit, len(hits))
	t := make(map[int64][]string, len(hits))
	for _, hit := range hits {
		m[hit.Chunk.ID] = hit
		t[hit.Chunk.ID] = terms.Content(hit.Chunk.Text)
	}
	h.hot.mu.Lock()
	h.hot.hits, h.hot.terms, h.hot.loadedAt = m, t, time.Now()
	h.hot.mu.Unlock()
	return nil
}

// Used records that an agent used chunks (they were shown, retrieved or
// quoted): they join the hot tier.
func (h *Hybrid) Used(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	if err := h.st.RecordAccess(ctx, ids, time.Now()); err != nil {
		return err
	}
	return h.refreshHot(ctx, true)
}

// hotSearch scores the hot set against a query from memory alone: the
// share of the query's words a chunk holds. It answers when the full
// search cannot, within any deadline.
func (h *Hybrid) hotSearch(text string, limit int) []Hit {
	qt := terms.Content(text)
	if len(qt) == 0 {
		return nil
	}
	h.hot.mu.RLock()
	defer h.hot.mu.RUnlock()
	var out []Hit
	for id, hit := range h.hot.hits {
		have := map[string]bool{}
		for _, t := range h.hot.terms[id] {
			have[t] = true
		}
		n := 0
		for _, t := range qt {
			if have[t] {
				n++
			}
		}
		if n == 0 {
			continue
		}
		hit.Coverage = float64(n) / float64(len(qt))
		out = append(out, Hit{Hit: hit, Score: hit.Coverage, Boosts: []string{"hot"}})
	}
	slices.SortFunc(out, func(a, b Hit) int {
		if a.Score != b.Score {
			if a.Score > b.Score {
				return -1
			}
			return 1
		}
		return b.Occurrence.Time.Compare(a.Occurrence.Time)
	})
	return out[:min(limit, len(out))]
}
