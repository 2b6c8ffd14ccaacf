package tokens

import "math"

// noRank marks a pair that is not in the vocabulary.
const noRank = math.MaxUint32

// heapThreshold is the piece length in bytes from which merging switches
// from a linear scan per merge (O(n²), fastest for the short pieces that are
// nearly all of real text) to a heap (O(n log n), for long runs such as
// base64 blobs or minified code), until longPiece (long.go).
const heapThreshold = 128

// Pieces that are not themselves tokens repeat a great deal in real text
// (identifiers, words missing from the vocabulary), and merging one costs a
// dozen map lookups, so a merger remembers the token counts of the short
// pieces it merged.
const (
	cacheMaxPiece   = 48      // bytes; longer pieces are rare and not cached
	cacheMaxEntries = 1 << 15 // the cache is cleared when it grows past this
)

// merger holds the scratch space of byte-pair merges and a cache of piece
// token counts. Mergers are pooled; each is used by one goroutine at a time.
type merger struct {
	ranks map[string]uint32
	trie  *trieOnce // the encoding's, for long pieces
	cache map[string]int
	// starts[k] is the byte offset where part k begins; pairRank[k] is the
	// rank of the token made by joining parts k and k+1.
	starts   []int
	pairRank []uint32
	nodes    []node
	heap     pairHeap
	// lastMid is where the last merge of the last call joined two parts.
	lastMid int
	long    longState
}

// count returns the number of tokens piece, which is not itself a token,
// merges into.
func (m *merger) count(piece string) int {
	if len(piece) >= longPiece {
		tokens, ok := m.mergeLong(piece)
		m.long.release()
		if ok {
			return len(tokens)
		}
	}
	if len(piece) > cacheMaxPiece {
		return len(m.merge(piece)) - 1
	}
	if n, ok := m.cache[piece]; ok {
		return n
	}
	n := len(m.merge(piece)) - 1
	if m.cache == nil || len(m.cache) >= cacheMaxEntries {
		m.cache = make(map[string]int, 1024)
	}
	m.cache[piece] = n
	return n
}

// rank returns the rank of piece[a:b], or noRank.
func (m *merger) rank(piece string, a, b int) uint32 {
	if r, ok := m.ranks[piece[a:b]]; ok {
		return r
	}
	return noRank
}

// merge splits piece, which is not itself a token, into the tokens
// byte-pair encoding makes of it and returns their start offsets followed by
// len(piece). The result is valid until the next call.
func (m *merger) merge(piece string) []int {
	if len(piece) >= longPiece {
		if starts, ok := m.longStarts(piece); ok {
			return starts
		}
	}
	if len(piece) >= heapThreshold {
		return m.mergeHeap(piece)
	}
	n := len(piece)
	starts := m.starts[:0]
	pairRank := m.pairRank[:0]
	for i := 0; i <= n; i++ {
		starts = append(starts, i)
		pairRank = append(pairRank, noRank)
	}
	for k := 0; k+2 <= n; k++ {
		pairRank[k] = m.rank(piece, k, k+2)
	}
	// rankAt is the rank of joining parts k and k+1 in the current list.
	rankAt := func(k int) uint32 {
		if k+2 >= len(starts) {
			return noRank
		}
		return m.rank(piece, starts[k], starts[k+2])
	}
	for len(starts) > 2 {
		best, bestRank := -1, uint32(noRank)
		for k, r := range pairRank[:len(starts)-2] {
			if r < bestRank {
				best, bestRank = k, r
			}
		}
		if best < 0 {
			break
		}
		m.lastMid = starts[best+1]
		starts = append(starts[:best+1], starts[best+2:]...)
		pairRank = append(pairRank[:best+1], pairRank[best+2:]...)
		pairRank[best] = rankAt(best)
		if best > 0 {
			pairRank[best-1] = rankAt(best - 1)
		}
	}
	m.starts, m.pairRank = starts, pairRank
	return starts
}

// node is a part in mergeHeap's linked list, indexed by its start offset.
type node struct {
	prev, next int32
	rank       uint32 // rank of joining this part with the next; noRank if none
}

type candidate struct {
	rank  uint32
	start int32
}

// pairHeap is a min-heap of merge candidates ordered by rank, then start, so
// that among equal ranks the leftmost pair merges first, as in the linear
// scan.
type pairHeap []candidate

func (h pairHeap) less(a, b int) bool {
	if h[a].rank != h[b].rank {
		return h[a].rank < h[b].rank
	}
	return h[a].start < h[b].start
}

func (h *pairHeap) push(c candidate) {
	*h = append(*h, c)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *pairHeap) pop() candidate {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		c := 2*i + 1
		if c >= len(s) {
			break
		}
		if r := c + 1; r < len(s) && s.less(r, c) {
			c = r
		}
		if !s.less(c, i) {
			break
		}
		s[i], s[c] = s[c], s[i]
		i = c
	}
	*h = s
	return top
}

func (m *merger) mergeHeap(piece string) []int {
	n := int32(len(piece))
	if cap(m.nodes) < int(n)+1 {
		m.nodes = make([]node, n+1)
	}
	nodes := m.nodes[:n+1]
	for i := range nodes {
		nodes[i] = node{prev: int32(i) - 1, next: int32(i) + 1, rank: noRank}
	}
	nodes[n].next = -1
	// pairAt is the rank of joining the part at i with the one after it.
	pairAt := func(i int32) uint32 {
		j := nodes[i].next
		if j < 0 || nodes[j].next < 0 {
			return noRank
		}
		return m.rank(piece, int(i), int(nodes[j].next))
	}
	h := m.heap[:0]
	for i := int32(0); i+2 <= n; i++ {
		if r := pairAt(i); r != noRank {
			nodes[i].rank = r
			h.push(candidate{r, i})
		}
	}
	for len(h) > 0 {
		c := h.pop()
		if nodes[c.start].rank != c.rank || c.rank == noRank {
			continue // stale: the pair changed after this was pushed
		}
		i := c.start
		j := nodes[i].next
		k := nodes[j].next
		nodes[j].rank = noRank
		m.lastMid = int(j)
		nodes[i].next = k
		if k >= 0 {
			nodes[k].prev = i
		}
		for _, b := range [2]int32{i, nodes[i].prev} {
			if b < 0 {
				continue
			}
			nodes[b].rank = pairAt(b)
			if nodes[b].rank != noRank {
				h.push(candidate{nodes[b].rank, b})
			}
		}
	}
	m.heap = h
	starts := m.starts[:0]
	for i := int32(0); i >= 0; i = nodes[i].next {
		starts = append(starts, int(i))
	}
	m.starts = starts
	return starts
}
