package retrieve

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"testing"
)

func randomUnit(r *rand.Rand, dim int) []float32 {
	v := make([]float32, dim)
	var s float64
	for i := range v {
		v[i] = float32(r.NormFloat64())
		s += float64(v[i]) * float64(v[i])
	}
	for i := range v {
		v[i] /= float32(math.Sqrt(s))
	}
	return v
}

// bruteForce ranks by a plain loop, the reference for Search.
func bruteForce(ids []int64, vecs [][]float32, q []float32, k int) []Scored {
	var all []Scored
	for i, v := range vecs {
		var s float32
		for j := range v {
			s += v[j] * q[j]
		}
		all = append(all, Scored{ID: ids[i], Score: float64(s)})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Score != all[j].Score {
			return all[i].Score > all[j].Score
		}
		return all[i].ID > all[j].ID
	})
	return all[:min(k, len(all))]
}

func TestIndexSearchMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const dim, n = 64, 20000 // enough for several workers
	x := NewIndex(dim)
	var ids []int64
	var vecs [][]float32
	for i := range n {
		id := int64(i*3 + 1)
		v := randomUnit(r, dim)
		ids, vecs = append(ids, id), append(vecs, v)
		x.Add(id, v)
	}
	if x.Len() != n {
		t.Fatalf("Len %d, want %d", x.Len(), n)
	}
	for range 20 {
		q := randomUnit(r, dim)
		got := x.Search(q, 10)
		want := bruteForce(ids, vecs, q, 10)
		if len(got) != len(want) {
			t.Fatalf("got %d results, want %d", len(got), len(want))
		}
		for i := range got {
			// SIMD sums in another order: scores agree to rounding, IDs exactly.
			if got[i].ID != want[i].ID || math.Abs(got[i].Score-want[i].Score) > 1e-5 {
				t.Fatalf("result %d: got %+v, want %+v", i, got[i], want[i])
			}
		}
	}
}

func TestIndexReplaceAndBadInput(t *testing.T) {
	x := NewIndex(2)
	x.Add(1, []float32{1, 0})
	x.Add(2, []float32{0, 1})
	x.Add(3, []float32{1, 0, 0}) // wrong dimension: ignored
	if x.Len() != 2 {
		t.Fatalf("Len = %d, want 2", x.Len())
	}
	if got := x.Search([]float32{1, 0}, 1); len(got) != 1 || got[0].ID != 1 {
		t.Fatalf("Search = %v, want chunk 1", got)
	}
	x.Add(1, []float32{0, -1}) // replaces
	if got := x.Search([]float32{1, 0}, 2); len(got) != 2 || got[0].ID != 2 || got[1].Score != 0 {
		t.Fatalf("after replace: %v", got)
	}
	if got := x.Search([]float32{1}, 2); got != nil {
		t.Fatalf("query of the wrong dimension: %v", got)
	}
	if got := x.Search([]float32{1, 0}, 0); got != nil {
		t.Fatalf("k 0: %v", got)
	}
	if got := NewIndex(2).Search([]float32{1, 0}, 3); got != nil {
		t.Fatalf("empty index: %v", got)
	}
	x.Remove(2)
	x.Remove(99) // absent: no-op
	if got := x.Search([]float32{0, 1}, 5); len(got) != 1 || got[0].ID != 1 {
		t.Fatalf("after remove: %v", got)
	}
}

func TestIndexTiesGoToNewer(t *testing.T) {
	x := NewIndex(2)
	for id := range int64(10) {
		x.Add(id+1, []float32{1, 0})
	}
	got := x.Search([]float32{1, 0}, 3)
	if ids := []int64{got[0].ID, got[1].ID, got[2].ID}; !slices.Equal(ids, []int64{10, 9, 8}) {
		t.Fatalf("tied results %v, want newest first", ids)
	}
}

// BenchmarkIndexSearch times exact top-50 search at 128 dimensions, the
// corpus model's, against a baseline in the same run: the same scan with a
// plain Go dot product on one core, keeping the best 50 in a sorted slice.
func BenchmarkIndexSearch(b *testing.B) {
	for _, n := range []int{10000, 100000, 1000000} {
		r := rand.New(rand.NewPCG(1, 2))
		x := NewIndex(128)
		flat := make([]float32, 0, n*128)
		for i := range n {
			v := randomUnit(r, 128)
			x.Add(int64(i+1), v)
			flat = append(flat, v...)
		}
		q := randomUnit(r, 128)
		b.Run("simd/"+strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				x.Search(q, 50)
			}
		})
		b.Run("baseline/"+strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				top := make([]Scored, 0, 51)
				for i := range n {
					var d float32
					for j, w := range flat[i*128 : (i+1)*128] {
						d += w * q[j]
					}
					if len(top) == 50 && float64(d) <= top[49].Score {
						continue
					}
					k := sort.Search(len(top), func(k int) bool { return top[k].Score < float64(d) })
					top = slices.Insert(top, k, Scored{ID: int64(i + 1), Score: float64(d)})
					top = top[:min(len(top), 50)]
				}
			}
		})
	}
}
