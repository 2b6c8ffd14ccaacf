package retrieve_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
)

// ids returns the chunk IDs of hits, in order.
func ids(hits []retrieve.Hit) []int64 {
	out := make([]int64, len(hits))
	for i, h := range hits {
		out[i] = h.Chunk.ID
	}
	return out
}

// TestRankingDoesNotDependOnTheLimit: the first k hits are the same for
// every limit above k, in every mode, with a small Depth so that the larger
// limits need deeper tiers of candidates; and a limit beyond the first tier
// still gets as many hits as the store has candidates for.
func TestRankingDoesNotDependOnTheLimit(t *testing.T) {
	f := newFixture(t)
	h := retrieve.NewHybrid(f.st, f.emb, retrieve.Options{Deadline: unhurried, Depth: 8})
	for _, mode := range []retrieve.Mode{retrieve.ModeLexical, retrieve.ModeVector, retrieve.ModeHybrid} {
		for _, text := range []string{"mutex deadlock", "the ranking of a query", "rollout"} {
			var prev []int64
			for _, limit := range []int{3, 8, 25, 200} {
				res := search(t, h, retrieve.Query{Text: text, Limit: limit, Mode: mode})
				got := ids(res.Hits)
				if len(got) > limit {
					t.Fatalf("%s %q limit %d: %d hits", mode, text, limit, len(got))
				}
				if k := min(len(prev), len(got)); !slices.Equal(prev[:k], got[:k]) {
					t.Errorf("%s %q: the first %d hits at limit %d differ from those at the limit before:\n%v\n%v", mode, text, k, limit, prev[:k], got[:k])
				}
				if limit == 25 && len(got) < 25 {
					t.Errorf("%s %q: limit 25 beyond a depth of 8 got only %d hits", mode, text, len(got))
				}
				prev = got
			}
		}
	}
}

// TestStagesOff: a stage named in Options.Off leaves the ranking as the
// stage's weight switched off does, and an unknown name is refused.
func TestStagesOff(t *testing.T) {
	f := newFixture(t)
	q := retrieve.Query{Text: "queue.Drain under the mutex", Mode: retrieve.ModeLexical}
	on := search(t, retrieve.NewHybrid(f.st, nil, retrieve.Options{Deadline: unhurried}), q)
	if len(on.Hits) == 0 || !slices.Contains(on.Hits[0].Boosts, retrieve.StageSymbol) {
		t.Fatalf("the symbol stage should raise queue.Drain: %v", provenances(on.Hits))
	}
	off := search(t, retrieve.NewHybrid(f.st, nil, retrieve.Options{Deadline: unhurried, Off: []string{retrieve.StageSymbol}}), q)
	weightless := search(t, retrieve.NewHybrid(f.st, nil, retrieve.Options{Deadline: unhurried, SymbolBoost: -1}), q)
	for _, hit := range off.Hits {
		if slices.Contains(hit.Boosts, retrieve.StageSymbol) {
			t.Fatalf("symbol stage off, yet a hit carries its boost: %v", hit.Boosts)
		}
	}
	if !slices.Equal(ids(off.Hits), ids(weightless.Hits)) {
		t.Errorf("Off and a zero weight should rank alike:\n%v\n%v", ids(off.Hits), ids(weightless.Hits))
	}
	if off.Hits[0].Score >= on.Hits[0].Score {
		t.Errorf("without the boost the best score should be lower: %v >= %v", off.Hits[0].Score, on.Hits[0].Score)
	}
	// The time stage off reads no time phrase, as a negative TimeBoost.
	back := retrieve.Query{Text: "the mutex a week ago", Mode: retrieve.ModeLexical}
	if res := search(t, retrieve.NewHybrid(f.st, nil, retrieve.Options{Deadline: unhurried}), back); res.Span == nil {
		t.Error("a week ago: no span read")
	}
	if res := search(t, retrieve.NewHybrid(f.st, nil, retrieve.Options{Deadline: unhurried, Off: []string{retrieve.StageTime}}), back); res.Span != nil {
		t.Errorf("time stage off, yet a span was read: %v", res.Span)
	}
	if err := retrieve.CheckStages(retrieve.Stages()); err != nil {
		t.Fatal(err)
	}
	err := retrieve.CheckStages([]string{"sentence", "symbols"})
	if err == nil || err.Error() != fmt.Sprintf("unknown search stage %q (want one of %s)", "symbols", "sentence, file-coverage, symbol, path, hot, time, ancillary, distractor, speaker, file-evidence") {
		t.Errorf("CheckStages: %v", err)
	}
}

// TestSearchPlaces: ten places are ten distinct files even where each
// file holds many of the best chunks, each with at most the spans asked
// for, best first, in the order of the plain search's hits.
func TestSearchPlaces(t *testing.T) {
	st := sqlitetest.Open(t, sqlite.Options{})
	srcs := map[string]string{}
	for f := range 14 {
		var b strings.Builder
		fmt.Fprintf(&b, "package up\n\n")
		for i := range 8 {
			fmt.Fprintf(&b, "// Retry%d%d backs off with jitter before the upload retries.\nfunc Retry%d%d() {\n", f, i, f, i)
			for l := range 40 {
				fmt.Fprintf(&b, "\tx%d := %d // filler\n", l, l)
			}
			b.WriteString("}\n\n")
		}
		srcs[fmt.Sprintf("up/f%02d.go", f)] = b.String()
	}
	putFiles(t, st, srcs)
	h := retrieve.NewHybrid(st, nil, retrieve.Options{Deadline: unhurried})
	q := retrieve.Query{Text: "upload retries back off with jitter", Mode: retrieve.ModeLexical, Limit: 10}
	plain := search(t, h, q)
	files := map[string]bool{}
	for _, hit := range plain.Hits {
		files[hit.Occurrence.Files[0]] = true
	}
	if len(files) >= 10 {
		t.Fatalf("the fixture should crowd ten hits into fewer files: %d", len(files))
	}
	res, places, err := h.SearchPlaces(context.Background(), q, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(places) != 10 {
		t.Fatalf("%d places, want 10", len(places))
	}
	seen := map[string]bool{}
	for i, p := range places {
		if seen[p.Key] || !strings.HasPrefix(p.Key, "up/f") {
			t.Errorf("place %d: %q twice or not a file", i, p.Key)
		}
		seen[p.Key] = true
		if len(p.Hits) == 0 || len(p.Hits) > 2 || p.Score != p.Hits[0].Score {
			t.Errorf("place %s: %d spans, score %v", p.Key, len(p.Hits), p.Score)
		}
		if i > 0 && p.Score > places[i-1].Score {
			t.Errorf("place %d scores above the one before", i)
		}
	}
	if places[0].Hits[0].Chunk.ID != plain.Hits[0].Chunk.ID {
		t.Errorf("the first place should hold the first hit")
	}
	if want := retrieve.Places(res.Hits, 2)[:10]; !slices.EqualFunc(want, places, func(a, b retrieve.Place) bool { return a.Key == b.Key }) {
		t.Errorf("places are not the grouping of the hits")
	}
}

// TestDistractors: the code a question is about ranks above its test and
// the changelog that paraphrases it, though both repeat its words more
// often; a query that asks for the test or the changelog gets it first;
// with the stage off, the distractors win (the fixture is a real one).
func TestDistractors(t *testing.T) {
	st := sqlitetest.Open(t, sqlite.Options{})
	srcs := map[string]string{
		"net/http/cookie.go": "package http\n\n// readSetCookies parses all \"Set-Cookie\" values from the header h.\nfunc readSetCookies(h Header) []*Cookie {\n\tcookieCount := len(h[\"Set-Cookie\"])\n\tif cookieCount == 0 {\n\t\treturn []*Cookie{}\n\t}\n\tcookies := make([]*Cookie, 0, cookieCount)\n\tfor _, line := range h[\"Set-Cookie\"] {\n\t\tparts := strings.Split(textproto.TrimString(line), \";\")\n\t\tif len(parts) == 1 && parts[0] == \"\" {\n\t\t\tcontinue\n\t\t}\n\t\tparts[0] = textproto.TrimString(parts[0])\n\t\tname, value, ok := strings.Cut(parts[0], \"=\")\n\t\tif !ok {\n\t\t\tcontinue\n\t\t}\n\t\tcookies = append(cookies, &Cookie{Name: name, Value: value})\n\t}\n\treturn cookies\n}\n",
		"net/http/cookie_test.go": "package http\n\n// TestReadSetCookies checks readSetCookies: read set cookies from a header.\nfunc TestReadSetCookies(t *testing.T) {\n\t" +
			"h := Header{\"Set-Cookie\": {\"a=b\"}} // a header to read set cookies from\n\treadSetCookies(h)\n}\n",
		"CHANGELOG.md": "# Changes\n\n- readSetCookies: read Set-Cookie header values; read set cookies no longer drops cookies with a header.\n",
	}
	for i, topic := range []string{"parses the config file", "formats a log line", "sorts the results", "hashes a password",
		"writes the header", "reads the body", "sets the deadline", "reads a request header", "sets a cookie jar"} {
		srcs[fmt.Sprintf("misc/f%d.go", i)] = fmt.Sprintf("package misc\n\n// F%d %s.\nfunc F%d() {}\n", i, topic, i)
	}
	putFiles(t, st, srcs)
	first := func(opts retrieve.Options, text string) string {
		t.Helper()
		opts.Deadline = unhurried
		res := search(t, retrieve.NewHybrid(st, nil, opts), retrieve.Query{Text: text, Mode: retrieve.ModeLexical})
		if len(res.Hits) == 0 {
			t.Fatalf("%q: no hits", text)
		}
		return res.Hits[0].Occurrence.Files[0]
	}
	off := retrieve.Options{Off: []string{retrieve.StageDistractor}}
	if got := first(off, "read set cookies header"); got == "net/http/cookie.go" {
		res := search(t, retrieve.NewHybrid(st, nil, retrieve.Options{Deadline: unhurried, Off: off.Off}), retrieve.Query{Text: "read set cookies header", Mode: retrieve.ModeLexical})
		t.Fatalf("with the stage off the fixture should rank a distractor first, got %s: %v", got, provenances(res.Hits))
	}
	for q, want := range map[string]string{
		"read set cookies header":            "net/http/cookie.go",
		"readSetCookies":                     "net/http/cookie.go",
		"the test for readSetCookies":        "net/http/cookie_test.go",
		"changelog entry for readSetCookies": "CHANGELOG.md",
	} {
		if got := first(retrieve.Options{}, q); got != want {
			res := search(t, retrieve.NewHybrid(st, nil, retrieve.Options{Deadline: unhurried}), retrieve.Query{Text: q, Mode: retrieve.ModeLexical})
			t.Errorf("%q: first %s, want %s: %v", q, got, want, provenances(res.Hits))
		}
	}
}
