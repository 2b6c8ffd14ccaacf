package assemble

import "testing"

// TestFailures: a fallback summary's maker gives back its count of the
// model's failures; any other maker none.
func TestFailures(t *testing.T) {
	for n := 1; n <= maxSummaryTries+1; n++ {
		if got := failures(fallbackBy(n)); got != n {
			t.Errorf("failures(%q) = %d, want %d", fallbackBy(n), got, n)
		}
	}
	for _, by := range []string{Extractive, "gpt-4o-mini", "", "extractive, model failed often"} {
		want := 0
		if by == "extractive, model failed often" {
			want = 1 // a fallback, its count unreadable
		}
		if got := failures(by); got != want {
			t.Errorf("failures(%q) = %d, want %d", by, got, want)
		}
	}
}
