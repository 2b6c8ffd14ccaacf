package retrieve

import (
	"container/heap"
	"runtime"
	"sync"

	"github.com/viterin/vek/vek32"
)

// Scored is an item with a score, higher is better.
type Scored struct {
	ID    int64
	Score float64
}

// Index is an exact in-memory vector index: vectors of one dimension in
// one contiguous slice, searched by dot product (cosine similarity, since
// vectors are normalised) with SIMD instructions, on all cores. Exact
// search over 100,000 vectors of 128 dimensions takes a few milliseconds;
// see BENCHMARKS.md for larger sizes. It is safe for concurrent use.
type Index struct {
	mu   sync.RWMutex // guards the fields below
	dim  int
	ids  []int64
	vecs []float32
	pos  map[int64]int // ID -> position, to replace a vector
}

// NewIndex returns an empty index of vectors of dim dimensions.
func NewIndex(dim int) *Index {
	return &Index{dim: dim, pos: map[int64]int{}}
}

// Dim returns the dimension of the index's vectors.
func (x *Index) Dim() int { return x.dim }

// Len returns the number of vectors.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.ids)
}

// Add adds or replaces the vector of id. A vector of the wrong dimension is
// ignored.
func (x *Index) Add(id int64, v []float32) {
	if len(v) != x.dim {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if p, ok := x.pos[id]; ok {
		copy(x.vecs[p*x.dim:(p+1)*x.dim], v)
		return
	}
	x.pos[id] = len(x.ids)
	x.ids = append(x.ids, id)
	x.vecs = append(x.vecs, v...)
}

// minHeap keeps the k best results seen, the worst on top.
type minHeap []Scored

func (h minHeap) Len() int { return len(h) }
func (h minHeap) Less(i, j int) bool {
	if h[i].Score != h[j].Score {
		return h[i].Score < h[j].Score
	}
	return h[i].ID < h[j].ID // among equals, the newer (larger ID) is better
}
func (h minHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *minHeap) Push(v any)   { *h = append(*h, v.(Scored)) }
func (h *minHeap) Pop() any {
	old := *h
	v := old[len(old)-1]
	*h = old[:len(old)-1]
	return v
}

func (h *minHeap) offer(s Scored, k int) {
	if len(*h) < k {
		heap.Push(h, s)
		return
	}
	if top := (*h)[0]; s.Score > top.Score || s.Score == top.Score && s.ID > top.ID {
		(*h)[0] = s
		heap.Fix(h, 0)
	}
}

// Search returns the k vectors most similar to q, best first; ties go to
// the larger (newer) ID.
func (x *Index) Search(q []float32, k int) []Scored {
	x.mu.RLock()
	defer x.mu.RUnlock()
	n := len(x.ids)
	if k <= 0 || n == 0 || len(q) != x.dim {
		return nil
	}
	// Each worker scans a contiguous share; the partial results merge.
	workers := min(runtime.GOMAXPROCS(0), max(1, n/4096))
	parts := make([]minHeap, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*n/workers, (w+1)*n/workers
		wg.Go(func() {
			h := make(minHeap, 0, k+1)
			for i := lo; i < hi; i++ {
				s := vek32.Dot(q, x.vecs[i*x.dim:(i+1)*x.dim])
				h.offer(Scored{ID: x.ids[i], Score: float64(s)}, k)
			}
			parts[w] = h
		})
	}
	wg.Wait()
	all := make(minHeap, 0, k+1)
	for _, p := range parts {
		for _, s := range p {
			all.offer(s, k)
		}
	}
	out := make([]Scored, len(all))
	for i := len(all) - 1; i >= 0; i-- {
		out[i] = heap.Pop(&all).(Scored)
	}
	return out
}

// Remove deletes the vector of id, if the index holds one: the last vector
// moves into its place.
func (x *Index) Remove(id int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	p, ok := x.pos[id]
	if !ok {
		return
	}
	last := len(x.ids) - 1
	if p != last {
		moved := x.ids[last]
		x.ids[p] = moved
		copy(x.vecs[p*x.dim:(p+1)*x.dim], x.vecs[last*x.dim:])
		x.pos[moved] = p
	}
	x.ids = x.ids[:last]
	x.vecs = x.vecs[:last*x.dim]
	delete(x.pos, id)
}

// Dot returns the dot product of q with the vector of id, if the index
// holds one.
func (x *Index) Dot(id int64, q []float32) (float64, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	p, ok := x.pos[id]
	if !ok || len(q) != x.dim {
		return 0, false
	}
	return float64(vek32.Dot(q, x.vecs[p*x.dim:(p+1)*x.dim])), true
}
