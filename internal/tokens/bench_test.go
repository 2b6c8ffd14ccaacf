package tokens

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tiktoken-go/tokenizer"
)

// benchText is every fixture concatenated, repeated to about 1 MB: code,
// prose, logs, Unicode and emoji in realistic proportions. ENGRAM_TOKENS_BENCH
// names a file to use instead.
func benchText(b *testing.B) string {
	b.Helper()
	if path := os.Getenv("ENGRAM_TOKENS_BENCH"); path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		return string(data)
	}
	files, _ := filepath.Glob("testdata/fixtures/*")
	var sb strings.Builder
	for sb.Len() < 1<<20 {
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				b.Fatal(err)
			}
			sb.Write(data)
		}
	}
	return sb.String()
}

func benchmarkCount(b *testing.B, enc string, count func(string) int) {
	text := benchText(b)
	n := 0
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		n = count(text)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkCount measures this package's counting.
func BenchmarkCount(b *testing.B) {
	for _, enc := range Names() {
		e := MustGet(enc)
		b.Run(enc, func(b *testing.B) { benchmarkCount(b, enc, e.Count) })
	}
}

// BenchmarkCountLibrary is the baseline: tiktoken-go/tokenizer used
// directly on the same text.
func BenchmarkCountLibrary(b *testing.B) {
	for _, enc := range Names() {
		codec, err := tokenizer.Get(tokenizer.Encoding(enc))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(enc, func(b *testing.B) {
			benchmarkCount(b, enc, func(s string) int { n, _ := codec.Count(s); return n })
		})
	}
}

// longInputs are texts of size bytes that are each one long piece, and
// ordinary text of the same size (the fixtures repeated) as the baseline.
func longInputs(b *testing.B, size int) []struct{ name, text string } {
	prose := benchText(b)
	for len(prose) < size {
		prose += prose
	}
	r := rand.New(rand.NewPCG(1, 2))
	letters := make([]byte, size)
	for i := range letters {
		letters[i] = byte('a' + r.IntN(26))
	}
	return []struct{ name, text string }{
		{"text", prose[:size]},
		{"a", strings.Repeat("a", size)},
		{"equals", strings.Repeat("=", size)},
		{"spaces", strings.Repeat(" ", size)},
		{"ab", strings.Repeat("ab", size/2)},
		{"letters", string(letters)},
	}
}

// BenchmarkCountLong counts 1 and 4 MiB of one long piece (a letter, "=",
// spaces, "ab" repeated, random letters) against ordinary text of the same
// size, by backtracking (Count) and by the heap merge that long pieces
// took before.
func BenchmarkCountLong(b *testing.B) {
	e := MustGet(O200kBase)
	e.Count(strings.Repeat("a", 2*longPiece)) // the trie, built once per process
	for _, size := range []int{1 << 20, 4 << 20} {
		for _, in := range longInputs(b, size) {
			b.Run(fmt.Sprintf("%s/%dMiB", in.name, size>>20), func(b *testing.B) {
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					e.Count(in.text)
				}
			})
			if in.name == "text" || size > 1<<20 {
				continue // the heap takes seconds on 4 MiB
			}
			b.Run(fmt.Sprintf("%s/%dMiB/heap", in.name, size>>20), func(b *testing.B) {
				m := e.pool.Get().(*merger)
				defer e.pool.Put(m)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					m.nodes, m.heap = nil, nil // as a fresh merger: the pool keeps none this large
					m.mergeHeap(in.text)
				}
			})
		}
	}
}
