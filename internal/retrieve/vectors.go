package retrieve

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/engramhq/engram/internal/store"
)

// vectorSet is the in-memory index of one model's vectors, loaded from the
// store and brought up to date before each search.
//
// It follows the store's write order (ChunkVector.Seq), not chunk IDs:
// other processes embed too, on SQLite and on a PostgreSQL database
// shared by several servers, and a vector may be written for a chunk
// below the highest one loaded, or replace one loaded already. Each sync
// asks for what was written after the last vector it read, and Index.Add
// replaces a chunk's vector in place.
type vectorSet struct {
	model string
	mu    sync.Mutex // serialises loading; guards index and seq
	index *Index
	// seq is the Seq of the last vector loaded: the store's write cursor.
	seq    int64
	loaded atomic.Bool // a first load completed
}

// reset drops the index, to be loaded again from the start.
func (v *vectorSet) reset() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.index = nil
	v.seq = 0
	v.loaded.Store(false)
}

// sync loads the vectors stored since the last call and returns the index,
// or nil if the store has none.
func (v *vectorSet) sync(ctx context.Context, st store.Store) (*Index, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for {
		page, err := st.Vectors(ctx, v.model, v.seq, vectorPage)
		if err != nil {
			return v.index, fmt.Errorf("load vectors: %w", err)
		}
		for _, c := range page {
			if v.index == nil {
				v.index = NewIndex(len(c.Vector))
			}
			v.index.Add(c.ID, c.Vector)
			v.seq = c.Seq
		}
		if len(page) < vectorPage {
			v.loaded.Store(true)
			return v.index, nil
		}
	}
}

// purged reports whether the store was purged since the last search,
// dropping the vector index if it was.
func (h *Hybrid) purged(ctx context.Context) bool {
	n, err := h.st.Purges(ctx)
	if err != nil {
		h.opts.Log.Warn("read the purge count", "err", err)
		return false
	}
	if h.purges.Swap(n) == n {
		return false
	}
	if h.vecs != nil {
		h.vecs.reset()
	}
	return true
}

// Loaded returns how many vectors are in memory.
func (h *Hybrid) Loaded() int {
	if h.vecs == nil {
		return 0
	}
	h.vecs.mu.Lock()
	defer h.vecs.mu.Unlock()
	if h.vecs.index == nil {
		return 0
	}
	return h.vecs.index.Len()
}

// Warm loads the stored vectors into memory now rather than at the first
// search.
func (h *Hybrid) Warm(ctx context.Context) error {
	if h.vecs == nil {
		return nil
	}
	_, err := h.vecs.sync(ctx, h.st)
	return err
}
