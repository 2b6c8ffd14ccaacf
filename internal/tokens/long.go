package tokens

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// Long pieces. The pre-tokenizer bounds runs of digits but not runs of
// letters, punctuation or whitespace: 5 MiB of one letter, a line of "="
// or base64 of zeros ("AAAA…") is one piece. The reference tiktoken merges
// a piece by a linear scan per merge, quadratic in its length, however
// long it is (40,000 "a" take it 2.3 s); the heap in bpe.go is O(n log n)
// but allocates some 55 bytes per byte of the piece (BenchmarkCountLong).
// Pieces of longPiece bytes
// and more are encoded instead by backtracking over tokens, after
// github.com/github/rust-gems (crates/bpe), which finds the same tokens in
// time linear in the piece and about 4 bytes per token:
//
//   - The encoding of a text is unique, and any run of its tokens is the
//     encoding of the bytes they cover: merging never crossed their
//     boundaries, so merging those bytes alone makes the same merges in the
//     same order (by rank, leftmost first among equal ranks).
//   - Conversely, if tokens t1…tk are the encoding of their bytes and tk,t
//     are the encoding of theirs, then t1…tk,t is the encoding of its bytes.
//     Merging them all runs the merges of t1…tk and of t side by side until
//     a first merge crosses a boundary between the expected tokens; that
//     merge would be made by merging t1…tk alone, or tk+t alone, neither of
//     which crosses one.
//   - So a sequence of tokens covering the piece is its encoding exactly
//     when its first token is the encoding of its own bytes and every two
//     neighbours are the encoding of theirs. A pair is checked by undoing
//     the merges that made its two tokens (pairOK), and remembered.
//
// The search takes at each position the token taken last time after the
// same token and before the same bytes (which in a run or a repeated
// pattern is right), else the longest token there, and when a pair fails
// the next shorter one; when none fits it steps back a token. The encoding
// of each prefix being unique, a position from which no token leads to the
// end is dead whatever came before it, and is marked so: each position is
// given up at most once, and each try costs at most a walk of 128 bytes
// in the trie of the vocabulary.
//
// The tests check the search against a plain implementation of the
// reference's merge (long_test.go), and counts of long pieces against the
// reference's own (testdata/long.json).

// longPiece is the piece length in bytes from which merging backtracks.
// Below it the heap's time and memory stay small (a few milliseconds and
// 4 MB at most), and a process that never sees a longer piece does not
// build the trie (14 MiB and 0.2 s for o200k_base).
const longPiece = 64 << 10

// memo is a direct-mapped cache of uint32 values by uint64 key: a key
// takes the place of whatever shared its slot. The zero value is empty and
// allocates on first use.
type memo struct{ slots []memoSlot }

type memoSlot struct {
	key  uint64
	val  uint32
	used bool
}

// memoBits sizes a memo: 2^14 slots of 16 bytes.
const memoBits = 14

func (c *memo) slot(key uint64) *memoSlot {
	if c.slots == nil {
		c.slots = make([]memoSlot, 1<<memoBits)
	}
	return &c.slots[(key*0x9E3779B97F4A7C15)>>(64-memoBits)]
}

func (c *memo) get(key uint64) (uint32, bool) {
	s := c.slot(key)
	return s.val, s.used && s.key == key
}

func (c *memo) put(key uint64, val uint32) { *c.slot(key) = memoSlot{key, val, true} }

func (c *memo) reset() { clear(c.slots) }

// prefixTrie is the vocabulary as a trie: node 0 is the root, and the path
// from the root to a node spells a prefix of some token.
type prefixTrie struct {
	// child maps a node and the next byte to the node of the longer prefix.
	child childTable
	// rank is the rank of the token a node spells, or noRank.
	rank []uint32
	// token is the bytes of each rank.
	token []string
	// splits holds, once known, the two tokens whose merge makes each
	// token when its bytes are merged alone (see merger.split).
	splits []atomic.Uint64
}

func newPrefixTrie(ranks map[string]uint32) *prefixTrie {
	// A trie of tiktoken's vocabularies has about 2.2 nodes per token
	// (421,660 for o200k_base).
	t := &prefixTrie{rank: make([]uint32, 1, len(ranks)*9/4), token: make([]string, len(ranks)),
		splits: make([]atomic.Uint64, len(ranks))}
	t.child.init(len(ranks) * 9 / 4)
	t.rank[0] = noRank
	for tok, r := range ranks {
		t.token[r] = tok
		node := uint32(0)
		for i := 0; i < len(tok); i++ {
			next, ok := t.child.get(node, tok[i])
			if !ok {
				next = uint32(len(t.rank))
				t.rank = append(t.rank, noRank)
				t.child.put(node, tok[i], next)
			}
			node = next
		}
		t.rank[node] = r
	}
	return t
}

// childTable maps a trie node and a byte to a node, by open addressing:
// each slot holds a key (node<<8 | byte, plus one so that no key is zero)
// in its high half and the child in its low half. Half the size of a Go
// map of the same, and faster.
type childTable struct {
	slots []uint64
	shift uint // 64 - log2(len(slots))
	n     int
}

func (c *childTable) init(n int) {
	size := 1 << 10
	for size < 2*n {
		size *= 2
	}
	c.slots = make([]uint64, size)
	c.shift = uint(64 - bits.TrailingZeros(uint(size)))
	c.n = 0
}

func childKey(node uint32, b byte) uint64 { return uint64(node)<<8 | uint64(b) + 1 }

func (c *childTable) get(node uint32, b byte) (uint32, bool) {
	key := childKey(node, b)
	mask := uint64(len(c.slots) - 1)
	for i := (key * 0x9E3779B97F4A7C15) >> c.shift; ; i = (i + 1) & mask {
		switch s := c.slots[i]; {
		case s == 0:
			return 0, false
		case s>>32 == key:
			return uint32(s), true
		}
	}
}

// put adds a key that is not in the table.
func (c *childTable) put(node uint32, b byte, child uint32) {
	if 2*(c.n+1) > len(c.slots) {
		old := c.slots
		c.init(len(old))
		for _, s := range old {
			if s != 0 {
				c.insert(s)
			}
		}
	}
	c.insert(childKey(node, b)<<32 | uint64(child))
}

func (c *childTable) insert(s uint64) {
	mask := uint64(len(c.slots) - 1)
	i := ((s >> 32) * 0x9E3779B97F4A7C15) >> c.shift
	for c.slots[i] != 0 {
		i = (i + 1) & mask
	}
	c.slots[i] = s
	c.n++
}

// trieOnce builds an encoding's trie on first use: it takes 7 to 14 MiB
// and a fifth of a second, and most processes never see a long piece.
type trieOnce struct {
	once sync.Once
	trie *prefixTrie
}

func (o *trieOnce) get(ranks map[string]uint32) *prefixTrie {
	o.once.Do(func() { o.trie = newPrefixTrie(ranks) })
	return o.trie
}

// longState is a merger's scratch space for long pieces.
type longState struct {
	trie *prefixTrie
	// pairs remembers whether two tokens, by rank, are together the
	// encoding of their bytes; a first rank of noRank asks whether the
	// second token alone is.
	pairs memo
	// guesses remembers the token taken after a token where the text went
	// on with the same four bytes: in a run or a repeated pattern it is
	// the one to take again.
	guesses memo
	// stack is the encoding of the prefix searched so far, by rank (see
	// guessed).
	stack []uint32
	// dead marks the positions from which no token leads to the end.
	dead []uint64
	// cands holds the tokens that start at the current position, longest
	// first.
	cands []uint32
	buf   []byte
}

// prefixes sets ls.cands to the ranks of the tokens that start piece,
// longest first.
func (ls *longState) prefixes(piece string) {
	t := ls.trie
	cands := ls.cands[:0]
	node := uint32(0)
	for i := 0; i < len(piece); i++ {
		next, ok := t.child.get(node, piece[i])
		if !ok {
			break
		}
		node = next
		if r := t.rank[node]; r != noRank {
			cands = append(cands, r)
		}
	}
	for i, j := 0, len(cands)-1; i < j; i, j = i+1, j-1 {
		cands[i], cands[j] = cands[j], cands[i]
	}
	ls.cands = cands
}

// guessKey is the key of ls.guesses for the token prev followed by rest.
func guessKey(prev uint32, rest string) uint64 {
	var ctx uint32
	for i := range min(4, len(rest)) {
		ctx |= uint32(rest[i]) << (8 * i)
	}
	return uint64(prev)<<32 | uint64(ctx)
}

// guess returns the token remembered after prev where the text went on
// like rest, if rest begins with it, else noRank.
func (ls *longState) guess(prev uint32, rest string) uint32 {
	if len(rest) < 4 {
		return noRank
	}
	g, ok := ls.guesses.get(guessKey(prev, rest))
	if !ok {
		return noRank
	}
	if tok := ls.trie.token[g]; len(tok) > len(rest) || rest[:len(tok)] != tok {
		return noRank
	}
	return g
}

func (ls *longState) remember(prev uint32, rest string, r uint32) {
	if len(rest) < 4 {
		return
	}
	ls.guesses.put(guessKey(prev, rest), r)
}

// fits reports whether the token of rank b may follow the token of rank a
// (or begin the piece, if a is noRank): whether the two are the encoding of
// their bytes. a is the encoding of its own bytes.
func (m *merger) fits(a, b uint32) bool {
	ls := &m.long
	key := uint64(a)<<32 | uint64(b)
	if ok, seen := ls.pairs.get(key); seen {
		return ok == 1
	}
	_, _, ok := m.split(b)
	if ok && a != noRank {
		ok = m.pairOK(a, b)
	}
	var v uint32
	if ok {
		v = 1
	}
	ls.pairs.put(key, v)
	return ok
}

// split returns the two tokens whose merge makes the token of rank r when
// its bytes are merged alone, or r twice for a single byte. ok is false if
// merging its bytes alone does not make r.
//
// Merging a text makes a token only this way: while a token's bytes are
// one part, no merge has crossed their edges, so the merges inside them
// have been those of merging its bytes alone, in the same order.
func (m *merger) split(r uint32) (left, right uint32, ok bool) {
	const known, unreachable = 1 << 63, 1<<31 - 1
	t := m.long.trie
	v := t.splits[r].Load()
	if v == 0 {
		tok := t.token[r]
		switch starts := m.merge(tok); {
		case len(tok) == 1:
			v = known | uint64(r)<<32 | uint64(r)
		case len(starts) == 2:
			mid := m.lastMid
			v = known | uint64(m.ranks[tok[:mid]])<<32 | uint64(m.ranks[tok[mid:]])
		default:
			v = known | unreachable<<32 | unreachable
		}
		t.splits[r].Store(v)
	}
	left, right = uint32(v>>32)&unreachable, uint32(v)
	return left, right, left != unreachable
}

// joined returns the token that merging the tokens a and b makes, if any:
// the token of their bytes, if a and b are its split.
func (m *merger) joined(a, b uint32) (uint32, bool) {
	t := m.long.trie
	ls := &m.long
	ls.buf = append(append(ls.buf[:0], t.token[a]...), t.token[b]...)
	r, ok := m.ranks[string(ls.buf)]
	if !ok {
		return 0, false
	}
	left, right, ok := m.split(r)
	return r, ok && left == a && right == b
}

// pairOK reports whether the tokens of ranks a and b, each the encoding of
// its own bytes, are together the encoding of their bytes. It undoes their
// merges, latest first, as github.com/github/rust-gems does: while a is
// the later token, a's right part before a's last merge meets b, and a
// merge of the two with a lower rank than a's would have been made first;
// while b is the later one, a merge of a with b's left part would have
// been made first with a rank as low as b's, since it lies further left.
func (m *merger) pairOK(a, b uint32) bool {
	limit := uint32(noRank)
	for {
		if c, ok := m.joined(a, b); ok && c < limit {
			return false
		}
		if a > b {
			limit = a
			_, a, _ = m.split(a)
			if a == limit { // a is a single byte
				limit = b + 1
				b, _, _ = m.split(b)
				if b+1 == limit {
					return true
				}
			}
		} else {
			limit = b + 1
			b, _, _ = m.split(b)
			if b+1 == limit { // b is a single byte
				limit = a
				_, a, _ = m.split(a)
				if a == limit {
					return true
				}
			}
		}
	}
}

// guessed marks a token of the search's stack that was its position's guess.
const guessed = 1 << 31

// mergeLong encodes piece, which is not itself a token, by backtracking,
// and returns its tokens' ranks, valid until the next call. ok is false if
// the search found no encoding, which the argument above rules out; the
// caller then merges piece the usual way. It allocates about 4 bytes per
// token of the piece and a bit per byte.
func (m *merger) mergeLong(piece string) (tokens []uint32, ok bool) {
	ls := &m.long
	ls.trie = m.trie.get(m.ranks)
	ls.guesses.reset()
	t := ls.trie
	n := len(piece)
	if cap(ls.dead) < n/64+1 {
		ls.dead = make([]uint64, n/64+1)
	}
	dead := ls.dead[:n/64+1]
	clear(dead)
	stack := ls.stack[:0]
	defer func() { ls.stack = stack }()
	// The search is at piece[pos:]. The tokens that start there are tried
	// in order: the guess g, then ls.cands from index k on, skipping g;
	// k < 0 until the guess has been tried.
	pos, k, g := 0, -1, uint32(noRank)
	try := func(prev, r uint32) bool {
		end := pos + len(t.token[r])
		if end < n && dead[end/64]&(1<<(end%64)) != 0 {
			return false
		}
		return m.fits(prev, r)
	}
	for pos < n {
		prev := uint32(noRank)
		if len(stack) > 0 {
			prev = stack[len(stack)-1] &^ guessed
		}
		taken := uint32(noRank)
		if k < 0 {
			g = ls.guess(prev, piece[pos:])
			if g != noRank && try(prev, g) {
				taken = g
			} else {
				ls.prefixes(piece[pos:])
				k = 0
			}
		}
		for ; taken == noRank && k >= 0 && k < len(ls.cands); k++ {
			if r := ls.cands[k]; r != g && try(prev, r) {
				taken = r
			}
		}
		if taken != noRank {
			ls.remember(prev, piece[pos:], taken)
			if len(stack) == cap(stack) {
				// Doubling: append grows large slices by a quarter,
				// allocating five times their final size on the way.
				stack = append(make([]uint32, 0, max(2*cap(stack), n/16+64)), stack...)
			}
			if taken == g {
				stack = append(stack, taken|guessed)
			} else {
				stack = append(stack, taken)
			}
			pos += len(t.token[taken])
			k = -1
			continue
		}
		// No token leads on from pos: give it up, and go on at the
		// position before with the tokens after the one taken there. A
		// guess was tried first, so the others all follow it; after
		// another token, the guess, if it comes again, fails at once.
		if len(stack) == 0 {
			return nil, false
		}
		dead[pos/64] |= 1 << (pos % 64)
		last := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		r := last &^ guessed
		pos -= len(t.token[r])
		ls.prefixes(piece[pos:])
		k = 0
		if last&guessed != 0 {
			g = r
		} else {
			g = noRank
			for ls.cands[k] != r {
				k++
			}
			k++
		}
	}
	for i := range stack {
		stack[i] &^= guessed
	}
	return stack, true
}

// longStarts returns the start offsets of the tokens of piece followed by
// len(piece), like merge, by backtracking. The result is not kept by the
// merger.
func (m *merger) longStarts(piece string) ([]int, bool) {
	tokens, ok := m.mergeLong(piece)
	if !ok {
		return nil, false
	}
	starts := make([]int, 0, len(tokens)+1)
	pos := 0
	for _, r := range tokens {
		starts = append(starts, pos)
		pos += len(m.long.trie.token[r])
	}
	m.long.release()
	return append(starts, pos), true
}

// eachStart calls fn with the start offset of each token of piece, which
// is not itself a token, in order, until fn returns false, and reports
// whether it never did. Unlike merge, it holds no offsets for a long piece.
// fn must not use m.
func (m *merger) eachStart(piece string, fn func(start int) bool) bool {
	if len(piece) >= longPiece {
		if tokens, ok := m.mergeLong(piece); ok {
			defer m.long.release()
			pos := 0
			for _, r := range tokens {
				if !fn(pos) {
					return false
				}
				pos += len(m.long.trie.token[r])
			}
			return true
		}
	}
	starts := m.merge(piece)
	for _, st := range starts[:len(starts)-1] {
		if !fn(st) {
			return false
		}
	}
	return true
}

// release drops scratch space that a very long piece grew, so that a pooled
// merger does not keep it.
func (ls *longState) release() {
	const keep = 1 << 16
	if cap(ls.stack) > keep {
		ls.stack = nil
	}
	if cap(ls.dead) > keep/64 {
		ls.dead = nil
	}
}
