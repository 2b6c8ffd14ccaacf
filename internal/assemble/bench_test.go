package assemble_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/assemble"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/window"
)

// BenchmarkAssemble assembles a turn over a window of 200 messages (50
// exchanges with tool calls, 16,000 tokens, in a 8,000-token window), with
// no retrieval, as turns go: each iteration appends an exchange, then
// assembles, so that the window grows to 1,000 messages at 200
// iterations (BenchmarkAssemble_200 keeps to 200). It reports the p50 and
// p95 of one assembly.
func BenchmarkAssemble(b *testing.B) {
	ctx := context.Background()
	a, key := benchWindow(b)
	req := assemble.Request{Key: key, Message: "Why does handler3 time out again?"}
	more := conversation(50 + 1000)
	var took []time.Duration
	i := 0
	for b.Loop() {
		// A turn: the last exchange appended, then the next assembled.
		b.StopTimer()
		if i >= 1000 {
			b.Fatal("run it for 1,000 iterations at most (-benchtime 200x)")
		}
		ex := more[1+4*(50+i) : 1+4*(51+i)]
		if _, err := a.Windows.Append(ctx, key, ex); err != nil {
			b.Fatal(err)
		}
		i++
		b.StartTimer()
		start := time.Now()
		if _, err := a.Assemble(ctx, req); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(took[len(took)*95/100].Microseconds()), "p95-µs")
}

// BenchmarkAssemble_200 is the measure, a turn over a window of
// 200 messages, without retrieval: forty windows of 50 exchanges (200
// messages and the system prompt, 16,000 tokens, 8,000-token windows),
// each assembled once before the clock starts, as a window that grew to
// 200 messages turn by turn has been; then each iteration appends the
// next exchange to one window in turn and assembles it, so that every
// window stays between 200 and 220 messages and a fifth of the turns
// finish a chunk of the conversation (its references and summary
// written). It reports the p50 and p95 of one assembly.
func BenchmarkAssemble_200(b *testing.B) {
	ctx := context.Background()
	a := assembler(b)
	const windows, turns = 40, 5
	msgs := conversation(50 + turns)
	keys := make([]store.WindowKey, windows)
	req := func(k store.WindowKey) assemble.Request {
		return assemble.Request{Key: k, Message: "Why does handler3 time out again?"}
	}
	for w := range keys {
		keys[w] = store.WindowKey{SessionID: fmt.Sprintf("s%d", w), AgentID: "claude"}
		if _, err := a.Windows.Open(ctx, keys[w], window.OpenOptions{Limit: 8000, Output: 500, Safety: 100}); err != nil {
			b.Fatal(err)
		}
		if _, err := a.Windows.Append(ctx, keys[w], msgs[:1+4*50]); err != nil {
			b.Fatal(err)
		}
		if _, err := a.Assemble(ctx, req(keys[w])); err != nil {
			b.Fatal(err)
		}
	}
	var took []time.Duration
	i := 0
	for b.Loop() {
		b.StopTimer()
		w, turn := i%windows, i/windows
		if turn >= turns {
			b.Fatalf("run it for %d iterations at most (-benchtime 200x)", windows*turns)
		}
		if _, err := a.Windows.Append(ctx, keys[w], msgs[1+4*(50+turn):1+4*(51+turn)]); err != nil {
			b.Fatal(err)
		}
		i++
		b.StartTimer()
		start := time.Now()
		if _, err := a.Assemble(ctx, req(keys[w])); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(took[len(took)*95/100].Microseconds()), "p95-µs")
}

// BenchmarkAssemble_Retrieval assembles a turn with engram's pre-fetch
// over a window of 200 messages, beside the pre-fetch alone for the same
// message and budget (Engine.Pack): the goal is the assembly
// within the pre-fetch's own latency and 2 ms. It reports the p50 and
// p95 of each, in the same run, alternating.
func BenchmarkAssemble_Retrieval(b *testing.B) {
	ctx := context.Background()
	a, key := benchWindow(b)
	if _, err := a.Engine.Embed(ctx, nil); err != nil {
		b.Fatal(err)
	}
	req := assemble.Request{Key: key, Message: "Why does handler3 time out again?", Retrieve: true, Scope: store.Filter{SessionID: "s"}}
	var turn, pack []time.Duration
	budget := 0
	for b.Loop() {
		start := time.Now()
		t, err := a.Assemble(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		turn = append(turn, time.Since(start))
		budget = t.Layers[assemble.Retrieval]
		start = time.Now()
		if _, err := a.Engine.Pack(ctx, req.Message, budget, req.Scope, nil); err != nil {
			b.Fatal(err)
		}
		pack = append(pack, time.Since(start))
	}
	for _, d := range []struct {
		name string
		took []time.Duration
	}{{"turn", turn}, {"pack", pack}} {
		slices.Sort(d.took)
		b.ReportMetric(float64(d.took[len(d.took)/2].Microseconds()), d.name+"-p50-µs")
		b.ReportMetric(float64(d.took[len(d.took)*95/100].Microseconds()), d.name+"-p95-µs")
	}
}

// benchWindow is an assembler with an 8,000-token window holding 50
// exchanges (200 messages).
func benchWindow(b *testing.B) (*assemble.Assembler, store.WindowKey) {
	b.Helper()
	a := assembler(b)
	key := store.WindowKey{SessionID: "s", AgentID: "claude"}
	if _, err := a.Windows.Open(context.Background(), key, window.OpenOptions{Limit: 8000, Output: 500, Safety: 100}); err != nil {
		b.Fatal(err)
	}
	if _, err := a.Windows.Append(context.Background(), key, conversation(50)); err != nil {
		b.Fatal(err)
	}
	return a, key
}
