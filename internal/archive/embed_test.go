package archive

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/embed"
	"github.com/engramhq/engram/internal/embed/lsa"
)

// corpusEmbedder trains engram's offline corpus model on text in which
// words of one topic occur together, so that it learns they are related.
func corpusEmbedder(t *testing.T) embed.Embedder {
	t.Helper()
	topics := [][]string{
		{"jwt", "token", "expiry", "session", "login", "credential", "refresh"},
		{"sql", "query", "database", "index", "migration", "table", "orm"},
		{"goroutine", "channel", "mutex", "deadlock", "race", "lock", "concurrent"},
	}
	r := rand.New(rand.NewPCG(1, 2))
	var texts []string
	for range 600 {
		topic := slices.Clone(topics[r.IntN(len(topics))])
		r.Shuffle(len(topic), func(i, j int) { topic[i], topic[j] = topic[j], topic[i] })
		texts = append(texts, strings.Join(topic[:5], " "))
	}
	c, err := embed.TrainCorpus(texts, lsa.Options{Dim: 8, MinDF: 1, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRecallWithVectors(t *testing.T) {
	ctx := context.Background()
	// The toy model's cosine of the question with its answer (0.26) is
	// a fifth of the way from the records' mean (0.07) to an exact match,
	// under the relevance floor's third: with the floor, nothing found.
	// The ranking by vectors is what this test is about.
	a, _ := newArchive(t, Options{Embedder: corpusEmbedder(t), RelevanceFloor: -1})
	h := register(t, a, AgentSpec{ID: "o1", SessionID: "s1"})
	ok(t)(h.RecordInsight(ctx, Insight{Insight: "refresh the jwt before expiry"}))
	ok(t)(h.RecordInsight(ctx, Insight{Insight: "a missing index made the migration slow"}))
	ok(t)(h.RecordInsight(ctx, Insight{Insight: "the mutex around the channel caused a deadlock"}))
	// No word of the question is in the answer: only the vector signal
	// can find it.
	ans, err := a.Ask(ctx, nil, "@arch:recall:learnings?q=credential session login", AskOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(ans[0].Signals, "vector") || len(ans[0].Records) == 0 || !strings.Contains(ans[0].Records[0].Text(), "jwt") {
		t.Fatalf("recall with vectors: signals %v, records %v", ans[0].Signals, texts(ans[0].Records))
	}
}

func texts(rs []Record) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Text())
	}
	return out
}

func TestDedupByEmbedding(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t, Options{Embedder: corpusEmbedder(t)})
	h := register(t, a, AgentSpec{ID: "o1", SessionID: "s1"})
	first := ok(t)(h.RecordPattern(ctx, Pattern{Category: "concurrency.locks", Pattern: "take the mutex before the channel send"}))
	// Trigram similarity in the borderline band; the same topic by
	// embedding: merged by the embedding stage.
	wr := ok(t)(h.RecordPattern(ctx, Pattern{Category: "concurrency.locks", Pattern: "take the lock before the channel send"}))
	sim := trigramSimilarity("take the mutex before the channel send", "take the lock before the channel send")
	if sim <= DefaultSuspect || sim > DefaultTrigram {
		t.Fatalf("test texts not borderline: trigram similarity %.2f", sim)
	}
	if wr.Status != "merged" || wr.Merged.Method != "embedding" || wr.ID != first.ID {
		t.Errorf("borderline duplicate: %+v (trigram %.2f)", wr, sim)
	}
	// A borderline text on another topic stays apart.
	other := ok(t)(h.RecordPattern(ctx, Pattern{Category: "concurrency.locks", Pattern: fmt.Sprintf("take the %s before the %s send", "index", "sql")}))
	if other.Status != "created" {
		t.Errorf("different topic merged: %+v", other)
	}
}

// TestDedupByEmbedding_InOneRequest: the embedding stage settles a
// borderline duplicate of a store earlier in the same request, as it
// does one stored by an earlier request.
func TestDedupByEmbedding_InOneRequest(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t, Options{Embedder: corpusEmbedder(t)})
	h := register(t, a, AgentSpec{ID: "o1", SessionID: "s1"})
	ans, err := a.Ask(ctx, h, `@arch:store:pattern{"category":"concurrency.locks","pattern":"take the mutex before the channel send"}; `+
		`@arch:store:pattern{"category":"concurrency.locks","pattern":"take the lock before the channel send"}; `+
		`@arch:store:pattern{"category":"concurrency.locks","pattern":"take the index before the sql send"}`, AskOptions{})
	if err != nil || len(ans) != 3 {
		t.Fatalf("Ask = %+v, %v", ans, err)
	}
	first := ans[0].Write
	if w := ans[1].Write; w.Status != "merged" || w.Merged.Method != "embedding" || w.ID != first.ID {
		t.Errorf("borderline duplicate of the request's first store: %+v; want merged into %s by embedding", w, first.ID)
	}
	if w := ans[2].Write; w.Status != "created" {
		t.Errorf("a borderline text on another topic: %+v; want created", w)
	}
}
