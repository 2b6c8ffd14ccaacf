package api

import (
	"fmt"

	"github.com/engramhq/engram/internal/archive"
)

// Range is what a numeric input of an operation may be: zero (or absent)
// means Default, anything else must lie in Min..Max. The MCP tools, the
// HTTP API and the CLI check the same inputs with the same ranges, so a
// value is refused alike everywhere, with the range in the message.
//
// The maxima keep an answer to a size a model can read, within the MCP
// server's cap on a tool result (mcpserver.MaxResultBytes, 96 KiB): 50
// search hits are about 60 KB of text and structured content, 8,000 tokens
// of stored content about 70 KB.
type Range struct {
	Name     string
	Min, Max int
	// Default is what zero means; 0 when zero means "not given".
	Default int
}

// The ranges of the operations' numeric inputs.
var (
	LimitRange        = Range{Name: "limit", Min: 1, Max: 50, Default: 10}
	MaxResultsRange   = Range{Name: "max_results", Min: 1, Max: 50, Default: 10}
	SpansRange        = Range{Name: "spans", Min: 1, Max: 5, Default: 3}
	MaxTokensRange    = Range{Name: "max_tokens", Min: 100, Max: 8000, Default: 4000}
	PrefetchBudget    = Range{Name: "budget", Min: 1, Max: 32000, Default: 2000}
	RemainingRange    = Range{Name: "remaining", Min: 1, Max: 10_000_000}
	RecallBudgetRange = Range{Name: "budget", Min: 1, Max: archive.MaxAskBudget, Default: archive.DefaultAskBudget}
	TTLMinutesRange   = Range{Name: "ttl_minutes", Min: 1, Max: 7 * 24 * 60, Default: 30}
	LinesRange        = Range{Name: "line", Min: 1, Max: 100_000_000}
	VersionRange      = Range{Name: "version", Min: 1, Max: 1 << 30}
)

// Check returns v, or the default if v is zero; a value out of the range
// is an *InputError that says the range.
func (r Range) Check(v int) (int, error) {
	if v == 0 {
		return r.Default, nil
	}
	if v < r.Min || v > r.Max {
		return 0, &InputError{Msg: r.refusal(r.Name, v)}
	}
	return v, nil
}

// CheckAs checks v as r does, naming it name (start_line for LinesRange).
func (r Range) CheckAs(name string, v int) (int, error) {
	r.Name = name
	return r.Check(v)
}

func (r Range) refusal(name string, v int) string {
	zero := "not given"
	if r.Default != 0 {
		zero = fmt.Sprintf("the default, %d", r.Default)
	}
	return fmt.Sprintf("%s is %d; it must be from %d to %d, or 0 (%s)", name, v, r.Min, r.Max, zero)
}
