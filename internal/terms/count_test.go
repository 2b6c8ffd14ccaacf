package terms

import (
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestCounter checks Counter against counting every term Append makes.
func TestCounter(t *testing.T) {
	words := []string{"dying", "Dying", "yelling", "Yelling", "parsing", "parsed", "ParseHTTPRequest", "parse_http_request",
		"HTTPServer", "getURL2", "ÉCOLE", "école", "Ünïcode", "naïve", "x", "id", "IDs", "the", "a1b2", "__init__",
		"retry", "Retries", "retrying", "backoff", "jitter", "ctx", "Context", "CONTEXT", "ß", "straße", "İstanbul", "ǅemal", "kelvin", "\u212Aelvin",
		"went", "Went", "go", "ate", "eat", "bought", "buy", "children", "lying", "tying", "aed", "oed", "a", "o", "Yes", "ugly", "skies"}
	r := rand.New(rand.NewPCG(7, 8))
	for range 300 {
		var b strings.Builder
		for range 1 + r.IntN(40) {
			b.WriteString(words[r.IntN(len(words))])
			b.WriteString([]string{" ", ", ", ".", "\n", "(", "/"}[r.IntN(6)])
		}
		text := b.String()
		all := map[string]int{}
		for _, term := range strings.Fields(String(text)) {
			all[term]++
		}
		// Want some of the terms that occur, and some that do not.
		var want []string
		for term := range all {
			if r.IntN(3) == 0 {
				want = append(want, term)
			}
		}
		want = append(want, "zzz", "éco", "dye")
		c := NewCounter(want)
		got := c.Count(text)
		for range 2 { // the second call must not see the first's terms
			if d := c.Distinct(text); d != len(got) {
				t.Fatalf("text %q, want %v: Distinct %d, Count found %d", text, want, d, len(got))
			}
			if d := c.Distinct("zzz"); d != 1 {
				t.Fatalf("Distinct(zzz) = %d after %q", d, text)
			}
		}
		exp := map[string]int{}
		for _, w := range want {
			if n := all[w]; n > 0 {
				exp[w] = n
			}
		}
		if !maps.Equal(got, exp) {
			t.Fatalf("text %q, want %v:\ngot  %v\nwant %v", text, want, got, exp)
		}
	}
	if got := NewCounter(nil).Count("anything at all"); len(got) != 0 {
		t.Errorf("no terms wanted: %v", got)
	}
}

// BenchmarkCounter counts a question's terms in a long chat turn, as
// search does for each candidate.
func BenchmarkCounter(b *testing.B) {
	text := strings.Repeat("I'm looking for some advice on cleaning and maintaining my antique furniture. "+
		"I recently acquired a beautiful vintage armchair from the flea market, and I went there with my sister "+
		"last Saturday. By the way, she gave me a silver necklace for my birthday, which was really thoughtful. ", 8)
	q := Query("I received a piece of jewelry last Saturday from whom?")
	var want []string
	for _, g := range q {
		if !g.Stop {
			want = append(want, g.Whole)
		}
	}
	c := NewCounter(want)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		c.Count(text)
	}
}
