package embed

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/engramhq/engram/internal/store"
)

// DefaultWorkerBatch is how many chunks a Worker embeds and stores at once.
const DefaultWorkerBatch = 256

// Worker embeds the chunks a store lists as pending under an embedder's
// model. The queue is the store's (chunks without a vector under the
// model), so work is durable without bookkeeping: a run that stops, for a
// crash, a cancel or a failing provider, leaves the rest pending, and the
// next run picks it up.
type Worker struct {
	Store    store.Store
	Embedder Embedder
	// Batch is how many chunks are embedded and stored at once; zero means
	// DefaultWorkerBatch.
	Batch int
	Log   *slog.Logger
}

// Progress reports a Worker's run.
type Progress struct {
	// Done counts the chunks embedded so far in this run, Total the chunks
	// that were pending when it started.
	Done, Total int64
}

// Text is what an embedder is given for a chunk: its file's path, if it
// is from one, and its conversation context, if it has one, then its text.
func Text(c store.ChunkText) string {
	var b strings.Builder
	for _, s := range []string{c.Path, c.Context} {
		if s != "" {
			b.WriteString(s)
			b.WriteByte('\n')
		}
	}
	b.WriteString(c.Text)
	return b.String()
}

// Run embeds pending chunks until none is left or ctx ends, and returns
// how many it embedded. The first error stops it.
func (w *Worker) Run(ctx context.Context, progress func(Progress)) (int64, error) {
	batch := w.Batch
	if batch <= 0 {
		batch = DefaultWorkerBatch
	}
	model := w.Embedder.Model()
	st, err := w.Store.VectorStats(ctx, model)
	if err != nil {
		return 0, err
	}
	p := Progress{Total: st.Chunks - st.Embedded}
	if progress != nil {
		progress(p)
	}
	var after int64
	for {
		chunks, err := w.Store.PendingChunks(ctx, model, after, batch)
		if err != nil {
			return p.Done, err
		}
		if len(chunks) == 0 {
			return p.Done, nil
		}
		texts := make([]string, len(chunks))
		for i, c := range chunks {
			texts[i] = Text(c)
		}
		vecs, err := w.Embedder.Embed(ctx, texts)
		if err != nil {
			return p.Done, fmt.Errorf("embed chunks %d-%d: %w", chunks[0].ID, chunks[len(chunks)-1].ID, err)
		}
		dim := w.Embedder.Dim()
		if err := Check(vecs, len(texts), dim); err != nil {
			return p.Done, fmt.Errorf("embed chunks %d-%d with %s: %w", chunks[0].ID, chunks[len(chunks)-1].ID, model, err)
		}
		out := make([]store.ChunkVector, len(chunks))
		for i, c := range chunks {
			out[i] = store.ChunkVector{ID: c.ID, Vector: vecs[i]}
		}
		if err := w.Store.PutVectors(ctx, model, dim, out); err != nil {
			return p.Done, err
		}
		after = chunks[len(chunks)-1].ID
		p.Done += int64(len(chunks))
		p.Total = max(p.Total, p.Done)
		if progress != nil {
			progress(p)
		}
	}
}
