package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/embed/lsa"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store"
)

var embedTopics = [][]string{
	{"goroutine", "channel", "mutex", "deadlock", "select", "waitgroup"},
	{"index", "query", "posting", "ranking", "token", "stemmer"},
	{"deploy", "cluster", "container", "rollout", "replica", "ingress"},
}

func addNotes(t *testing.T, e *engine.Engine, from, n int) {
	t.Helper()
	var recs []engine.Record
	for i := from; i < from+n; i++ {
		w := embedTopics[i%3]
		recs = append(recs, engine.Record{Session: "s", Agent: "a", Type: store.Note,
			Content: []byte(fmt.Sprintf("note %d about the %s and the %s with %s", i, w[i%6], w[(i+2)%6], w[(i+3)%6]))})
	}
	if _, err := e.Add(t.Context(), recs); err != nil {
		t.Fatal(err)
	}
}

func TestEmbed_CorpusLifecycle(t *testing.T) {
	ctx := t.Context()
	e := newEngine(t, engine.Options{Embed: engine.EmbedOptions{Corpus: lsa.Options{Dim: 8}, Batch: 64}})

	// Too small to learn from: search stays lexical, nothing fails.
	addNotes(t, e, 0, 5)
	rep, err := e.Embed(ctx, nil)
	if err != nil || !rep.TooSmall {
		t.Fatalf("tiny store: %+v, %v", rep, err)
	}
	if emb, err := e.Embedder(ctx); err != nil || emb != nil {
		t.Fatalf("embedder before training: %v, %v", emb, err)
	}
	res, err := e.Retrieve(ctx, retrieve.Query{Text: "deadlock"})
	if err != nil || res.Vector || len(res.Hits) == 0 {
		t.Fatalf("lexical search before training: %+v, %v", res, err)
	}

	// Trained on the first embed; every chunk gets a vector.
	addNotes(t, e, 5, 95)
	var phases []string
	rep, err = e.Embed(ctx, func(p engine.EmbedProgress) {
		if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
			phases = append(phases, p.Phase)
			// A phase's first report is its start: a progress bar
			// started at a later count showed that count done in no time.
			if p.Done != 0 {
				t.Errorf("phase %s starts at %d/%d, want 0", p.Phase, p.Done, p.Total)
			}
		}
	})
	if err != nil || !rep.Trained || rep.Embedded != 100 || strings.Join(phases, ",") != "train,embed" {
		t.Fatalf("first embed: %+v, phases %v, %v", rep, phases, err)
	}
	first := rep.Model
	st, err := e.EmbedStatus(ctx)
	if err != nil || st.Model != first || st.Chunks != 100 || st.Embedded != 100 || st.Pending != 0 || st.Dim != 8 || st.TrainedChunks != 100 {
		t.Fatalf("status: %+v, %v", st, err)
	}
	res, err = e.Retrieve(ctx, retrieve.Query{Text: "deadlock"})
	if err != nil || !res.Vector || !res.Lexical {
		t.Fatalf("hybrid search: %+v, %v", res, err)
	}

	// Growth under the retraining factor: new chunks are embedded with
	// the same model.
	addNotes(t, e, 100, 50)
	if rep, err = e.Embed(ctx, nil); err != nil || rep.Trained || rep.Model != first || rep.Embedded != 50 {
		t.Fatalf("second embed: %+v, %v", rep, err)
	}

	// Doubled: EmbedNew (engram add) embeds the new chunks with the
	// current model and says a retraining is due, without doing it.
	addNotes(t, e, 150, 100)
	if rep, err = e.EmbedNew(ctx, nil); err != nil || rep.Trained || rep.Model != first || rep.Embedded != 100 || !rep.RetrainDue {
		t.Fatalf("EmbedNew after doubling: %+v, %v", rep, err)
	}
	if st, _ := e.EmbedStatus(ctx); st.Model != first || st.Next != "" || st.Pending != 0 {
		t.Fatalf("after EmbedNew: %+v", st)
	}

	// Embed trains a new model and rolls it out. An interrupted rollout
	// keeps the old model active, and the next run finishes it.
	cctx, cancel := context.WithCancel(ctx)
	_, err = e.Embed(cctx, func(p engine.EmbedProgress) {
		if p.Phase == "embed" && p.Done >= 100 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted embed: %v", err)
	}
	st, _ = e.EmbedStatus(ctx)
	if st.Model != first || st.Next == "" || st.Next == first || st.NextEmbedded == 0 || st.NextEmbedded == 250 {
		t.Fatalf("during the rollout: %+v", st)
	}
	next := st.Next
	if res, err := e.Retrieve(ctx, retrieve.Query{Text: "deadlock"}); err != nil || !res.Vector {
		t.Fatalf("search during the rollout: %+v, %v", res, err)
	}
	rep, err = e.Embed(ctx, nil)
	if err != nil || rep.Model != next || rep.Trained {
		t.Fatalf("resumed rollout: %+v, %v", rep, err)
	}
	st, _ = e.EmbedStatus(ctx)
	if st.Model != next || st.Next != "" || st.Embedded != 250 || st.TrainedChunks != 250 {
		t.Fatalf("after the rollout: %+v", st)
	}
	if old, _ := e.Store().VectorStats(ctx, first); old.Embedded != 0 {
		t.Errorf("old model's vectors kept: %+v", old)
	}
	if _, err := e.Store().Blob(ctx, "embed/"+first); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("old model's blob kept: %v", err)
	}
	res, err = e.Retrieve(ctx, retrieve.Query{Text: "deadlock"})
	if err != nil || !res.Vector {
		t.Fatalf("search after the rollout: %+v, %v", res, err)
	}
}

// TestEmbed_LoadsTheModelOnlyToEmbed: a run with nothing to embed does not
// load the corpus model (most of a quick engram index or add), and one
// with something to embed does, and fails plainly if it cannot.
func TestEmbed_LoadsTheModelOnlyToEmbed(t *testing.T) {
	ctx := t.Context()
	e := newEngine(t, engine.Options{Embed: engine.EmbedOptions{Corpus: lsa.Options{Dim: 8}, Batch: 64}})
	addNotes(t, e, 0, 100)
	rep, err := e.Embed(ctx, nil)
	if err != nil || !rep.Trained {
		t.Fatalf("first embed: %+v, %v", rep, err)
	}
	model := rep.Model
	// The stored model made unreadable: only a load can tell.
	if err := e.Store().PutBlob(ctx, "embed/"+model, []byte("not a model")); err != nil {
		t.Fatal(err)
	}
	for name, run := range map[string]func(context.Context, func(engine.EmbedProgress)) (engine.EmbedReport, error){
		"Embed": e.Embed, "EmbedNew": e.EmbedNew,
	} {
		if rep, err := run(ctx, nil); err != nil || rep.Model != model || rep.Embedded != 0 {
			t.Errorf("%s with nothing to embed: %+v, %v", name, rep, err)
		}
	}
	addNotes(t, e, 100, 10)
	if _, err := e.EmbedNew(ctx, nil); err == nil || !strings.Contains(err.Error(), model) || !strings.Contains(err.Error(), "load corpus model") {
		t.Errorf("EmbedNew with an unreadable model: %v", err)
	}
}

// TestEmbed_CorpusTermsStale: a corpus model trained on terms made the way
// an older engram made them is due for retraining however little the store
// has grown, and Embed retrains it.
func TestEmbed_CorpusTermsStale(t *testing.T) {
	ctx := t.Context()
	e := newEngine(t, engine.Options{Embed: engine.EmbedOptions{Corpus: lsa.Options{Dim: 8}, Batch: 64}})
	addNotes(t, e, 0, 100)
	if rep, err := e.Embed(ctx, nil); err != nil || !rep.Trained {
		t.Fatalf("first embed: %+v, %v", rep, err)
	}
	addNotes(t, e, 100, 10)
	if rep, err := e.EmbedNew(ctx, nil); err != nil || rep.RetrainDue {
		t.Fatalf("a model of today's terms is not due: %+v, %v", rep, err)
	}
	// What a store trained before terms.Version 2 holds: no version.
	if err := e.Store().PutSetting(ctx, "embed.corpus.terms_version", ""); err != nil {
		t.Fatal(err)
	}
	addNotes(t, e, 110, 10)
	if rep, err := e.EmbedNew(ctx, nil); err != nil || !rep.RetrainDue || rep.Trained || rep.Embedded != 10 {
		t.Fatalf("a model of older terms is due: %+v, %v", rep, err)
	}
	if rep, err := e.Embed(ctx, nil); err != nil || !rep.Trained {
		t.Fatalf("Embed retrains it: %+v, %v", rep, err)
	}
	addNotes(t, e, 120, 10)
	if rep, err := e.EmbedNew(ctx, nil); err != nil || rep.RetrainDue {
		t.Fatalf("after retraining: %+v, %v", rep, err)
	}
}

func TestEmbed_ProviderErrors(t *testing.T) {
	ctx := t.Context()
	if _, err := engine.New(nil, engine.Options{Embed: engine.EmbedOptions{Provider: "word2vec"}}); err == nil {
		t.Error("unknown provider accepted")
	}
	// A missing Model2Vec directory: search degrades to lexical, embed
	// reports the error.
	e := newEngine(t, engine.Options{Embed: engine.EmbedOptions{Provider: engine.ProviderModel2Vec, Path: t.TempDir() + "/missing"}})
	addNotes(t, e, 0, 30)
	if _, err := e.Embed(ctx, nil); err == nil || !strings.Contains(err.Error(), "no model.safetensors") {
		t.Errorf("Embed with a missing model: %v", err)
	}
	if res, err := e.Retrieve(ctx, retrieve.Query{Text: "deadlock"}); err != nil || len(res.Hits) == 0 || res.Vector {
		t.Errorf("search with a missing model: %+v, %v", res, err)
	}
	none := newEngine(t, engine.Options{Embed: engine.EmbedOptions{Provider: engine.ProviderNone}})
	addNotes(t, none, 0, 30)
	if rep, err := none.Embed(ctx, nil); err != nil || rep.Embedded != 0 {
		t.Errorf("provider none: %+v, %v", rep, err)
	}
}

func TestFusionDefaults(t *testing.T) {
	corpus := newEngine(t, engine.Options{})
	if f := corpus.Fusion(); f != engine.CorpusFusion {
		t.Errorf("corpus provider: fusion %+v, want %+v", f, engine.CorpusFusion)
	}
	set := retrieve.FuseOptions{Method: retrieve.RRF, LexicalWeight: 0.5, VectorWeight: 0.5}
	configured := newEngine(t, engine.Options{Retrieve: retrieve.Options{Fusion: set}})
	if f := configured.Fusion(); f != set {
		t.Errorf("configured fusion %+v, want %+v", f, set)
	}
	// Other embedders get the seed's defaults (retrieve's zero value).
	other := newEngine(t, engine.Options{Embed: engine.EmbedOptions{Provider: engine.ProviderNone}})
	if f := other.Fusion(); f != (retrieve.FuseOptions{}) {
		t.Errorf("provider none: fusion %+v", f)
	}
}

// TestEmbed_CorpusDeterministic: the same chunks stored in another order
// train the same model, bit for bit, whether the store is small enough to
// train on all of its chunks or sampled. Indexing on several workers
// stores a repository's files in another order every time; the model and
// every score that uses it must not depend on it. (Each note is a session
// of its own: a conversation's turns are embedded with the turns before
// them, so their order is their text.)
func TestEmbed_CorpusDeterministic(t *testing.T) {
	notes := func(e *engine.Engine, from, n int) {
		var recs []engine.Record
		for i := from; i < from+n; i++ {
			w := embedTopics[i%3]
			recs = append(recs, engine.Record{Session: fmt.Sprintf("s%d", i), Agent: "a", Type: store.Note,
				Content: []byte(fmt.Sprintf("note %d about the %s and the %s with %s", i, w[i%6], w[(i+2)%6], w[(i+3)%6]))})
		}
		if _, err := e.Add(t.Context(), recs); err != nil {
			t.Fatal(err)
		}
	}
	for _, sample := range []int{0, 80} {
		t.Run(fmt.Sprintf("sample=%d", sample), func(t *testing.T) {
			opts := engine.Options{Embed: engine.EmbedOptions{Corpus: lsa.Options{Dim: 8}, Batch: 64, CorpusSample: sample}}
			forward, backward := newEngine(t, opts), newEngine(t, opts)
			notes(forward, 0, 60)
			notes(forward, 60, 60)
			notes(backward, 60, 60)
			notes(backward, 0, 60)
			a, err := forward.Embed(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, err := backward.Embed(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if !a.Trained || a.Model != b.Model {
				t.Fatalf("the same chunks in two orders trained %s and %s (%+v)", a.Model, b.Model, a)
			}
		})
	}
}
