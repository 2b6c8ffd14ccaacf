package retrieve

import (
	"testing"

	"github.com/engramhq/engram/internal/terms"
)

func TestSentenceCoverage(t *testing.T) {
	const query = "replaced the old toaster oven"
	qterms := terms.Content(query) // replac, old, toaster, oven (stemmed)
	c := terms.NewCounter(qterms)
	for _, tc := range []struct {
		text string
		want float64
	}{
		{"I replaced the old toaster with a toaster oven.", 1},
		// The same words spread over three sentences: the best holds two.
		{"I replaced the battery. The old toaster broke! Now I bake in the oven.", 0.5},
		{"The old toaster broke? Replaced it", 0.5},
		// A line is a sentence, as in code.
		{"func replaceOven() {\n\t// the old toaster\n}", 0.5},
		// A full stop inside a word or number does not end a sentence.
		{"Replaced v1.2 of the old toaster oven", 1},
		{"nothing about kitchens here", 0},
		{"", 0},
	} {
		if got := sentenceCoverage(c, len(qterms), tc.text); got != tc.want {
			t.Errorf("%q: %v, want %v", tc.text, got, tc.want)
		}
	}
	if got := sentenceCoverage(terms.NewCounter(nil), 0, "any text"); got != 0 {
		t.Errorf("no query terms: %v, want 0", got)
	}
}
