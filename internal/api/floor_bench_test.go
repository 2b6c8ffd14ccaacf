package api_test

import (
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/api"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/eval"
	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
)

// BenchmarkRelevanceFloor measures what the relevance floor of history
// search costs and gains on LoCoMo and LongMemEval, through search_history
// itself (api.Ops.SearchHistory, 10 results): of the questions whose
// evidence is among the hits without the floor, how many get nothing
// found with it; and of questions asked of a store that does not hold
// their answer (LoCoMo: each question of every other conversation;
// LongMemEval: the pooled sessions split in two halves by session, each
// question whose evidence is in one half asked of the other), how many
// still get hits. It loads the sets as engram eval does and takes
// minutes, so it is a benchmark, run only when asked for; the bench folder
// is ENGRAM_BENCH_DIR, else ../shared/bench beside the project:
//
//	go test ./internal/api -run '^$' -bench RelevanceFloor -benchtime 1x -timeout 1h
func BenchmarkRelevanceFloor(b *testing.B) {
	t := b
	bench := os.Getenv("ENGRAM_BENCH_DIR")
	if bench == "" {
		bench = filepath.Join("..", "..", "..", "shared", "bench")
	}
	if _, err := os.Stat(filepath.Join(bench, "locomo", "locomo10.json")); err != nil {
		t.Skipf("the bench sets are not here (%v): set ENGRAM_BENCH_DIR to the shared bench folder", err)
	}
	dir := t.TempDir()
	sets := os.Getenv("ENGRAM_FLOOR_SETS") // locomo, longmemeval or both
	if sets == "" || sets == eval.LoCoMo {
		set, err := eval.LoadLoCoMo(filepath.Join(bench, "locomo", "locomo10.json"))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for n := range set.Corpora {
			names = append(names, n)
		}
		sort.Strings(names)
		stores := map[string]benchStore{}
		for _, n := range names {
			stores[n] = openBenchStore(t, filepath.Join(dir, n+".db"), set.Corpora[n])
		}
		var m floorMeasure
		for _, q := range set.Questions {
			m.own(t, stores[q.Corpus], q)
			for _, other := range names {
				if other != q.Corpus {
					m.negative(t, stores[other], q)
				}
			}
		}
		m.report(t, "locomo")
	}
	if sets == "" || sets == eval.LongMemEval {
		set, err := eval.LoadLongMemEval(filepath.Join(bench, "longmemeval", "longmemeval_oracle.json"))
		if err != nil {
			t.Fatal(err)
		}
		all := set.Corpora[eval.LongMemEval]
		half := func(session string) int {
			h := fnv.New32a()
			h.Write([]byte(session))
			return int(h.Sum32() % 2)
		}
		var parts [2][]eval.Item
		sessionOf := map[string]string{}
		for _, it := range all {
			parts[half(it.Session)] = append(parts[half(it.Session)], it)
			sessionOf[it.ID] = it.Session
		}
		pooled := openBenchStore(t, filepath.Join(dir, "lme.db"), all)
		halves := [2]benchStore{openBenchStore(t, filepath.Join(dir, "lme0.db"), parts[0]), openBenchStore(t, filepath.Join(dir, "lme1.db"), parts[1])}
		var m floorMeasure
		for _, q := range set.Questions {
			m.own(t, pooled, q)
			in := map[int]bool{}
			for _, id := range q.Relevant {
				in[half(sessionOf[id])] = true
			}
			if len(in) == 1 {
				for h := range in {
					m.negative(t, halves[1-h], q)
				}
			}
		}
		m.report(t, "longmemeval")
	}
}

// benchStore is a benchmark corpus stored as engram eval stores it, with
// search_history over it with and without the relevance floor.
type benchStore struct {
	floor, off *api.Ops
	shared     map[string][]string // entry ID -> items with that content
}

func openBenchStore(t testing.TB, path string, items []eval.Item) benchStore {
	t.Helper()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	opts := engine.Options{KeepSecrets: true, Retrieve: retrieve.Options{Deadline: time.Minute}}
	eng, err := engine.New(st, opts)
	if err != nil {
		t.Fatal(err)
	}
	shared := map[string][]string{}
	recs := make([]engine.Record, 0, len(items))
	for _, it := range items {
		// As engram eval stores them: an agent's sessions.
		typ := store.UserPrompt
		if it.Role == "assistant" {
			typ = store.AgentResponse
		}
		recs = append(recs, engine.Record{Session: it.Session, Agent: "claude", Type: typ, Content: []byte(it.Text),
			Time: it.Time, MsgID: it.ID})
	}
	err = eng.AddAll(ctx, recs, 2000, func(first int, res []engine.AddResult) error {
		for i, r := range res {
			shared[r.ID] = append(shared[r.ID], recs[first+i].MsgID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Embed(ctx, nil); err != nil {
		t.Fatal(err)
	}
	opts.RelevanceFloor = -1
	off, err := engine.New(st, opts)
	if err != nil {
		t.Fatal(err)
	}
	ops := func(e *engine.Engine) *api.Ops { return &api.Ops{Eng: e, Session: func() string { return "bench" }} }
	return benchStore{floor: ops(eng), off: ops(off), shared: shared}
}

// floorMeasure counts what the floor does to answers.
type floorMeasure struct {
	questions, found, lost   int // own store: asked, evidence in the hits without the floor, then nothing found with it
	negatives, offHits, hits int
	// bests are the best hits' relevance: of questions whose evidence was
	// found, and of negatives, for the cost and gain of other floors.
	foundBest, negBest []float64
	floor              float64
}

func history(t testing.TB, o *api.Ops, q eval.Question) api.SearchOut {
	t.Helper()
	out, _, err := o.SearchHistory(t.Context(), api.HistoryIn{Query: q.Text})
	if err != nil {
		t.Fatalf("%s: %v", q.ID, err)
	}
	return out
}

func (m *floorMeasure) own(t testing.TB, s benchStore, q eval.Question) {
	m.questions++
	rel := map[string]bool{}
	for _, id := range q.Relevant {
		rel[id] = true
	}
	found := false
	for _, h := range history(t, s.off, q).Hits {
		ents, err := s.off.Eng.Store().ResolveID(t.Context(), h.Entry)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range s.shared[ents] {
			found = found || rel[id]
		}
	}
	if !found {
		return
	}
	m.found++
	out := history(t, s.floor, q)
	m.floor = out.Relevance.Floor
	m.foundBest = append(m.foundBest, out.Relevance.Best)
	if len(out.Hits) == 0 {
		m.lost++
	}
}

func (m *floorMeasure) negative(t testing.TB, s benchStore, q eval.Question) {
	m.negatives++
	if len(history(t, s.off, q).Hits) > 0 {
		m.offHits++
	}
	out := history(t, s.floor, q)
	m.negBest = append(m.negBest, out.Relevance.Best)
	if len(out.Hits) > 0 {
		m.hits++
	}
}

func (m *floorMeasure) report(t testing.TB, set string) {
	pct := func(n, of int) string {
		return fmt.Sprintf("%d of %d (%.1f %%)", n, of, 100*float64(n)/float64(max(of, 1)))
	}
	t.Logf("%s: %d questions; evidence in the 10 hits without the floor: %d", set, m.questions, m.found)
	t.Logf("%s: floor %.3f: nothing found for %s of those", set, m.floor, pct(m.lost, m.found))
	t.Logf("%s: asked of a store without the answer: hits without the floor %s, with it %s", set,
		pct(m.offHits, m.negatives), pct(m.hits, m.negatives))
	for _, f := range []float64{0.2, 0.25, 1.0 / 3, 0.4, 0.5} {
		lost, answered := 0, 0
		for _, b := range m.foundBest {
			if b < f {
				lost++
			}
		}
		for _, b := range m.negBest {
			if b >= f {
				answered++
			}
		}
		t.Logf("%s:   at floor %.3f: evidence found, now nothing found %5.1f %%; negatives answered %5.1f %%", set, f,
			100*float64(lost)/float64(max(m.found, 1)), 100*float64(answered)/float64(max(m.negatives, 1)))
	}
}
