package embed

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/embed/lsa"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/store/storetest"
)

// topicTexts makes texts on three topics.
func topicTexts(n int) []string {
	topics := [][]string{
		{"goroutine", "channel", "mutex", "deadlock", "select", "waitgroup"},
		{"index", "query", "posting", "ranking", "token", "stemmer"},
		{"deploy", "cluster", "container", "rollout", "replica", "ingress"},
	}
	var out []string
	for i := range n {
		t := topics[i%3]
		out = append(out, fmt.Sprintf("the %s and the %s with %s, item %d", t[i%6], t[(i+1)%6], t[(i+3)%6], i))
	}
	return out
}

func TestCorpus(t *testing.T) {
	ctx := context.Background()
	c, err := TrainCorpus(topicTexts(300), lsa.Options{Dim: 8})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.Model(), CorpusPrefix+"-8-") || c.Dim() != 8 || c.Docs() != 300 {
		t.Errorf("Model %q Dim %d Docs %d", c.Model(), c.Dim(), c.Docs())
	}
	vecs, err := c.Embed(ctx, []string{"a deadlock on the mutex", "goroutine channel", "ingress replica", "zzz qqq"})
	if err != nil {
		t.Fatal(err)
	}
	dot := func(a, b []float32) (s float32) {
		for i := range a {
			s += a[i] * b[i]
		}
		return s
	}
	if same, other := dot(vecs[0], vecs[1]), dot(vecs[0], vecs[2]); same < 0.5 || same < other+0.3 {
		t.Errorf("same topic %.2f, other topic %.2f", same, other)
	}
	if !slices.Equal(vecs[3], make([]float32, 8)) {
		t.Errorf("unknown words: %v", vecs[3])
	}
	data, _ := c.MarshalBinary()
	c2, err := LoadCorpus(data)
	if err != nil {
		t.Fatal(err)
	}
	v2, _ := c2.Embed(ctx, []string{"a deadlock on the mutex"})
	if c2.Model() != c.Model() || !slices.Equal(v2[0], vecs[0]) {
		t.Error("a loaded model differs from the saved one")
	}
	if _, err := LoadCorpus(data[:10]); err == nil {
		t.Error("a truncated model loaded")
	}
	if _, err := TrainCorpus([]string{"too", "few"}, lsa.Options{}); !errors.Is(err, lsa.ErrTooSmall) {
		t.Errorf("tiny corpus: %v", err)
	}
}

// flaky fails every call after the first ok ones.
type flaky struct {
	Embedder
	ok    int
	calls int
}

func (f *flaky) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	f.calls++
	if f.calls > f.ok {
		return nil, errors.New("provider down")
	}
	return f.Embedder.Embed(ctx, texts)
}

func TestWorkerResumes(t *testing.T) {
	ctx := context.Background()
	st := sqlitetest.Open(t, sqlite.Options{})
	texts := topicTexts(100)
	var entries []store.Entry
	for _, text := range texts {
		entries = append(entries, storetest.Entry("s", "a", store.Note, text))
	}
	if _, err := st.PutEntries(ctx, entries); err != nil {
		t.Fatal(err)
	}
	c, err := TrainCorpus(texts, lsa.Options{Dim: 8})
	if err != nil {
		t.Fatal(err)
	}
	// The provider fails after two batches: those are kept, the rest stays
	// pending.
	w := &Worker{Store: st, Embedder: &flaky{Embedder: c, ok: 2}, Batch: 30}
	var last Progress
	n, err := w.Run(ctx, func(p Progress) { last = p })
	if err == nil || n != 60 || last.Done != 60 || last.Total != 100 {
		t.Fatalf("first run: %d embedded, progress %+v, error %v", n, last, err)
	}
	vs, err := st.VectorStats(ctx, c.Model())
	if err != nil || vs.Embedded != 60 || vs.Chunks != 100 {
		t.Fatalf("after a failed run: %+v, %v", vs, err)
	}
	// A new run (a restart) finishes the queue.
	w.Embedder = c
	if n, err := w.Run(ctx, nil); err != nil || n != 40 {
		t.Fatalf("second run: %d, %v", n, err)
	}
	if n, err := w.Run(ctx, nil); err != nil || n != 0 {
		t.Fatalf("third run: %d, %v", n, err)
	}
	// A wrong answer is refused, and nothing is stored.
	if _, err := st.PutEntries(ctx, []store.Entry{storetest.Entry("s", "a", store.Note, "goroutine deadlock again")}); err != nil {
		t.Fatal(err)
	}
	w.Embedder = wrongDim{c}
	if _, err := w.Run(ctx, nil); !errors.Is(err, ErrBadVector) {
		t.Fatalf("wrong dimension: %v", err)
	}
	if vs, _ := st.VectorStats(ctx, c.Model()); vs.Embedded != 100 {
		t.Errorf("after a refused answer: %+v", vs)
	}
}

type wrongDim struct{ Embedder }

func (w wrongDim) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i := range out {
		out[i] = []float32{1}
	}
	return out, nil
}
