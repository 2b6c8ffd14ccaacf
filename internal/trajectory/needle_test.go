package trajectory

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// needleRE is the README's expression. Go's regexp matches leftmost-first
// as Python's re does, but its \d and \b are ASCII: on ASCII text the two
// agree.
var needleRE = regexp.MustCompile(`[A-Za-z0-9_./\-]*[/.][A-Za-z0-9_./\-]+|[A-Za-z_][A-Za-z0-9_]{5,}|\b\d{3,}\b`)

func needlesOf(text string) []string {
	got := []string{}
	Needles(text, func(s string) { got = append(got, s) })
	return got
}

func TestNeedles(t *testing.T) {
	// Expected: Python's NEEDLE.findall, filtered as baselines.py filters.
	tests := []struct {
		text string
		want []string
	}{
		{"see django/db/models/query.py line 1234 in get_queryset()", []string{"django/db/models/query.py", "1234", "get_queryset"}},
		{"a.b ab.c x..y .hidden ./run.sh ../up/x -rf -m.py 12.5 1.2.3 abc.d", []string{"ab.c", "x..y", "-m.py", "12.5", "1.2.3", "abc.d"}},
		{"abcd12345 1234abcdefg 999 12 é1234 1234é ١٢٣٤ x١٢٣٤ 12345_ _12345 12345-6789", []string{"abcd12345", "abcdefg", "١٢٣٤", "_12345", "12345", "6789"}},
		{"foo_bar_baz __init__ self.assertEqual(x) ab/ /usr/bin/env 1111111111a", []string{"foo_bar_baz", "__init__", "self.assertEqual", "/usr/bin/env"}},
		{"version 3.11.7 and 2024 and 0xdeadbeef and path/to/ x/", []string{"version", "3.11.7", "2024", "xdeadbeef", "path/to/"}},
		{"a/b\nc.d e\tf/g", []string{}},
		{"x.", []string{}},
		{"x.y.", []string{"x.y."}},
		{".x.y", []string{}},
		{"ß12345 Σ_abcdef αβγδεζ_1 _aé123456", []string{"_abcdef"}},
		{"1234١٢ 12٣ ²1234 1234²", []string{"1234١٢"}},
		{"aaaaaaaaaaaaaaaaaaaaaaaaa.", []string{"aaaaaaaaaaaaaaaaaaaaaaaaa"}},
		{"--------a/b", []string{"--------a/b"}},
		{"", []string{}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, needlesOf(tt.text)); diff != "" {
			t.Errorf("Needles(%q) mismatch (-want +got):\n%s", tt.text, diff)
		}
	}
}

// TestNeedles_Linear checks that long runs of path characters without a
// separator, which a backtracking matcher scans again from every position,
// take linear time.
func TestNeedles_Linear(t *testing.T) {
	text := strings.Repeat("1-", 1<<20) + "x"
	n := 0
	Needles(text, func(string) { n++ })
	if n != 0 {
		t.Errorf("%d needles in a run without a separator", n)
	}
}

func TestPyStrip(t *testing.T) {
	for in, want := range map[string]string{
		"  a b \t\r":          "a b",
		"\x1c\x1fx\x1d":       "x",
		"\u00a0\u2003x\u3000": "x",
		"\u200bx":             "\u200bx", // zero width space is not space to Python
		"":                    "",
	} {
		if got := pyStrip(in); got != want {
			t.Errorf("pyStrip(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzNeedles checks the scanner against Go's regexp on ASCII text, where
// their semantics agree, and that every needle is a needle of the text.
func FuzzNeedles(f *testing.F) {
	f.Add("see django/db/models/query.py line 1234 in get_queryset()")
	f.Add("a.b ab.c x..y .hidden ./run.sh ../up/x -rf -m.py 12.5 1.2.3")
	f.Add("abcd12345 1234abcdefg 999 12 é1234 1234é ١٢٣٤ 12345-6789")
	f.Fuzz(func(t *testing.T, text string) {
		got := needlesOf(text)
		for _, n := range got {
			if !strings.Contains(text, n) || strings.HasPrefix(n, ".") || utf8.RuneCountInString(n) < 4 || strings.Contains(n, "\n") {
				t.Fatalf("Needles(%q) gave %q", text, n)
			}
		}
		for _, c := range []byte(text) {
			if c >= utf8.RuneSelf {
				return
			}
		}
		want := []string{}
		for _, m := range needleRE.FindAllString(text, -1) {
			if len(m) >= 4 && m[0] != '.' {
				want = append(want, m)
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("Needles(%q) differs from the regexp (-want +got):\n%s", text, diff)
		}
	})
}
