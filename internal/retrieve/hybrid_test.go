package retrieve_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/embed"
	"github.com/engramhq/engram/internal/embed/lsa"
	"github.com/engramhq/engram/internal/index"
	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/store/storetest"
)

// topics are the vocabularies of the test corpus: each note uses words of
// one topic, and only co-occurrence across notes tells which words belong
// together.
var topics = [][]string{
	{"goroutine", "channel", "mutex", "deadlock", "select", "waitgroup", "semaphore", "contention"},
	{"index", "query", "posting", "ranking", "token", "stemmer", "tokenizer", "relevance"},
	{"deploy", "cluster", "container", "rollout", "replica", "ingress", "kubernetes", "helm"},
}

type fixture struct {
	st  *sqlite.Store
	emb *embed.Corpus
}

// newFixture stores notes on the topics in two sessions, and two Go files,
// trains a corpus model on it all and embeds every chunk.
func newFixture(t testing.TB) *fixture {
	t.Helper()
	ctx := context.Background()
	st := sqlitetest.Open(t, sqlite.Options{})
	// One topic after another, as conversations go: a note's context (the
	// note before it in its session) is on its topic.
	var entries []store.Entry
	for i := range 240 {
		w := topics[i/80]
		text := fmt.Sprintf("note %d: the %s and the %s near a %s", i, w[i%8], w[(i+3)%8], w[(i+5)%8])
		session := fmt.Sprintf("s%d-%d", i%2+1, i/80) // two sessions per topic
		e := storetest.Entry(session, "agent", store.Note, text)
		e.Time = time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC)
		entries = append(entries, e)
	}
	if _, err := st.PutEntries(ctx, entries); err != nil {
		t.Fatal(err)
	}
	putFiles(t, st, map[string]string{
		"internal/queue/queue.go": "package queue\n\n// Drain empties the queue under the mutex.\nfunc Drain(q *Queue) {\n\tq.mu.Lock()\n\tdefer q.mu.Unlock()\n}\n",
		"internal/rank/rank.go":   "package rank\n\n// ScoreQuery ranks postings for a query.\nfunc ScoreQuery(q string) float64 {\n\treturn 0\n}\n",
	})
	var texts []string
	for after := int64(0); ; {
		cs, err := st.PendingChunks(ctx, "training", after, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) == 0 {
			break
		}
		for _, c := range cs {
			texts = append(texts, embed.Text(c))
		}
		after = cs[len(cs)-1].ID
	}
	emb, err := embed.TrainCorpus(texts, lsa.Options{Dim: 8})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&embed.Worker{Store: st, Embedder: emb}).Run(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return &fixture{st: st, emb: emb}
}

func search(t *testing.T, h *retrieve.Hybrid, q retrieve.Query) retrieve.Result {
	t.Helper()
	res, err := h.Search(context.Background(), q)
	if err != nil {
		t.Fatalf("Search(%q): %v", q.Text, err)
	}
	return res
}

func topicOf(text string) int {
	for i, words := range topics {
		for _, w := range words {
			if strings.Contains(text, w) {
				return i
			}
		}
	}
	return -1
}

func TestHybridSignalsAndModes(t *testing.T) {
	f := newFixture(t)
	h := retrieve.NewHybrid(f.st, f.emb, retrieve.Options{Deadline: unhurried})
	res := search(t, h, retrieve.Query{Text: "deadlock", Limit: 20})
	if !res.Lexical || !res.Vector || res.Degraded {
		t.Fatalf("backends: %+v", res)
	}
	both := 0
	for _, hit := range res.Hits {
		if hit.LexicalRank > 0 && hit.VectorRank > 0 {
			both++
		}
		if hit.Vector <= 0 {
			t.Errorf("hit %q has no cosine", hit.Chunk.Text)
		}
	}
	if both == 0 {
		t.Error("no hit has both signals")
	}
	// Notes of the topic without the query's word are found by vector
	// search alone, and the topic's notes come before anything off it. (A
	// cosine floor would not do: the two code files share their words, and
	// queue.go's "mutex" is on the topic, so rank.go is a little similar.)
	vec := search(t, h, retrieve.Query{Text: "deadlock", Limit: 100, Mode: retrieve.ModeVector})
	withoutWord, offTopic := 0, false
	for _, hit := range vec.Hits {
		if topicOf(hit.Chunk.Text) != 0 {
			offTopic = true
			continue
		}
		if offTopic && hit.Occurrence.Type == store.Note {
			t.Errorf("a note on the topic ranks below one off it: %q", hit.Chunk.Text)
		}
		if !strings.Contains(hit.Chunk.Text, "deadlock") {
			withoutWord++
		}
	}
	if withoutWord == 0 || vec.Lexical {
		t.Errorf("vector mode: %d hits without the word; lexical answered %v", withoutWord, vec.Lexical)
	}
	// Lexical mode: the word in the note, or in its context (the note
	// before it in its session).
	lex := search(t, h, retrieve.Query{Text: "deadlock", Limit: 30, Mode: retrieve.ModeLexical})
	for i, hit := range lex.Hits {
		if topicOf(hit.Chunk.Text) != 0 || hit.VectorRank != 0 || lex.Vector {
			t.Errorf("lexical mode hit %q (vector rank %d)", hit.Chunk.Text, hit.VectorRank)
		}
		if i == 0 && !strings.Contains(hit.Chunk.Text, "deadlock") {
			t.Errorf("top lexical hit %q lacks the word", hit.Chunk.Text)
		}
	}
	// Fused order is stable.
	again := search(t, h, retrieve.Query{Text: "deadlock", Limit: 20})
	for i := range res.Hits {
		if res.Hits[i].Chunk.ID != again.Hits[i].Chunk.ID {
			t.Fatalf("order differs at %d", i)
		}
	}
	// Both fusions work.
	for _, fu := range []retrieve.Fusion{retrieve.RRF, retrieve.Weighted} {
		hw := retrieve.NewHybrid(f.st, f.emb, retrieve.Options{Deadline: unhurried, Fusion: retrieve.FuseOptions{Method: fu}})
		if r := search(t, hw, retrieve.Query{Text: "rollout ingress"}); len(r.Hits) == 0 || topicOf(r.Hits[0].Chunk.Text) != 2 {
			t.Errorf("%s: top hit %+v", fu, r.Hits)
		}
	}
}

func TestHybridFiltersAndBoosts(t *testing.T) {
	f := newFixture(t)
	h := retrieve.NewHybrid(f.st, f.emb, retrieve.Options{Deadline: unhurried})
	res := search(t, h, retrieve.Query{Text: "mutex contention", Limit: 40, Filter: store.Filter{SessionID: "s2-0"}})
	if len(res.Hits) == 0 {
		t.Fatal("no hits in session s2-0")
	}
	for _, hit := range res.Hits {
		if hit.Occurrence.SessionID != "s2-0" {
			t.Errorf("hit from session %q through a filter on s2-0 (ranks %d/%d)", hit.Occurrence.SessionID, hit.LexicalRank, hit.VectorRank)
		}
	}
	res = search(t, h, retrieve.Query{Text: "mutex", Filter: store.Filter{Paths: []string{"internal/queue"}}})
	if len(res.Hits) != 1 || res.Hits[0].Occurrence.Files[0] != "internal/queue/queue.go" {
		t.Errorf("path filter: %+v", res.Hits)
	}
	// Naming a symbol or a path raises the chunk that declares it.
	res = search(t, h, retrieve.Query{Text: "ScoreQuery ranking"})
	if len(res.Hits) == 0 || !slices.Contains(res.Hits[0].Boosts, "symbol") || res.Hits[0].Occurrence.Files[0] != "internal/rank/rank.go" {
		t.Errorf("symbol boost: %+v", res.Hits[:min(2, len(res.Hits))])
	}
	res = search(t, h, retrieve.Query{Text: "queue.go mutex"})
	if len(res.Hits) == 0 || !slices.Contains(res.Hits[0].Boosts, "path") {
		t.Errorf("path boost: %+v", res.Hits[:min(2, len(res.Hits))])
	}
}

func TestHybridHostileQueries(t *testing.T) {
	f := newFixture(t)
	h := retrieve.NewHybrid(f.st, f.emb, retrieve.Options{Deadline: unhurried})
	for _, q := range []string{"", "   \n\t", `"`, "*", "NEAR(a b)", "-x", "((", "AND OR NOT", "col:val",
		strings.Repeat("deadlock ", 12000), strings.Repeat("x", 100<<10)} {
		if _, err := h.Search(context.Background(), retrieve.Query{Text: q}); err != nil {
			t.Errorf("Search(%.30q): %v", q, err)
		}
	}
	if res := search(t, h, retrieve.Query{Text: "  "}); len(res.Hits) != 0 {
		t.Errorf("blank query: %d hits", len(res.Hits))
	}
	if _, err := h.Search(context.Background(), retrieve.Query{Text: "x", Mode: "fuzzy"}); err == nil {
		t.Error("unknown mode accepted")
	}
	lexOnly := retrieve.NewHybrid(f.st, nil, retrieve.Options{Deadline: unhurried})
	if _, err := lexOnly.Search(context.Background(), retrieve.Query{Text: "x", Mode: retrieve.ModeVector}); err == nil {
		t.Error("vector mode without an embedder accepted")
	}
	if res := search(t, lexOnly, retrieve.Query{Text: "deadlock"}); len(res.Hits) == 0 || res.Vector || res.Degraded {
		t.Errorf("lexical only: %+v", res)
	}
}

// faulty is an embedder that misbehaves in one way, as a remote provider
// can.
type faulty struct {
	embed.Embedder
	mode  string
	calls int
}

func (f *faulty) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	f.calls++
	switch f.mode {
	case "error":
		return nil, errors.New("HTTP 500: internal error")
	case "timeout":
		<-ctx.Done()
		return nil, ctx.Err()
	case "dimension":
		return [][]float32{{1, 2}}, nil
	case "nan":
		v := make([]float32, f.Dim())
		v[0] = float32(math.NaN())
		return [][]float32{v}, nil
	}
	return f.Embedder.Embed(ctx, texts)
}

func TestHybridDegradesWhenTheEmbedderFails(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	before, err := f.st.VectorStats(ctx, f.emb.Model())
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"error", "timeout", "dimension", "nan"} {
		t.Run(mode, func(t *testing.T) {
			emb := &faulty{Embedder: f.emb, mode: mode}
			h := retrieve.NewHybrid(f.st, emb, retrieve.Options{Deadline: 100 * time.Millisecond, BreakerFailures: 2, BreakerCooldown: time.Hour})
			for i := range 4 {
				res := search(t, h, retrieve.Query{Text: "deadlock mutex"})
				if len(res.Hits) == 0 || !res.Lexical || res.Vector || !res.Degraded || len(res.Faults) != 1 {
					t.Fatalf("search %d: %d hits, lexical %v vector %v degraded %v faults %q", i, len(res.Hits), res.Lexical, res.Vector, res.Degraded, res.Faults)
				}
				if i >= 2 && !strings.Contains(res.Faults[0], "circuit open") {
					t.Errorf("search %d: fault %q, want an open circuit", i, res.Faults[0])
				}
			}
			if emb.calls != 2 {
				t.Errorf("%d embedder calls, want 2 before the circuit opened", emb.calls)
			}
			c := h.Counters()
			if c.Searches != 4 || c.Degraded != 4 || c.VectorFaults != 2 {
				t.Errorf("counters %+v", c)
			}
			if _, vb := h.Breakers(); !vb.Open || vb.Trips != 1 {
				t.Errorf("vector breaker %+v", vb)
			}
		})
	}
	after, err := f.st.VectorStats(ctx, f.emb.Model())
	if err != nil || after != before {
		t.Errorf("stored vectors changed: %+v -> %+v (%v)", before, after, err)
	}
}

// failingSearch is a store whose full-text search fails, to test the
// degradation of the lexical backend; everything else is the real store.
type failingSearch struct{ store.Store }

func (failingSearch) Search(context.Context, store.Query) ([]store.Hit, error) {
	return nil, errors.New("disk I/O error")
}

func TestHybridLexicalFailureAndHotTier(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	h := retrieve.NewHybrid(failingSearch{f.st}, f.emb, retrieve.Options{Deadline: unhurried})
	res := search(t, h, retrieve.Query{Text: "deadlock"})
	if res.Lexical || !res.Vector || !res.Degraded || len(res.Hits) == 0 {
		t.Fatalf("lexical down: %+v", res)
	}
	// With no backend at all, the hot tier answers from memory.
	none := retrieve.NewHybrid(failingSearch{f.st}, nil, retrieve.Options{Deadline: unhurried})
	if _, err := none.Search(ctx, retrieve.Query{Text: "helm rollout"}); err == nil {
		t.Fatal("no backend and nothing hot: no error")
	}
	good := retrieve.NewHybrid(f.st, f.emb, retrieve.Options{Deadline: unhurried})
	top := search(t, good, retrieve.Query{Text: "helm rollout", Limit: 3})
	if err := good.Used(ctx, []int64{top.Hits[2].Chunk.ID}); err != nil {
		t.Fatal(err)
	}
	none = retrieve.NewHybrid(failingSearch{f.st}, nil, retrieve.Options{Deadline: unhurried}) // a process started after the use
	res = search(t, none, retrieve.Query{Text: "helm rollout"})
	if len(res.Hits) != 1 || res.Hits[0].Chunk.ID != top.Hits[2].Chunk.ID || !res.Degraded {
		t.Fatalf("hot tier: %+v", res)
	}
	// In a full search the used chunk gets the hot boost.
	res = search(t, good, retrieve.Query{Text: "helm rollout", Limit: 10})
	for _, hit := range res.Hits {
		if hit.Chunk.ID == top.Hits[2].Chunk.ID && !slices.Contains(hit.Boosts, "hot") {
			t.Errorf("used chunk not boosted: %+v", hit)
		}
	}
}

func TestPrefetch(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	// The fusion engram uses with the corpus model (engine.CorpusFusion):
	// the seed's vector-heavy weights trust this tiny model too much.
	h := retrieve.NewHybrid(f.st, f.emb, retrieve.Options{Deadline: unhurried, Fusion: retrieve.FuseOptions{Method: retrieve.Weighted, LexicalWeight: 0.8, VectorWeight: 0.2}})
	count := func(s string) int { return len(strings.Fields(s)) }
	// No floor and a wide budget: the tiers fill to their caps.
	b, err := h.Prefetch(ctx, "ScoreQuery ranking postings", 100000, retrieve.PrefetchOptions{
		ExcerptThreshold: 1e-9, ConfidenceThreshold: 1e-9, MinSignal: 1e-9, MinCoverage: -1, MaxExcerpts: 2}, count)
	if err != nil {
		t.Fatal(err)
	}
	if b.Budget != 10000 || len(b.Excerpts) != 2 || len(b.Hints) != 3 || b.Tokens > b.Budget || b.SingleSignal {
		t.Fatalf("block: budget %d, %d excerpts, %d hints, %d tokens, single %v", b.Budget, len(b.Excerpts), len(b.Hints), b.Tokens, b.SingleSignal)
	}
	if !strings.HasPrefix(b.Text, "[AUTO-RETRIEVED: internal/rank/rank.go:1-6 | confidence: ") || !strings.Contains(b.Text, "```go\npackage rank") {
		t.Errorf("first excerpt:\n%s", b.Text)
	}
	if strings.Count(b.Text, "[RELATED: ") != 3 {
		t.Errorf("hints:\n%s", b.Text)
	}
	// A small budget: excerpts are cut at line ends to fit.
	small, err := h.Prefetch(ctx, "ScoreQuery ranking postings", 0, retrieve.PrefetchOptions{Budget: 30,
		ExcerptThreshold: 1e-9, ConfidenceThreshold: 1e-9, MinSignal: 1e-9, MinCoverage: -1, MaxHints: -1}, count)
	if err != nil {
		t.Fatal(err)
	}
	if small.Tokens > 30 || len(small.Excerpts) == 0 || small.Excerpts[0].Lines >= 6 || !strings.Contains(small.Text, "[more: engram show internal/rank/rank.go]") {
		t.Errorf("small budget (%d tokens):\n%s", small.Tokens, small.Text)
	}
	// The defaults: a query the store can answer gets the code first; one
	// it cannot, over the relevance floor, gets nothing ("nothing found"
	// is an answer).
	def, err := h.Prefetch(ctx, "ScoreQuery ranking postings", 100000, retrieve.PrefetchOptions{}, count)
	if err != nil {
		t.Fatal(err)
	}
	if len(def.Excerpts) == 0 || !strings.HasPrefix(def.Text, "[AUTO-RETRIEVED: internal/rank/rank.go:1-6") {
		t.Errorf("defaults, an answerable query:\n%s", def.Text)
	}
	for _, q := range []string{"quokka marsupial island ferry", "the postings of a quokka on a ferry to the island"} {
		none, err := h.Prefetch(ctx, q, 100000, retrieve.PrefetchOptions{}, count)
		if err != nil {
			t.Fatal(err)
		}
		if none.Text != "" {
			t.Errorf("defaults, %q (not in the store): injected\n%s", q, none.Text)
		}
		loose, err := h.Prefetch(ctx, q, 100000, retrieve.PrefetchOptions{MinCoverage: -1, MinSignal: -1}, count)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(q, "postings") && loose.Text == "" {
			t.Errorf("without the floor, %q should inject its least bad match", q)
		}
	}
	// One backend: the raised floor applies.
	lexOnly := retrieve.NewHybrid(f.st, nil, retrieve.Options{Deadline: unhurried})
	one, err := lexOnly.Prefetch(ctx, "ScoreQuery ranking postings", 100000, retrieve.PrefetchOptions{}, count)
	if err != nil {
		t.Fatal(err)
	}
	if !one.SingleSignal || len(one.Excerpts) == 0 {
		t.Errorf("lexical only: single-signal %v, %d excerpts", one.SingleSignal, len(one.Excerpts))
	}
	if b, err := h.Prefetch(ctx, "   ", 100000, retrieve.PrefetchOptions{}, count); err != nil || b.Text != "" {
		t.Errorf("blank query: %+v, %v", b, err)
	}
}

func TestPrefetchPackedAndNoRecord(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	h := retrieve.NewHybrid(f.st, f.emb, retrieve.Options{Deadline: unhurried})
	count := func(s string) int { return len(strings.Fields(s)) }
	// Packed: no thresholds, no per-tier caps, excerpts only, more
	// candidates; and the access record left alone.
	packed := retrieve.PrefetchOptions{Budget: 100000, ExcerptThreshold: 1e-9, ConfidenceThreshold: 1e-9, MinSignal: -1,
		MaxExcerpts: 1000, MaxHints: -1, ExcerptShare: 1, Candidates: 50, NoRecord: true}
	b, err := h.Prefetch(ctx, "helm rollout", 0, packed, count)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Excerpts) <= retrieve.DefaultMaxExcerpts || len(b.Hints) != 0 || b.Tokens > b.Budget {
		t.Fatalf("packed: %d excerpts, %d hints, %d tokens", len(b.Excerpts), len(b.Hints), b.Tokens)
	}
	// Nothing joined the hot tier: a process with no backend finds nothing.
	none := retrieve.NewHybrid(failingSearch{f.st}, nil, retrieve.Options{Deadline: unhurried})
	if _, err := none.Search(ctx, retrieve.Query{Text: "helm rollout"}); err == nil {
		t.Fatal("NoRecord: the excerpts were recorded as used")
	}
	packed.NoRecord = false
	if _, err := h.Prefetch(ctx, "helm rollout", 0, packed, count); err != nil {
		t.Fatal(err)
	}
	none = retrieve.NewHybrid(failingSearch{f.st}, nil, retrieve.Options{Deadline: unhurried})
	if res, err := none.Search(ctx, retrieve.Query{Text: "helm rollout"}); err != nil || len(res.Hits) == 0 {
		t.Fatalf("injected excerpts not hot: %+v, %v", res, err)
	}
}

// TestPrefetchWithinBudget: whatever the budget and however the tiers
// share it, the whole block, with the line breaks that join its parts,
// holds no more tokens than the budget.
func TestPrefetchWithinBudget(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	h := retrieve.NewHybrid(f.st, f.emb, retrieve.Options{Deadline: unhurried})
	// Every line break is a token, as it is for o200k_base.
	count := func(s string) int { return len(strings.Fields(s)) + strings.Count(s, "\n") }
	for _, opts := range []retrieve.PrefetchOptions{
		{ExcerptThreshold: 1e-9, ConfidenceThreshold: 1e-9, MinSignal: -1, MaxExcerpts: 1000, MaxHints: -1, ExcerptShare: 1, Candidates: 50},
		{ExcerptThreshold: 1e-9, ConfidenceThreshold: 1e-9, MinSignal: -1, ExcerptShare: 0.5, HintShare: 0.5},
	} {
		for budget := 10; budget <= 400; budget += 7 {
			opts.Budget, opts.NoRecord = budget, true
			b, err := h.Prefetch(ctx, "helm rollout", 0, opts, count)
			if err != nil {
				t.Fatal(err)
			}
			if b.Tokens > budget {
				t.Fatalf("budget %d (shares %.1f/%.1f): the block holds %d tokens:\n%s", budget, opts.ExcerptShare, opts.HintShare, b.Tokens, b.Text)
			}
		}
	}
}

func TestConfidence(t *testing.T) {
	hit := retrieve.Hit{Vector: 0.9, Score: 0.4}
	hit.Coverage = 1
	if c, ok := retrieve.Confidence(hit, retrieve.Best{Score: 0.5}, true, true, 0.5); !ok || math.Abs(c-0.9) > 1e-9 {
		t.Errorf("both, standing 0.8: %v %v", c, ok)
	}
	if c, ok := retrieve.Confidence(hit, retrieve.Best{Score: 0.4}, true, true, 0.5); !ok || math.Abs(c-(1+0.9+1)/3) > 1e-9 {
		t.Errorf("both, the best hit: %v %v", c, ok)
	}
	// A hit far behind the best (demoted as the other speaker, say) is
	// not confident, whatever its signals.
	if c, _ := retrieve.Confidence(hit, retrieve.Best{Score: 2}, true, true, 0.5); c >= 0.85 {
		t.Errorf("a fifth of the best score: confidence %v", c)
	}
	hit.Coverage = 0.4
	if _, ok := retrieve.Confidence(hit, retrieve.Best{Score: 0.4}, true, true, 0.5); ok {
		t.Error("weak lexical support passed multi-signal validation")
	}
	if c, ok := retrieve.Confidence(hit, retrieve.Best{Score: 0.4}, false, true, 0.5); !ok || math.Abs(c-0.95) > 1e-9 {
		t.Errorf("vector only: %v %v", c, ok)
	}
	if c, ok := retrieve.Confidence(hit, retrieve.Best{Score: 0}, true, false, 0.5); !ok || math.Abs(c-0.2) > 1e-9 {
		t.Errorf("lexical only, no best score: %v %v", c, ok)
	}
	// A re-ranked hit stands where the re-ranker puts it against the best
	// re-ranked hit, not where its fused score would.
	hit.Reranked, hit.Rerank = true, 0.35
	if c, ok := retrieve.Confidence(hit, retrieve.Best{Score: 2, Rerank: 0.5}, false, true, 0.5); !ok || math.Abs(c-0.8) > 1e-9 {
		t.Errorf("re-ranked, vector only: %v %v", c, ok)
	}
	if b := retrieve.BestOf([]retrieve.Hit{{Score: 0.5}, hit, {Score: 0.7}}); b != (retrieve.Best{Score: 0.7, Rerank: 0.35}) {
		t.Errorf("BestOf = %+v", b)
	}
}

// slowSearch is a store whose full-text search takes a while, as under
// load: the real store behind a delay.
type slowSearch struct {
	store.Store
	delay time.Duration
}

func (s slowSearch) Search(ctx context.Context, q store.Query) ([]store.Hit, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Store.Search(ctx, q)
}

// TestHybridSlowAloneIsWaitedFor: the deadline cuts off a slow backend
// only when another has answered. A slow lexical search without an
// embedder, or one that answers after a failing embedder, is waited for,
// and counts as no fault.
func TestHybridSlowAloneIsWaitedFor(t *testing.T) {
	f := newFixture(t)
	slow := slowSearch{f.st, 60 * time.Millisecond}
	for name, emb := range map[string]embed.Embedder{"no embedder": nil, "failing embedder": &faulty{Embedder: f.emb, mode: "error"}} {
		h := retrieve.NewHybrid(slow, emb, retrieve.Options{Deadline: 10 * time.Millisecond})
		res := search(t, h, retrieve.Query{Text: "deadlock mutex"})
		if len(res.Hits) == 0 || !res.Lexical {
			t.Errorf("%s: %d hits, lexical %v, faults %q", name, len(res.Hits), res.Lexical, res.Faults)
		}
		if c := h.Counters(); c.LexicalFaults != 0 {
			t.Errorf("%s: counters %+v after a slow search", name, c)
		}
	}
	// With a healthy embedder answering first, the slow lexical search is
	// cut off at the deadline and the answer says why.
	h := retrieve.NewHybrid(slowSearch{f.st, time.Second}, f.emb, retrieve.Options{Deadline: 20 * time.Millisecond})
	start := time.Now()
	res := search(t, h, retrieve.Query{Text: "deadlock mutex"})
	if !res.Vector || res.Lexical || !res.Degraded || len(res.Faults) != 1 || !strings.Contains(res.Faults[0], "deadline") {
		t.Errorf("slow lexical beside vectors: lexical %v vector %v faults %q", res.Lexical, res.Vector, res.Faults)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("the search waited %v for a backend past the deadline", d)
	}
}

// TestSpeakerPrior: a question about what the asker said ranks their own
// message first, one about what the agent said the agent's, whichever
// matches the words better; keywords leave the ranking alone.
func TestSpeakerPrior(t *testing.T) {
	ctx := context.Background()
	st := sqlitetest.Open(t, sqlite.Options{})
	user := storetest.Entry("s1", "user", store.UserPrompt, "the deadline for the upload service is friday")
	agent := storetest.Entry("s1", "agent", store.AgentResponse, "the upload deadline: friday works for the upload service")
	// Weaker matches, so that the weighted merge's normalization leaves
	// both messages above zero.
	notes := []store.Entry{user, agent}
	for i := range 4 {
		notes = append(notes, storetest.Entry("s2", "agent", store.Note,
			fmt.Sprintf("note %d: a deadline passed while the team reviewed the design of the queue, the cache and the scheduler", i)))
	}
	if _, err := st.PutEntries(ctx, notes); err != nil {
		t.Fatal(err)
	}
	first := func(opts retrieve.Options, q string) store.ContentType {
		t.Helper()
		res := search(t, retrieve.NewHybrid(st, nil, opts), retrieve.Query{Text: q, Mode: retrieve.ModeLexical})
		if len(res.Hits) != len(notes) {
			t.Fatalf("%q: %d hits", q, len(res.Hits))
		}
		return res.Hits[0].Occurrence.Type
	}
	if got := first(retrieve.Options{Deadline: unhurried, SpeakerPrior: 1}, "upload deadline"); got != store.AgentResponse {
		t.Fatalf("without the prior the agent's message should match better, got %s first", got)
	}
	for _, c := range []struct {
		q    string
		want store.ContentType
	}{
		{"upload deadline", store.AgentResponse},
		{"what did I say the upload deadline was?", store.UserPrompt},
		{"which upload deadline did you suggest?", store.AgentResponse},
	} {
		if got := first(retrieve.Options{Deadline: unhurried}, c.q); got != c.want {
			t.Errorf("%q: %s first, want %s", c.q, got, c.want)
		}
	}
}

// TestNamedSpeaker: a question naming one of the speakers ranks that
// speaker's messages first; naming both, or neither, changes nothing.
func TestNamedSpeaker(t *testing.T) {
	ctx := context.Background()
	st := sqlitetest.Open(t, sqlite.Options{})
	entries := []store.Entry{
		storetest.Entry("s1", "Caroline", store.AgentMessage, "I love the sunrise you painted last week, it is a lovely painting"),
		storetest.Entry("s1", "Melanie", store.AgentMessage, "I painted a sunrise over the lake"),
	}
	for i := range 4 {
		entries = append(entries, storetest.Entry("s2", "Dave", store.Note,
			fmt.Sprintf("note %d: at sunrise the lake was calm while the team reviewed the design of the queue and the cache", i)))
	}
	if _, err := st.PutEntries(ctx, entries); err != nil {
		t.Fatal(err)
	}
	first := func(opts retrieve.Options, q string) string {
		t.Helper()
		res := search(t, retrieve.NewHybrid(st, nil, opts), retrieve.Query{Text: q, Mode: retrieve.ModeLexical})
		if len(res.Hits) == 0 {
			t.Fatalf("%q: no hits", q)
		}
		return res.Hits[0].Occurrence.AgentID
	}
	off := retrieve.Options{Deadline: unhurried, SpeakerPrior: 1}
	for _, q := range []string{"When has Melanie painted a sunrise painting?", "Did Caroline and Melanie talk about the painted sunrise painting?"} {
		if got := first(off, q); got != "Caroline" {
			t.Fatalf("%q: without the prior Caroline's message should match better, got %s first", q, got)
		}
	}
	if got := first(retrieve.Options{Deadline: unhurried}, "When has Melanie painted a sunrise painting?"); got != "Melanie" {
		t.Errorf("naming Melanie: %s first", got)
	}
	if got := first(retrieve.Options{Deadline: unhurried}, "Did Caroline and Melanie talk about the painted sunrise painting?"); got != "Caroline" {
		t.Errorf("naming both: %s first", got)
	}
}

// TestFileEvidence: a file that matches a query in several chunks ranks
// above a file that matches once a little better; only its best chunk is
// raised, and a negative weight turns it off.
func TestFileEvidence(t *testing.T) {
	st := sqlitetest.Open(t, sqlite.Options{})
	funcs := func(n int, body func(i int) string) string {
		var b strings.Builder
		b.WriteString("package p\n")
		for i := range n {
			fmt.Fprintf(&b, "\n// F%d %s\nfunc F%d() {\n", i, body(i), i)
			for j := range 30 {
				fmt.Fprintf(&b, "\tx%d := %d // filler line\n", j, j)
			}
			b.WriteString("}\n")
		}
		return b.String()
	}
	srcs := map[string]string{
		"single/single.go": funcs(4, func(i int) string {
			if i == 0 {
				return "waits for the retry backoff, then the retry backoff again"
			}
			return "formats the report"
		}),
		"multi/multi.go": funcs(4, func(i int) string { return "computes the retry backoff" }),
	}
	for i := range 4 {
		srcs[fmt.Sprintf("other/o%d.go", i)] = funcs(2, func(int) string { return "logs the retry and then formats the report" })
	}
	putFiles(t, st, srcs)
	q := retrieve.Query{Text: "retry backoff", Mode: retrieve.ModeLexical, Limit: 20}
	res := search(t, retrieve.NewHybrid(st, nil, retrieve.Options{Deadline: unhurried, FileEvidence: -1}), q)
	if len(res.Hits) == 0 || res.Hits[0].Occurrence.Files[0] != "single/single.go" {
		t.Fatalf("without file evidence the single strong chunk should rank first: %v", provenances(res.Hits))
	}
	perFile := 0
	for _, hit := range res.Hits {
		if hit.Occurrence.Files[0] == "multi/multi.go" {
			perFile++
		}
	}
	if perFile < 3 {
		t.Fatalf("multi.go should match in several chunks: %v", provenances(res.Hits))
	}
	// At 0.2: the default (0.05) is set by engram eval, where file
	// coverage carries most of what a file's other chunks say.
	res = search(t, retrieve.NewHybrid(st, nil, retrieve.Options{Deadline: unhurried, FileEvidence: 0.2}), q)
	if len(res.Hits) < 2 || res.Hits[0].Occurrence.Files[0] != "multi/multi.go" || res.Hits[1].Occurrence.Files[0] != "single/single.go" {
		t.Fatalf("with file evidence at 0.2 multi.go's best chunk should rank first, single.go's next: %v", provenances(res.Hits))
	}
	raised := map[string]int{}
	for _, hit := range res.Hits {
		if slices.Contains(hit.Boosts, "file") {
			raised[hit.Occurrence.Files[0]]++
		}
	}
	if raised["multi/multi.go"] != 1 || raised["single/single.go"] != 0 {
		t.Errorf("only the best chunk of a file matching more than once is raised: %v", raised)
	}
}

// TestFileCoverage: a file that holds two of a query's words in one
// function and the third in the next ranks above a file whose one function
// holds the two more often; a negative weight turns that off. The other
// whole-file signal, file evidence, and the sentence boost are off, so that
// only coverage tells the files apart.
func TestFileCoverage(t *testing.T) {
	st := sqlitetest.Open(t, sqlite.Options{})
	funcs := func(comments ...string) string {
		var b strings.Builder
		b.WriteString("package p\n")
		for i, c := range comments {
			fmt.Fprintf(&b, "\n// F%d %s\nfunc F%d() {\n", i, c, i)
			for j := range 30 {
				fmt.Fprintf(&b, "\tx%d := %d // filler line\n", j, j)
			}
			b.WriteString("}\n")
		}
		return b.String()
	}
	srcs := map[string]string{
		"wide/wide.go":     funcs("waits out the retry backoff", "adds jitter to the wait", "formats the report"),
		"narrow/narrow.go": funcs("computes the retry backoff, doubling the backoff", "formats the report", "parses the config"),
	}
	// Files that mention a retry in passing, and files about other things.
	for i, topic := range []string{"hashes a password", "sorts the results", "renders a template", "logs a line"} {
		srcs[fmt.Sprintf("other/o%d.go", i)] = funcs(topic+" and the retry count", "opens the file")
	}
	for i, topic := range []string{"parses a flag", "reads a header", "closes the pool", "trims a name"} {
		srcs[fmt.Sprintf("more/m%d.go", i)] = funcs(topic)
	}
	putFiles(t, st, srcs)
	q := retrieve.Query{Text: "retry backoff jitter", Mode: retrieve.ModeLexical, Limit: 20}
	first := func(o retrieve.Options) string {
		t.Helper()
		o.FileEvidence, o.SentenceBoost = -1, -1
		res := search(t, retrieve.NewHybrid(st, nil, o), q)
		if len(res.Hits) == 0 {
			t.Fatal("no hits")
		}
		t.Logf("file coverage %v: %v", o.FileCoverage, provenances(res.Hits))
		return res.Hits[0].Occurrence.Files[0]
	}
	if got := first(retrieve.Options{Deadline: unhurried, FileCoverage: -1}); got != "narrow/narrow.go" {
		t.Errorf("without file coverage the chunk holding two words most often should rank first, not %s", got)
	}
	if got := first(retrieve.Options{Deadline: unhurried, FileCoverage: 1}); got != "wide/wide.go" {
		t.Errorf("with file coverage the file holding all three words should rank first, not %s", got)
	}
}

// TestAncillaryPrior: the project's own file ranks above a vendored copy
// of a dependency and a test fixture that match the query better, unless
// the query asks about such code or the prior is off.
func TestAncillaryPrior(t *testing.T) {
	st := sqlitetest.Open(t, sqlite.Options{})
	srcs := map[string]string{
		"vendor/golang.org/x/net/http2/frame.go": "package http2\n\n// readFrame reads a frame header and the frame payload, checking the frame size.\nfunc readFrame() {}\n",
		"internal/wire/read.go":                  "package wire\n\n// readHeader reads a frame header.\nfunc readHeader() {}\n",
		"internal/wire/conn.go":                  "package wire\n\n// closeConn closes the connection after the last read.\nfunc closeConn() {}\n",
		"internal/wire/buf.go":                   "package wire\n\n// fill reads into the buffer.\nfunc fill() {}\n",
		"internal/wire/testdata/trailer.go":      "package p\n\n// trailer: a frame trailer follows the frame body; the trailer ends the frame.\nfunc trailer() {}\n",
		"internal/wire/trailer.go":               "package wire\n\n// readTrailer reads the frame trailer.\nfunc readTrailer() {}\n",
	}
	// Files about other things, so that the query's words are rare.
	for i, topic := range []string{"parses the config file", "formats a log line", "sorts the results", "hashes a password", "retries a request", "renders a template"} {
		srcs[fmt.Sprintf("internal/misc/f%d.go", i)] = fmt.Sprintf("package misc\n\n// F%d %s.\nfunc F%d() {}\n", i, topic, i)
	}
	putFiles(t, st, srcs)
	first := func(opts retrieve.Options, text string) (string, retrieve.Hit) {
		t.Helper()
		res := search(t, retrieve.NewHybrid(st, nil, opts), retrieve.Query{Text: text, Mode: retrieve.ModeLexical})
		if len(res.Hits) == 0 {
			t.Fatalf("%q: no hits", text)
		}
		return res.Hits[0].Occurrence.Files[0], res.Hits[0]
	}
	for _, tc := range []struct{ query, own, aside string }{
		{"read the frame header and payload", "internal/wire/read.go", "vendor/golang.org/x/net/http2/frame.go"},
		{"frame trailer after the body", "internal/wire/trailer.go", "internal/wire/testdata/trailer.go"},
	} {
		if f, _ := first(retrieve.Options{Deadline: unhurried, AncillaryPrior: 1}, tc.query); f != tc.aside {
			t.Fatalf("%q: with the prior off %s should match best, got %s", tc.query, tc.aside, f)
		}
		if f, _ := first(retrieve.Options{Deadline: unhurried}, tc.query); f != tc.own {
			t.Errorf("%q: the project's own file should rank first, got %s", tc.query, f)
		}
	}
	f, hit := first(retrieve.Options{Deadline: unhurried}, "read the frame header and payload in the vendored http2")
	if f != "vendor/golang.org/x/net/http2/frame.go" || slices.Contains(hit.Boosts, "ancillary") {
		t.Errorf("a query about vendored code should rank it unchanged first, got %s %v", f, hit.Boosts)
	}
	f, hit = first(retrieve.Options{Deadline: unhurried}, "frame trailer after the body in testdata")
	if f != "internal/wire/testdata/trailer.go" || slices.Contains(hit.Boosts, "ancillary") {
		t.Errorf("a query about test data should rank it unchanged first, got %s %v", f, hit.Boosts)
	}
}

// TestSentenceBoost: of two notes with the same words, the one that holds
// the query's words in one sentence ranks first; with the boost off the
// two tie and the newer ranks first.
func TestSentenceBoost(t *testing.T) {
	ctx := context.Background()
	st := sqlitetest.Open(t, sqlite.Options{})
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	together := storetest.Entry("s-a", "user", store.Note, "We changed the cache eviction policy. Lunch was late today.")
	together.Time = now.Add(-time.Hour)
	apart := storetest.Entry("s-b", "user", store.Note, "We changed the cache today. Lunch was late, eviction policy.")
	apart.Time = now
	entries := []store.Entry{together, apart}
	for i := range 20 { // so that the query's words are rare
		e := storetest.Entry(fmt.Sprintf("s%d", i), "user", store.Note, fmt.Sprintf("the build on runner %d passed after a retry", i))
		e.Time = now.Add(-time.Duration(i+2) * time.Hour)
		entries = append(entries, e)
	}
	if _, err := st.PutEntries(ctx, entries); err != nil {
		t.Fatal(err)
	}
	q := retrieve.Query{Text: "cache eviction policy", Mode: retrieve.ModeLexical}
	first := func(opts retrieve.Options) string {
		t.Helper()
		res := search(t, retrieve.NewHybrid(st, nil, opts), q)
		if len(res.Hits) < 2 {
			t.Fatalf("%d hits, want 2", len(res.Hits))
		}
		return res.Hits[0].Chunk.Text
	}
	if got := first(retrieve.Options{Deadline: unhurried, SentenceBoost: -1}); got != string(apart.Content) {
		t.Fatalf("boost off: %q first, want the newer note", got)
	}
	if got := first(retrieve.Options{Deadline: unhurried}); got != string(together.Content) {
		t.Errorf("%q first, want the note holding the words in one sentence", got)
	}
}

// putFiles indexes files (path to source) into st.
func putFiles(t testing.TB, st *sqlite.Store, srcs map[string]string) {
	t.Helper()
	var files []store.FileChange
	// In path order: the order they are stored in decides the chunk IDs,
	// and with them the corpus model trained on the chunks.
	for _, path := range slices.Sorted(maps.Keys(srcs)) {
		src := srcs[path]
		c, err := index.Version(path, []byte(src), src, &index.Options{})
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, *c)
	}
	if err := st.PutFiles(context.Background(), files); err != nil {
		t.Fatal(err)
	}
}

func provenances(hits []retrieve.Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = fmt.Sprintf("%s %.3f %v", h.Provenance(), h.Score, h.Boosts)
	}
	return out
}

// TestVectorFilter: a filtered vector search scores the filter's chunks
// exactly: the session's chunks come back by cosine, though the query's
// topic is another session's and fills the store's nearest neighbours.
func TestVectorFilter(t *testing.T) {
	f := newFixture(t)
	h := retrieve.NewHybrid(f.st, f.emb, retrieve.Options{Deadline: unhurried, Depth: 5})
	res := search(t, h, retrieve.Query{Text: "deadlock", Limit: 5, Mode: retrieve.ModeVector, Filter: store.Filter{SessionID: "s1-2"}})
	if len(res.Hits) != 5 {
		t.Fatalf("%d hits, want 5: %v", len(res.Hits), provenances(res.Hits))
	}
	for i, hit := range res.Hits {
		if hit.Occurrence.SessionID != "s1-2" {
			t.Errorf("hit %d from session %s", i, hit.Occurrence.SessionID)
		}
		if hit.Vector <= 0 {
			t.Errorf("hit %d: cosine %v, want positive", i, hit.Vector)
		}
		if i > 0 && hit.Vector > res.Hits[i-1].Vector {
			t.Errorf("hit %d: cosine %v after %v, want descending", i, hit.Vector, res.Hits[i-1].Vector)
		}
	}
	// The same chunks as the best five of the session's forty by cosine.
	all := search(t, retrieve.NewHybrid(f.st, f.emb, retrieve.Options{Deadline: unhurried, Depth: 300}), retrieve.Query{Text: "deadlock", Limit: 300, Mode: retrieve.ModeVector})
	var want []string
	for _, hit := range all.Hits {
		if hit.Occurrence.SessionID == "s1-2" && len(want) < 5 {
			want = append(want, hit.Chunk.Text)
		}
	}
	var got []string
	for _, hit := range res.Hits {
		got = append(got, hit.Chunk.Text)
	}
	if !slices.Equal(got, want) {
		t.Errorf("filtered %q,\nwant %q", got, want)
	}
}

// unhurried is the deadline of searches in tests that do not test the
// deadline: on a loaded machine (the race detector, CI running packages
// side by side) a backend can take more than the default 250 ms, and a
// signal cut off would fail tests about ranking for the wrong reason.
const unhurried = time.Minute
