package api

import (
	"strings"
	"testing"
)

// TestLineDiff: a unified diff with three lines of context, hunks joined
// when their context meets, counts of lines added and removed, and the
// last line without a line break marked.
func TestLineDiff(t *testing.T) {
	lines := func(n int, change map[int]string) string {
		var b strings.Builder
		for i := 1; i <= n; i++ {
			if s, ok := change[i]; ok {
				b.WriteString(s)
				continue
			}
			b.WriteString("line " + string(rune('a'+i%26)) + "\n")
		}
		return b.String()
	}
	for _, c := range []struct {
		name           string
		a, b           string
		want           string
		added, removed int
	}{
		{"same", "x\ny\n", "x\ny\n", "", 0, 0},
		{"one changed", lines(10, nil), lines(10, map[int]string{5: "five\n"}),
			"--- A\n+++ B\n@@ -2,7 +2,7 @@\n line c\n line d\n line e\n-line f\n+five\n line g\n line h\n line i\n", 1, 1},
		{"two hunks", lines(20, map[int]string{2: "", 19: ""}), lines(20, nil),
			"--- A\n+++ B\n@@ -1,4 +1,5 @@\n line b\n+line c\n line d\n line e\n line f\n@@ -15,4 +16,5 @@\n line q\n line r\n line s\n+line t\n line u\n", 2, 0},
		{"joined", lines(12, map[int]string{3: "three\n", 9: "nine\n"}), lines(12, nil),
			"--- A\n+++ B\n@@ -1,12 +1,12 @@\n line b\n line c\n-three\n+line d\n line e\n line f\n line g\n line h\n line i\n-nine\n+line j\n line k\n line l\n line m\n", 2, 2},
		{"appended without a line break", "x\n", "x\ny", "--- A\n+++ B\n@@ -1 +1,2 @@\n x\n+y\n\\ No newline at end of file\n", 1, 0},
		{"from nothing", "", "x\n", "--- A\n+++ B\n@@ -0,0 +1 @@\n+x\n", 1, 0},
	} {
		got, added, removed := lineDiff("A", "B", c.a, c.b)
		if got != c.want || added != c.added || removed != c.removed {
			t.Errorf("%s: +%d -%d\n%s\nwant +%d -%d\n%s", c.name, added, removed, got, c.added, c.removed, c.want)
		}
	}
}
