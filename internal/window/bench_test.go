package window_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/window"
)

// benchMessages makes n messages of a coding session: exchanges of a
// prompt, a call, its result and an answer, distinct so that every one
// is stored.
func benchMessages(n int) []window.Message {
	var out []window.Message
	for i := 0; len(out) < n; i++ {
		out = append(out, exchange(i)...)
	}
	return out[:n-n%4]
}

// BenchmarkAppendBatched: messages appended in batches of 400, as engram
// add batches records, into a window large enough that nothing is
// evicted, then one that evicts as it goes; reported as messages/s.
func BenchmarkAppendBatched(b *testing.B) {
	for _, limit := range []int{1 << 30, 100_000} {
		b.Run(fmt.Sprintf("limit=%d", limit), func(b *testing.B) {
			ctx := context.Background()
			m := manager(b, filepath.Join(b.TempDir(), "engram.db"))
			msgs := benchMessages(400)
			n := 0
			for i := 0; b.Loop(); i++ {
				key := store.WindowKey{SessionID: fmt.Sprintf("s%d", i), AgentID: "a"}
				if _, err := m.Open(ctx, key, window.OpenOptions{Limit: limit}); err != nil {
					b.Fatal(err)
				}
				if _, err := m.Append(ctx, key, msgs); err != nil {
					b.Fatal(err)
				}
				n += len(msgs)
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkAppendOne: one message per append, each its own transaction,
// into a window of a 200-message session that evicts as it goes;
// reported with the p95 latency.
func BenchmarkAppendOne(b *testing.B) {
	ctx := context.Background()
	m := manager(b, filepath.Join(b.TempDir(), "engram.db"))
	key := store.WindowKey{SessionID: "s", AgentID: "a"}
	if _, err := m.Open(ctx, key, window.OpenOptions{Limit: 64_000}); err != nil {
		b.Fatal(err)
	}
	msgs := benchMessages(4000)
	if _, err := m.Append(ctx, key, msgs[:200]); err != nil {
		b.Fatal(err)
	}
	var lat []time.Duration
	i := 200
	for b.Loop() {
		if i+4 > len(msgs) {
			b.Fatal("ran out of messages: raise benchMessages")
		}
		// A whole exchange, one message at a time, so that every result
		// follows its call.
		for _, msg := range msgs[i : i+4] {
			start := time.Now()
			if _, err := m.Append(ctx, key, []window.Message{msg}); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		i += 4
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, "p95-ms")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
}

// BenchmarkAddBaseline: the same messages stored as engram add stores
// records (one record per content block, in one transaction per 400
// messages), without a window: the baseline of BenchmarkAppendBatched.
func BenchmarkAddBaseline(b *testing.B) {
	ctx := context.Background()
	eng, err := engine.New(sqlitetest.OpenPath(b, filepath.Join(b.TempDir(), "engram.db"), sqlite.Options{}), engine.Options{})
	if err != nil {
		b.Fatal(err)
	}
	msgs := benchMessages(400)
	n := 0
	for i := 0; b.Loop(); i++ {
		var recs []engine.Record
		for _, m := range msgs {
			for _, bl := range m.Blocks {
				c := bl.Text
				if bl.Type == window.BlockToolUse {
					c = string(bl.Input)
				}
				recs = append(recs, engine.Record{Session: fmt.Sprintf("s%d", i), Agent: "a", Type: store.AgentResponse, Content: []byte(c)})
			}
		}
		if _, err := eng.Add(ctx, recs); err != nil {
			b.Fatal(err)
		}
		n += len(msgs)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msgs/s")
}
