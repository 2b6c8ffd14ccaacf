package postgres_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/postgres"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/storetest"
)

// TestSearchParity ingests one corpus (this repository's own Go files as
// code, and its design notes as conversation) into a SQLite store and a
// PostgreSQL store, and requires the same hits of every query, in the same
// order, with the same BM25 scores and coverage: the proof that the
// PostgreSQL index ranks as FTS5 does. It runs with the default budget of
// postings and with a small one, under which common words are planned out
// and rescored, or scored in the window of the newest matches.
func TestSearchParity(t *testing.T) {
	url := database(t)
	corpus := parityCorpus(t)
	for _, budget := range []int{0, 40} {
		t.Run(fmt.Sprintf("MaxPostings=%d", budget), func(t *testing.T) {
			ctx := context.Background()
			lite, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "parity.db"),
				sqlite.Options{Search: sqlite.SearchOptions{MaxPostings: budget}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = lite.Close() })
			pg, err := postgres.Open(ctx, url, postgres.Options{Search: postgres.SearchOptions{MaxPostings: budget}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = pg.Close() })
			if budget == 0 {
				// The first run ingests; the second searches the same
				// database with another budget.
				for start := 0; start < len(corpus); start += 50 {
					batch := corpus[start:min(start+50, len(corpus))]
					for _, s := range []store.Store{lite, pg} {
						if _, err := s.PutEntries(ctx, slices.Clone(batch)); err != nil {
							t.Fatal(err)
						}
					}
				}
			} else {
				for start := 0; start < len(corpus); start += 50 {
					if _, err := lite.PutEntries(ctx, slices.Clone(corpus[start:min(start+50, len(corpus))])); err != nil {
						t.Fatal(err)
					}
				}
			}
			answered, hits := 0, 0
			for _, q := range parityQueries() {
				want, err := lite.Search(ctx, q)
				if err != nil {
					t.Fatalf("sqlite %q: %v", q.Text, err)
				}
				got, err := pg.Search(ctx, q)
				if err != nil {
					t.Fatalf("postgres %q: %v", q.Text, err)
				}
				compareHits(t, q, want, got)
				if len(want) > 0 {
					answered++
					hits += len(want)
				}
			}
			st, err := pg.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d chunks; %d of %d queries answered, %d hits compared", st.Chunks, answered, len(parityQueries()), hits)
			if answered < 30 {
				t.Errorf("only %d queries answered", answered)
			}
		})
	}
}

// compareHits requires the same hits in the same order with the same
// scores (within 1e-6, relative); hits of equal score may come in either
// order, and the last run of equal scores may be cut at another hit.
func compareHits(t *testing.T, q store.Query, want, got []store.Hit) {
	t.Helper()
	name := fmt.Sprintf("%q %+v", q.Text, q.Filter)
	if len(want) != len(got) {
		t.Errorf("%s: %d hits, want %d\n got %s\nwant %s", name, len(got), len(want), hitList(got), hitList(want))
		return
	}
	if len(want) == 0 {
		return
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(math.Abs(a), math.Abs(b)) }
	for i := range want {
		if !near(want[i].Score, got[i].Score) || !near(want[i].Coverage, got[i].Coverage) {
			t.Errorf("%s: hit %d scores %v coverage %v, want %v %v\n got %s\nwant %s", name, i,
				got[i].Score, got[i].Coverage, want[i].Score, want[i].Coverage, hitList(got), hitList(want))
			return
		}
	}
	for start := 0; start < len(want); {
		end := start + 1
		for end < len(want) && near(want[end].Score, want[start].Score) {
			end++
		}
		if end == len(want) && end-start > 1 && len(want) == q.Limit {
			break // a tie cut by the limit
		}
		w, g := hitKeys(want[start:end]), hitKeys(got[start:end])
		slices.Sort(w)
		slices.Sort(g)
		if !slices.Equal(w, g) {
			t.Errorf("%s: hits %d-%d are %v, want %v", name, start, end-1, g, w)
		}
		start = end
	}
}

func hitKeys(hits []store.Hit) []string {
	var out []string
	for _, h := range hits {
		out = append(out, fmt.Sprintf("%.12s#%d", h.Chunk.EntryID, h.Chunk.Ordinal))
	}
	return out
}

func hitList(hits []store.Hit) string {
	var b strings.Builder
	for i, h := range hits {
		fmt.Fprintf(&b, "\n  %d %.12s#%d %.9g cov %.4f seq %d", i, h.Chunk.EntryID, h.Chunk.Ordinal, h.Score, h.Coverage, h.Occurrence.Seq)
	}
	return b.String()
}

var funcName = regexp.MustCompile(`(?m)^func (?:\([^)]*\) )?(\w+)`)

// parityCorpus is a few hundred chunks: Go files of the store and terms
// packages as code files (symbols, paths), and paragraphs of DESIGN.md as
// the turns of three sessions (some short, so that they carry context).
func parityCorpus(t *testing.T) []store.Entry {
	t.Helper()
	root := filepath.Join("..", "..", "..")
	var files []string
	for _, dir := range []string{"internal/store/sqlite", "internal/terms", "internal/store/lexical"} {
		m, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	slices.Sort(files)
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var out []store.Entry
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		e := storetest.Entry("", "", store.CodeFile, string(b))
		for j := range e.Chunks {
			c := &e.Chunks[j]
			for _, m := range funcName.FindAllStringSubmatch(string(b[c.Start:c.End]), -1) {
				c.Symbols = append(c.Symbols, m[1])
			}
		}
		e.Files = []string{filepath.ToSlash(rel)}
		e.Time = base.Add(time.Duration(i) * time.Minute)
		out = append(out, e)
	}
	design, err := os.ReadFile(filepath.Join(root, "DESIGN.md"))
	if err != nil {
		t.Fatal(err)
	}
	paras := strings.Split(string(design), "\n\n")
	types := []store.ContentType{store.UserPrompt, store.AgentResponse, store.ToolResult}
	n := 0
	for _, p := range paras {
		p = strings.TrimSpace(p)
		if p == "" || n >= 300 {
			continue
		}
		if n%7 == 3 {
			p = "yes, do that" + strings.Repeat("!", n%5) // short: carries context
		}
		session := fmt.Sprintf("s%d", n%3)
		e := storetest.Entry(session, "a"+session, types[n%3], p)
		e.Time = base.Add(time.Hour + time.Duration(n)*time.Minute)
		if n%5 == 0 {
			e.Keywords = []string{"design", fmt.Sprintf("note%d", n%4)}
		}
		out = append(out, e)
		n++
	}
	for i, text := range []string{"Le café est naïve, über die Straße.", "a cafe in the naive city", "नमस्ते दुनिया, Ελληνικά κείμενα",
		"ÉCOLE élève Ωμέγα", "Crème brûlée", "İstanbul ıs Łódź"} {
		e := storetest.Entry("s9", "a9", store.UserPrompt, text)
		e.Time = base.Add(2*time.Hour + time.Duration(i)*time.Minute)
		out = append(out, e)
	}
	return out
}

func parityQueries() []store.Query {
	texts := []string{
		// identifiers and compound identifiers
		"planQuery", "docFreqs", "cappedBM25", "searchRescored", "PutEntries", "hydrate",
		"parse_http_request", "ftsTable", "SetHas", "withDefaults", "EntryCoverage", "MaxPostings budget",
		"terms.Group Parts", "rebuildFTS delete-all", "scanOccurrence occColumns",
		// plain words
		"stemming irregular verbs", "transaction retried on serialization failure", "vector search latency",
		"how are windows evicted", "sentence boost after fusion", "content addressed append only",
		"recall of the archivalist", "token budget", "diacritics folded",
		// common words
		"the", "the and of", "return err", "func error string", "if err != nil return", "store search query",
		// misc
		"nowhere-to-be-found zzzqqq", "search index postings", "yes do that",
		// other scripts and diacritics
		"café", "cafe naive", "strasse straße", "नमस्ते", "ελληνικα", "ecole eleve", "creme brulee", "istanbul lodz",
	}
	var out []store.Query
	for _, text := range texts {
		out = append(out, store.Query{Text: text, Limit: 10})
	}
	filtered := []store.Filter{
		{Types: []store.ContentType{store.CodeFile}},
		{SessionID: "s1"},
		{SessionID: "s2", TurnFrom: 3, TurnTo: 9},
		{Paths: []string{"internal/terms"}},
		{Types: []store.ContentType{store.UserPrompt, store.ToolResult}},
	}
	for i, text := range []string{"planQuery", "search query words", "the", "stem word", "token budget", "window eviction",
		"return err", "terms", "docFreqs cache", "query"} {
		out = append(out, store.Query{Text: text, Limit: 10, Filter: filtered[i%len(filtered)]})
	}
	return out
}
