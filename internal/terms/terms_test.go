package terms

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		// Wholes are kept; words and parts are stemmed.
		{"parseHTTPRequest", "parsehttprequest pars http request"},
		{"parse_http_request", "parsehttprequest pars http request"},
		{"ParseHTTPRequest", "parsehttprequest pars http request"},
		{"PARSE_HTTP_REQUEST", "parsehttprequest pars http request"},
		{"parsing parsed parses", "pars pars pars"},
		// Irregular forms index as their base form's stem.
		{"I bought it; buy, buying", "i buy it buy buy"},
		{"spent spend caught Children child", "spend spend catch child child"},
		{"boughtItems", "boughtitems buy item"},
		// Forms that are more often another word are kept.
		{"the SAT and LED lights", "the sat and led light"},
		{"__init__", "init"},
		{"sha256Sum Int64Value utf8", "sha256sum sha256 sum int64value int64 valu utf8"},
		{"internal/store/sqlite/search.go:42", "intern store sqlite search go 42"},
		{"Hello, world!", "hello world"},
		{"Straße ÉCOLE naïveté", "straße école naïveté"},
		{"getÉcoleName", "getécolename get école name"},
		{"中文 上下文", "中文 上下文"},
		{"a___b", "ab a b"},
		{"___", ""},
		{strings.Repeat("x", MaxWordBytes+1) + " ok", "ok"},
		{"", ""},
	} {
		if got := String(tc.in); got != tc.want {
			t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestQuery(t *testing.T) {
	got := Query(`parseHTTPRequest "parse" NEAR(x) parsing -y* the store.go`)
	want := []Group{
		{Whole: "parsehttprequest", Parts: []string{"pars", "http", "request"}},
		{Whole: "pars"},
		{Whole: "near"},
		{Whole: "x"},
		{Whole: "y"},
		{Whole: "the", Stop: true},
		{Whole: "store"},
		{Whole: "go"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Query mismatch (-want +got):\n%s", diff)
	}
	got = Query("How many plants have I bought, and how much were they?")
	want = []Group{
		{Whole: "how", Stop: true}, {Whole: "mani", Stop: true}, {Whole: "plant"}, {Whole: "have", Stop: true},
		{Whole: "i", Stop: true}, {Whole: "buy"}, {Whole: "and", Stop: true}, {Whole: "much", Stop: true},
		{Whole: "were", Stop: true}, {Whole: "they", Stop: true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("question's Query mismatch (-want +got):\n%s", diff)
	}
	var b strings.Builder
	for i := range 100000 {
		b.WriteString("w")
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString(string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676%26)) + " ")
	}
	if n := len(Query(b.String())); n != MaxQueryGroups {
		t.Errorf("huge query: %d groups, want %d", n, MaxQueryGroups)
	}
}

func FuzzAppend(f *testing.F) {
	f.Add("parseHTTPRequest(ctx, r *http.Request)")
	f.Add("__x__ ÉÉé ǅa 1A2b")
	f.Fuzz(func(t *testing.T, s string) {
		out := String(s)
		if strings.Contains(out, "  ") || strings.HasPrefix(out, " ") || strings.HasSuffix(out, " ") {
			t.Fatalf("String(%q) = %q: bad spacing", s, out)
		}
		for _, w := range strings.Fields(out) {
			if strings.ContainsAny(w, "_") {
				t.Fatalf("String(%q) has term %q with an underscore", s, w)
			}
		}
		for _, g := range Query(s) {
			if g.Whole == "" || len(g.Parts) == 1 {
				t.Fatalf("Query(%q): bad group %+v", s, g)
			}
			if len(g.Parts) > 1 && strings.Contains(g.Whole, " ") {
				t.Fatalf("Query(%q): whole %q holds a space", s, g.Whole)
			}
		}
	})
}
