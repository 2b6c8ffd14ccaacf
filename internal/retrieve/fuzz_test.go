package retrieve_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store"
)

// FuzzHybridSearch asks a real store anything, in every mode, through
// filters made of the same input: whatever the text (FTS5 syntax, time
// phrases, identifiers, control bytes), a search returns hits that keep
// its filter, never an error; a filter no path can match (a NUL byte) is
// refused as invalid.
func FuzzHybridSearch(f *testing.F) {
	for _, seed := range []struct {
		text, path string
		turns      int
	}{
		{"mutex contention", "", 0},
		{"mutex Drain", "internal/queue", 0},
		{"ranking postings", "*rank*.go", 0},
		{"note deadlock channel", "", 40},
		{`"unterminated`, "internal/queue", 0},
		{"NEAR(a b, 3) AND -x OR col:val*", "*.go", 2},
		{"what did I say about the deadlock last Tuesday?", "", 40},
		{"ScoreQuery(q) queue.go", "internal/[a-", 0},
		{"(( ^ {} \x00 \xff ::", "cmd/*/main.go", -3},
		{"a week ago", "", 0},
		{"ranking", "*\x00", 0},
	} {
		f.Add(seed.text, seed.path, seed.turns)
	}
	fx := newFixture(f)
	h := retrieve.NewHybrid(fx.st, fx.emb, retrieve.Options{Deadline: unhurried})
	now := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, text, pathFilter string, turns int) {
		for _, mode := range []retrieve.Mode{retrieve.ModeHybrid, retrieve.ModeLexical, retrieve.ModeVector} {
			q := retrieve.Query{Text: text, Mode: mode, Limit: 20, Now: now}
			if pathFilter != "" {
				q.Filter.Paths = []string{pathFilter}
			}
			if turns > 0 {
				q.Filter.TurnTo = turns
			}
			res, err := h.Search(context.Background(), q)
			if verr := q.Filter.Validate(); verr != nil {
				var ve *store.ValidationError
				if !errors.As(err, &ve) {
					t.Fatalf("Search(paths %q): %v, want the filter's error: %v", pathFilter, err, verr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Search(%q, paths %q, turns to %d, %s): %v", text, pathFilter, turns, mode, err)
			}
			if len(res.Hits) > q.Limit {
				t.Errorf("%d hits over the limit %d", len(res.Hits), q.Limit)
			}
			for _, hit := range res.Hits {
				if q.Filter.TurnTo > 0 && hit.Occurrence.Turn > q.Filter.TurnTo {
					t.Errorf("%s: a hit at turn %d through a filter to turn %d", mode, hit.Occurrence.Turn, q.Filter.TurnTo)
				}
				if pathFilter != "" && !anyFileMatches(hit.Occurrence.Files, pathFilter) {
					t.Errorf("%s: a hit on %q through a filter on %q", mode, hit.Occurrence.Files, pathFilter)
				}
			}
		}
	})
}

// anyFileMatches restates store.Filter.Paths' rule: a file matches a
// path as itself or under it at a slash, or a pattern with * or ? as
// SQLite's GLOB does (* also matches slashes). A pattern with a bracket
// class is not checked: it would mean restating GLOB's class syntax.
func anyFileMatches(files []string, p string) bool {
	if strings.Contains(p, "[") {
		return true
	}
	var re strings.Builder
	re.WriteString("^")
	for _, r := range p {
		switch r {
		case '*':
			re.WriteString("(?s:.*)")
		case '?':
			re.WriteString("(?s:.)")
		default:
			re.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	re.WriteString("$")
	glob := regexp.MustCompile(re.String())
	dir := strings.TrimSuffix(p, "/")
	for _, file := range files {
		if strings.ContainsAny(p, "*?") {
			if glob.MatchString(file) {
				return true
			}
		} else if file == dir || strings.HasPrefix(file, dir+"/") {
			return true
		}
	}
	return false
}
