package retrieve_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/rerank"
	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/store/storetest"
)

// TestTimeSpan: a question that points back in time ("a couple of days
// ago") finds what was said then, even when sixty older messages match its
// words better and would fill the candidates; with time phrases off, or
// with the time already bounded by the filter, it does not.
func TestTimeSpan(t *testing.T) {
	st, now, then := timeFixture(t)
	q := retrieve.Query{Text: "What did I cook for my friend a couple of days ago?", Mode: retrieve.ModeLexical, Limit: 10, Now: now}

	res := search(t, retrieve.NewHybrid(st, nil, retrieve.Options{Deadline: unhurried}), q)
	if res.Span == nil || res.Span.Phrase != "a couple of days ago" || !res.Span.Contains(then) {
		t.Fatalf("span %v, want one holding %v", res.Span, then)
	}
	// The best match from then ranks level with the best overall, and
	// is newer.
	if r := risotto(res); r != 0 {
		t.Fatalf("the risotto is at %d, want first", r)
	}
	if !slices.Contains(res.Hits[0].Boosts, "time") {
		t.Errorf("boosts %v, want time", res.Hits[0].Boosts)
	}

	off := search(t, retrieve.NewHybrid(st, nil, retrieve.Options{Deadline: unhurried, TimeBoost: -1}), q)
	if off.Span != nil || risotto(off) >= 0 {
		t.Errorf("time phrases off: span %v, risotto at %d; want neither", off.Span, risotto(off))
	}
	bounded := q
	bounded.Filter.Since = now.Add(-365 * 24 * time.Hour)
	if res := search(t, retrieve.NewHybrid(st, nil, retrieve.Options{Deadline: unhurried}), bounded); res.Span != nil {
		t.Errorf("a filter bounding the time: span %v, want none", res.Span)
	}
}

// TestTimePhraseNotSearched: the words that point back in time are not
// searched for, as the span stands for them: a message that shares only
// them with the question is not a hit, unless time phrases are off or the
// span holds nothing.
func TestTimePhraseNotSearched(t *testing.T) {
	st, now, _ := timeFixture(t)
	e := storetest.Entry("s-bike", "user", store.UserPrompt, "it took a couple of days to fix the bike")
	e.Time = now.Add(-40 * 24 * time.Hour)
	if _, err := st.PutEntries(t.Context(), []store.Entry{e}); err != nil {
		t.Fatal(err)
	}
	bike := func(res retrieve.Result) bool {
		return slices.ContainsFunc(res.Hits, func(h retrieve.Hit) bool { return strings.Contains(h.Chunk.Text, "bike") })
	}
	q := retrieve.Query{Text: "What did I cook for my friend a couple of days ago?", Mode: retrieve.ModeLexical, Limit: 100, Now: now}
	if res := search(t, retrieve.NewHybrid(st, nil, retrieve.Options{Deadline: unhurried}), q); res.Span == nil || bike(res) {
		t.Errorf("span %v; the message about the bike is a hit: %v", res.Span, bike(res))
	}
	if off := search(t, retrieve.NewHybrid(st, nil, retrieve.Options{Deadline: unhurried, TimeBoost: -1}), q); !bike(off) {
		t.Error("time phrases off: the phrase's words should be searched like the rest")
	}
	// Asked years later, the span holds nothing and stands for nothing:
	// the words are searched.
	later := q
	later.Now = now.AddDate(5, 0, 0)
	if res := search(t, retrieve.NewHybrid(st, nil, retrieve.Options{Deadline: unhurried}), later); res.Span == nil || !bike(res) {
		t.Errorf("an empty span %v: the phrase's words should be searched", res.Span)
	}
}

// TestTimeSpanRerank: with a re-ranker, the relevance of what was said
// then counts 1 + TimeBoost times, so a fair match from then outranks a
// better one from another time; with time phrases off it does not.
func TestTimeSpanRerank(t *testing.T) {
	st, now, _ := timeFixture(t)
	srv := &rerankServer{}
	srv.want.Store("pasta")
	srv.scores.Store([2]float64{0.8, 0.45}) // the pasta evenings 0.8, the risotto 0.45
	hs := httptest.NewServer(srv)
	defer hs.Close()
	rr, err := rerank.New(rerank.Options{URL: hs.URL + "/v1", Model: "rerank-test", Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	q := retrieve.Query{Text: "What did I cook for my friend a couple of days ago?", Mode: retrieve.ModeHybrid, Limit: 10, Now: now}
	res := search(t, retrieve.NewHybrid(st, nil, retrieve.Options{Deadline: unhurried, Reranker: rr}), q)
	if !res.Reranked || risotto(res) != 0 {
		t.Errorf("reranked %v, the risotto at %d; want first (0.45 x 2 against 0.8)", res.Reranked, risotto(res))
	}
	off := search(t, retrieve.NewHybrid(st, nil, retrieve.Options{Deadline: unhurried, Reranker: rr, TimeBoost: -1}), q)
	if !off.Reranked || risotto(off) == 0 {
		t.Errorf("time phrases off: reranked %v, the risotto at %d; want below the pasta", off.Reranked, risotto(off))
	}
}

// risotto is the rank of the message from then among a result's hits, -1
// if it is not there.
func risotto(res retrieve.Result) int {
	return slices.IndexFunc(res.Hits, func(h retrieve.Hit) bool { return strings.Contains(h.Chunk.Text, "risotto") })
}

// timeFixture stores a message from fifty hours before now about cooking
// a risotto, sixty older ones about cooking that match a question about
// cooking better, and other talk.
func timeFixture(t *testing.T) (st *sqlite.Store, now, then time.Time) {
	t.Helper()
	ctx := context.Background()
	st = sqlitetest.Open(t, sqlite.Options{})
	now = time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	e := storetest.Entry("s-then", "user", store.UserPrompt, "I tried to cook a mushroom risotto for Sam and his friend")
	e.Time = now.Add(-50 * time.Hour)
	entries := []store.Entry{e}
	for i := range 60 {
		e := storetest.Entry(fmt.Sprintf("s%d", i), "user", store.UserPrompt,
			fmt.Sprintf("my friend likes to cook, so we cook pasta together on evening %d", i))
		e.Time = now.Add(-time.Duration(30+i) * 24 * time.Hour)
		entries = append(entries, e)
	}
	// Other talk, so that cooking is not every message's topic.
	for i := range 200 {
		e := storetest.Entry(fmt.Sprintf("o%d", i), "user", store.UserPrompt,
			fmt.Sprintf("the train to the office was late again on morning %d", i))
		e.Time = now.Add(-time.Duration(i) * 6 * time.Hour)
		entries = append(entries, e)
	}
	if _, err := st.PutEntries(ctx, entries); err != nil {
		t.Fatal(err)
	}
	return st, now, e.Time
}
