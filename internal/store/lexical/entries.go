package lexical

import (
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/terms"
)

// EntryCoverage gathers, for store.Store.EntryCoverage, which of a query's
// words whole entries hold, and gives each entry's share of the query as
// Coverage weighs it.
type EntryCoverage struct {
	groups  []terms.Group
	wanted  []string
	counter *terms.Counter
	hits    []store.Hit
	counts  []map[string]int
}

// NewEntryCoverage returns an EntryCoverage for the query's groups.
func NewEntryCoverage(groups []terms.Group) *EntryCoverage {
	wanted := Terms(groups)
	return &EntryCoverage{groups: groups, wanted: wanted, counter: terms.NewCounter(wanted)}
}

// Add records the query words entry id holds: from its term set (see
// terms.Set), which says only whether it holds a word, or, for an entry
// without one (set nil), by counting them in its content.
func (c *EntryCoverage) Add(id string, set, content []byte) {
	n := map[string]int{}
	if set != nil {
		for _, w := range c.wanted {
			if terms.SetHas(set, w) {
				n[w] = 1
			}
		}
	} else {
		n = c.counter.Count(string(content))
	}
	c.hits = append(c.hits, store.Hit{Chunk: store.Chunk{EntryID: id}})
	c.counts = append(c.counts, n)
}

// Shares returns the coverage of each entry added, by ID (see Coverage for
// p, total and capped).
func (c *EntryCoverage) Shares(p Plan, total, capped int64) map[string]float64 {
	Coverage(c.groups, p, c.hits, c.counts, total, capped)
	out := make(map[string]float64, len(c.hits))
	for _, h := range c.hits {
		out[h.Chunk.EntryID] = h.Coverage
	}
	return out
}
