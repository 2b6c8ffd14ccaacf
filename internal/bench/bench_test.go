package bench

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/tokens"
)

func TestCorpus_Deterministic(t *testing.T) {
	a, b := NewCorpus(7), NewCorpus(7)
	for range 200 {
		if x, y := a.Next(), b.Next(); x != y {
			t.Fatalf("same seed, different messages: %+v vs %+v", x, y)
		}
	}
}

func TestCorpus_Shape(t *testing.T) {
	c := NewCorpus(1)
	if v := c.Vocabulary(); len(v) != VocabSize {
		t.Fatalf("vocabulary of %d words", len(v))
	}
	seen := map[string]bool{}
	bytes := 0
	const n = 2000
	for range n {
		m := c.Next()
		if seen[m.Content] || m.Content == "" || !m.Type.Valid() {
			t.Fatalf("bad or duplicate message %+v", m)
		}
		seen[m.Content] = true
		bytes += len(m.Content)
	}
	if avg := bytes / n; avg < 400 || avg > 4000 {
		t.Errorf("average message of %d bytes: not a realistic size", avg)
	}
}

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	l := Summarize(ds)
	if l.P50 != 50*time.Millisecond || l.P95 != 95*time.Millisecond || l.P99 != 99*time.Millisecond || l.Max != 100*time.Millisecond {
		t.Errorf("Summarize = %+v", l)
	}
	if (Summarize(nil) != Latencies{}) {
		t.Error("Summarize(nil) not zero")
	}
}

func TestRunArchive(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "a.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	}()
	enc := tokens.MustGet("o200k_base")
	arc, err := archive.New(st, archive.Options{Encoding: enc, Limits: archive.Limits{PatternsPerMinute: -1, WritesPerMinute: -1}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := RunArchive(ctx, arc, enc, ArchiveOptions{Sessions: 2, AgentsPerSession: 3, Storm: 200 * time.Millisecond,
		Mixed: 300 * time.Millisecond, WriteRate: 20, Readers: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	gv, _, err := st.ArchiveVersions(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Agents != 6 || rep.StormWrites == 0 || rep.Reads == 0 || gv == 0 || rep.TokensPerRead <= 0 || rep.FullTokens < rep.StandardTokens {
		t.Errorf("report = %+v (gv %d)", rep, gv)
	}
	// A storm shorter than any write, as on a loaded machine (CI saw a
	// 200 ms storm end with none): every agent's first write still counts.
	st2, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "b.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st2.Close() }()
	arc, err = archive.New(st2, archive.Options{Encoding: enc, Limits: archive.Limits{PatternsPerMinute: -1, WritesPerMinute: -1}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err = RunArchive(ctx, arc, enc, ArchiveOptions{Sessions: 2, AgentsPerSession: 3, Storm: time.Nanosecond,
		Mixed: time.Nanosecond, WriteRate: 20, Readers: 1, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	if rep.StormWrites < 6 {
		t.Errorf("a storm of 1 ns: %d writes, want one an agent at least (6)", rep.StormWrites)
	}
}
