package tokens

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// referenceMerge is byte-pair merging as the reference tiktoken defines it,
// written for clarity alone: start from single bytes, and merge the
// neighbours whose concatenation has the lowest rank, the leftmost of
// equals, until no two neighbours make a token. It returns the start
// offsets of the parts followed by len(piece), as merger.merge does.
func referenceMerge(ranks map[string]uint32, piece string) []int {
	parts := make([]string, len(piece))
	for i := 0; i < len(piece); i++ {
		parts[i] = piece[i : i+1]
	}
	for {
		best, bestRank := -1, uint32(noRank)
		for k := 0; k+1 < len(parts); k++ {
			if r, ok := ranks[parts[k]+parts[k+1]]; ok && r < bestRank {
				best, bestRank = k, r
			}
		}
		if best < 0 {
			break
		}
		parts = slices.Replace(parts, best, best+2, parts[best]+parts[best+1])
	}
	starts := []int{0}
	for _, p := range parts {
		starts = append(starts, starts[len(starts)-1]+len(p))
	}
	return starts
}

// randomPieces returns n texts made of atoms that form many tokens and
// overlap in many ways: runs, repeated patterns, words, multi-byte runes.
func randomPieces(r *rand.Rand, n, maxAtoms int) []string {
	atoms := []string{"a", "b", "A", "ab", "ba", "=", "-", " ", "  ", "\n", "é", "漢", "字", "😀", "th", "e", "in", "ing", "x", "_", "*", "#", "ſ", "\u0301"}
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for range 1 + r.IntN(maxAtoms) {
			a := atoms[r.IntN(len(atoms))]
			if r.IntN(4) == 0 {
				a = strings.Repeat(a, 1+r.IntN(40))
			}
			b.WriteString(a)
		}
		out[i] = b.String()
	}
	return out
}

// TestMergeLong_Reference checks the backtracking search, which merging
// uses for long pieces only, against the reference definition on short
// ones, and against the heap on longer ones.
func TestMergeLong_Reference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	short := randomPieces(r, 1500, 12)
	long := randomPieces(r, 60, 400)
	for _, name := range Names() {
		e := MustGet(name)
		m := e.pool.Get().(*merger)
		for _, s := range short {
			if e.has(s) {
				continue
			}
			want := referenceMerge(e.ranks, s)
			if got := slices.Clone(m.merge(s)); !slices.Equal(got, want) {
				t.Errorf("%s: merge(%q) = %v, reference %v", name, s, got, want)
			}
			if got, ok := m.longStarts(s); !ok || !slices.Equal(got, want) {
				t.Errorf("%s: longStarts(%q) = %v, %v; reference %v", name, s, got, ok, want)
			}
		}
		for _, s := range long {
			if e.has(s) {
				continue
			}
			want := slices.Clone(m.mergeHeap(s))
			if got, ok := m.longStarts(s); !ok || !slices.Equal(got, want) {
				t.Errorf("%s: longStarts of %d bytes (%.40q…) = %d tokens, %v; heap %d", name, len(s), s, len(got)-1, ok, len(want)-1)
			}
		}
		e.pool.Put(m)
	}
}

// TestPairOK checks the merge-undoing test of a pair of tokens against
// its definition, merging their bytes, on random pairs of tokens and on
// pairs of tokens of one repeated character.
func TestPairOK(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	for _, name := range Names() {
		e := MustGet(name)
		m := e.pool.Get().(*merger)
		m.long.trie = e.trie.get(e.ranks)
		tokens := m.long.trie.token
		var pairs [][2]uint32
		for range 20000 {
			pairs = append(pairs, [2]uint32{uint32(r.IntN(len(tokens))), uint32(r.IntN(len(tokens)))})
		}
		var runs []uint32
		for _, c := range []string{"a", "=", " ", "\n", "-", "*", "A"} {
			for k := 1; k <= 128; k++ {
				if rank, ok := e.ranks[strings.Repeat(c, k)]; ok {
					runs = append(runs, rank)
				}
			}
		}
		for _, a := range runs {
			for _, b := range runs {
				pairs = append(pairs, [2]uint32{a, b})
			}
		}
		differ := 0
		for _, p := range pairs {
			a, b := tokens[p[0]], tokens[p[1]]
			if len(m.merge(a)) != 2 || len(m.merge(b)) != 2 {
				continue // pairOK is for tokens that are their own encoding
			}
			starts := m.merge(a + b)
			want := len(starts) == 3 && starts[1] == len(a)
			if got := m.pairOK(p[0], p[1]); got != want {
				differ++
				if differ <= 5 {
					t.Errorf("%s: pairOK(%q, %q) = %v, merging gives %v", name, a, b, got, want)
				}
			}
		}
		e.pool.Put(m)
	}
}

// longCase is a piece of long.json: a unit repeated to at least Bytes
// bytes, or Chars characters drawn from Alphabet by gen.mjs's generator.
type longCase struct {
	Unit     *string `json:"unit"`
	Bytes    int     `json:"bytes"`
	Alphabet string  `json:"alphabet"`
	Seed     int32   `json:"seed"`
	Chars    int     `json:"chars"`
	Cl100k   int     `json:"cl100k_base"`
	O200k    int     `json:"o200k_base"`
}

func (c longCase) text() string {
	if c.Unit != nil {
		return strings.Repeat(*c.Unit, (c.Bytes+len(*c.Unit)-1)/len(*c.Unit))
	}
	// mulberry32, as gen.mjs has it, so both build the same text.
	seed := c.Seed
	next := func() float64 {
		seed += 0x6d2b79f5
		t := uint32(seed)
		t = (t ^ t>>15) * (1 | t)
		t = (t + (t^t>>7)*(61|t)) ^ t
		return float64(t^t>>14) / 4294967296
	}
	chars := []rune(c.Alphabet)
	var b strings.Builder
	for range c.Chars {
		b.WriteRune(chars[int(next()*float64(len(chars)))])
	}
	return b.String()
}

// TestCount_LongPieces checks counts of pieces long enough to be merged by
// backtracking against the reference's (testdata/long.json, from gen.mjs).
func TestCount_LongPieces(t *testing.T) {
	var cases []longCase
	readJSON(t, "testdata/long.json", &cases)
	if len(cases) < 10 {
		t.Fatalf("only %d cases in testdata/long.json", len(cases))
	}
	for _, c := range cases {
		text := c.text()
		for _, enc := range Names() {
			e := MustGet(enc)
			want := c.O200k
			if enc == Cl100kBase {
				want = c.Cl100k
			}
			if pieces := e.Pieces(text); len(pieces) != 1 || len(text) < longPiece {
				t.Fatalf("%s: %.20q… is %d pieces of %d bytes, want one of %d or more", enc, text, len(pieces), len(text), longPiece)
			}
			if got := e.Count(text); got != want {
				t.Errorf("%s: Count(%.20q…, %d bytes) = %d, reference %d", enc, text, len(text), got, want)
			}
			if got := len(e.Encode(text)); got != want {
				t.Errorf("%s: Encode(%.20q…) has %d tokens, reference %d", enc, text, got, want)
			}
			sum := 0
			for _, n := range e.CountLines(text) {
				sum += n
			}
			if sum != want {
				t.Errorf("%s: CountLines(%.20q…) sums to %d, reference %d", enc, text, sum, want)
			}
			if got := len(slices.Collect(e.Starts(text))); got != want {
				t.Errorf("%s: Starts(%.20q…) has %d tokens, reference %d", enc, text, got, want)
			}
		}
	}
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestCount_LongPieceMemory checks that counting a long piece allocates
// at most 2 bytes per byte of it, at 1 and at 4 MiB, beside 1 MiB of
// fixed scratch (a fresh merger's memos): the heap merge took some 55, 225
// MB for 4 MiB of one letter. (A ratio of the two sizes would depend on
// what the pooled mergers kept, which -race drops at random.)
func TestCount_LongPieceMemory(t *testing.T) {
	e := MustGet(O200kBase)
	e.Count(strings.Repeat("a", 2*longPiece)) // build the trie first
	for _, unit := range []string{"a", "=", " ", "ab"} {
		var counts []int
		for _, size := range []int{1 << 20, 4 << 20} {
			text := strings.Repeat(unit, size/len(unit))
			var n int
			a := allocated(func() { n = e.Count(text) })
			counts = append(counts, n)
			if a > uint64(2*size+1<<20) {
				t.Errorf("%q: counting %d MiB allocated %d bytes, %.1f per byte", unit, size>>20, a, float64(a)/float64(size))
			}
		}
		if counts[1] < 4*counts[0]-1 || counts[1] > 4*counts[0]+1 {
			t.Errorf("%q: %d tokens in 1 MiB, %d in 4 MiB", unit, counts[0], counts[1])
		}
	}
}

// FuzzMergeLong checks the backtracking search against the heap merge on
// any text: the same tokens.
func FuzzMergeLong(f *testing.F) {
	for _, s := range []string{"aaaaaaaaa", "=================", "ababababab", "-=-=-=-=", "漢字漢字", "😀😀😀", "e\u0301\u0301\u0301", "\xff\xfe\xfd"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, name := range Names() {
			e := MustGet(name)
			if s == "" || e.has(s) {
				continue
			}
			m := e.pool.Get().(*merger)
			want := slices.Clone(m.mergeHeap(s))
			if got, ok := m.longStarts(s); !ok || !slices.Equal(got, want) {
				t.Fatalf("%s: longStarts(%q) = %v, %v; heap %v", name, s, got, ok, want)
			}
			e.pool.Put(m)
		}
	})
}
