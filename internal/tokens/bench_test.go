package tokens

import (
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
