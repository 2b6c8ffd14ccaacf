package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/storetest"
)

// TestVectors_Servers has two servers embed one store at once, several
// workers each, every worker writing its own interleaved chunks (every
// sixth) twice, in small batches, while a reader on one of them follows
// the write cursor (Vectors after the greatest Seq it has read), as a
// server's in-memory index does. Chunk IDs are not in commit order, and a
// second write replaces a vector already read. At the end the reader
// holds every vector, each with its last value: no write was committed
// below the cursor of a reader that had gone past it.
func TestVectors_Servers(t *testing.T) {
	ss := servers(t, 2)
	ctx := context.Background()
	const chunks, workers, batch, rounds = 360, 6, 4, 2
	var entries []store.Entry
	for i := range chunks {
		entries = append(entries, storetest.Entry("s", "a", store.Note, fmt.Sprintf("note %d about otters", i)))
	}
	if _, err := ss[0].PutEntries(ctx, entries); err != nil {
		t.Fatal(err)
	}
	pending, err := ss[0].PendingChunks(ctx, "m", 0, 2*chunks)
	if err != nil || len(pending) != chunks {
		t.Fatalf("%d chunks pending, %v; want %d", len(pending), err, chunks)
	}
	// Chunk i's vector in round r is (i, r).
	vec := func(i, r int) []float32 { return []float32{float32(i), float32(r)} }

	var wg sync.WaitGroup
	var writing atomic.Int32
	errs := make(chan error, workers+1)
	for w := range workers {
		s := ss[w%len(ss)]
		writing.Add(1)
		wg.Go(func() {
			defer writing.Add(-1)
			for r := 1; r <= rounds; r++ {
				var vs []store.ChunkVector
				// From the last chunk down, so that a worker's own
				// writes go below what it wrote before.
				for i := chunks - 1 - w; i >= 0; i -= workers {
					vs = append(vs, store.ChunkVector{ID: pending[i].ID, Vector: vec(i, r)})
					if len(vs) == batch || i < workers {
						if err := s.PutVectors(ctx, "m", 2, vs); err != nil {
							errs <- fmt.Errorf("worker %d: %w", w, err)
							return
						}
						vs = nil
					}
				}
			}
		})
	}

	// The reader, on the second server.
	got := map[int64][]float32{}
	var cursor int64
	reads := 0
	follow := func() error {
		for {
			page, err := ss[1].Vectors(ctx, "m", cursor, 7)
			if err != nil {
				return err
			}
			reads++
			for _, v := range page {
				if v.Seq <= cursor {
					return fmt.Errorf("Vectors(after %d) returned Seq %d", cursor, v.Seq)
				}
				cursor = v.Seq
				got[v.ID] = v.Vector
			}
			if len(page) < 7 {
				return nil
			}
		}
	}
	wg.Go(func() {
		for writing.Load() > 0 {
			if err := follow(); err != nil {
				errs <- fmt.Errorf("reader: %w", err)
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	// What the writers left after the reader's last look.
	if err := follow(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d reads while %d workers wrote %d vectors", reads, workers, rounds*chunks)
	missing, stale := 0, 0
	for i, c := range pending {
		v, ok := got[c.ID]
		switch {
		case !ok:
			missing++
		case v[0] != float32(i) || v[1] != rounds:
			stale++
			if stale == 1 {
				t.Errorf("chunk %d: the reader holds %v, want %v", c.ID, v, vec(i, rounds))
			}
		}
	}
	if missing > 0 || stale > 0 {
		t.Errorf("the reader missed %d vectors and holds %d stale, of %d", missing, stale, chunks)
	}
	if all, err := ss[0].Vectors(ctx, "m", 0, 2*chunks); err != nil || len(all) != chunks || all[len(all)-1].Seq != cursor {
		t.Errorf("Vectors(0) = %d vectors, %v; the last Seq should be the reader's cursor %d", len(all), err, cursor)
	}
}
