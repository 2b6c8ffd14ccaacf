package bench

import (
	"testing"
	"time"
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
