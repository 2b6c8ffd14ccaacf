package retrieve_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

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
	ctx := context.Background()
	st := sqlitetest.Open(t, sqlite.Options{})
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	then := storetest.Entry("s-then", "user", store.UserPrompt, "I tried to cook a mushroom risotto for Sam and his friend")
	then.Time = now.Add(-50 * time.Hour)
	entries := []store.Entry{then}
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
	q := retrieve.Query{Text: "What did I cook for my friend a couple of days ago?", Mode: retrieve.ModeLexical, Limit: 10, Now: now}
	rank := func(res retrieve.Result) int {
		return slices.IndexFunc(res.Hits, func(h retrieve.Hit) bool { return strings.Contains(h.Chunk.Text, "risotto") })
	}

	res := search(t, retrieve.NewHybrid(st, nil, retrieve.Options{}), q)
	if res.Span == nil || res.Span.Phrase != "a couple of days ago" || !res.Span.Contains(then.Time) {
		t.Fatalf("span %v, want one holding %v", res.Span, then.Time)
	}
	// The best match from then ranks level with the best overall, and
	// is newer.
	if r := rank(res); r != 0 {
		t.Fatalf("the risotto is at %d, want first", r)
	}
	if !slices.Contains(res.Hits[0].Boosts, "time") {
		t.Errorf("boosts %v, want time", res.Hits[0].Boosts)
	}

	off := search(t, retrieve.NewHybrid(st, nil, retrieve.Options{TimeBoost: -1}), q)
	if off.Span != nil || rank(off) >= 0 {
		t.Errorf("time phrases off: span %v, risotto at %d; want neither", off.Span, rank(off))
	}
	bounded := q
	bounded.Filter.Since = now.Add(-365 * 24 * time.Hour)
	if res := search(t, retrieve.NewHybrid(st, nil, retrieve.Options{}), bounded); res.Span != nil {
		t.Errorf("a filter bounding the time: span %v, want none", res.Span)
	}
}
