package bench

import (
	"fmt"
	"slices"
	"time"
)

// Latencies summarises a set of timings.
type Latencies struct {
	N    int           `json:"n"`
	P50  time.Duration `json:"p50_ns"`
	P95  time.Duration `json:"p95_ns"`
	P99  time.Duration `json:"p99_ns"`
	Max  time.Duration `json:"max_ns"`
	Mean time.Duration `json:"mean_ns"`
}

// Summarize computes percentiles (nearest rank) of ds.
func Summarize(ds []time.Duration) Latencies {
	if len(ds) == 0 {
		return Latencies{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[max(0, min(len(s)-1, i))]
	}
	return Latencies{N: len(s), P50: rank(0.50), P95: rank(0.95), P99: rank(0.99), Max: s[len(s)-1], Mean: sum / time.Duration(len(s))}
}

// String formats the summary in milliseconds.
func (l Latencies) String() string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }
	return fmt.Sprintf("p50 %s  p95 %s  p99 %s  max %s ms (n=%d)", ms(l.P50), ms(l.P95), ms(l.P99), ms(l.Max), l.N)
}
