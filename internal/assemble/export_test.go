package assemble

import "github.com/engramhq/engram/internal/store"

// MaxSummaryTries is how many times the model is given a chunk.
const MaxSummaryTries = maxSummaryTries

// CachedSummaries returns the summaries the Assembler keeps in memory for
// a window.
func CachedSummaries(a *Assembler, key store.WindowKey) []store.WindowSummary {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sums[key].sums
}
