package retrieve

import (
	"context"
	"strings"
	"time"

	"github.com/engramhq/engram/internal/store"
)

// span returns the stretch of time q points back to, or nil: none when
// time phrases are off or the filter already bounds the time.
func (h *Hybrid) span(q Query) *Span {
	if h.opts.TimeBoost < 0 || h.off(StageTime) || !q.Filter.Since.IsZero() || !q.Filter.Until.IsZero() {
		return nil
	}
	now := q.Now
	if now.IsZero() {
		now = time.Now()
	}
	if sp, ok := ParseSpan(q.Text, now); ok {
		return &sp
	}
	return nil
}

// withoutPhrase returns text without the words that pointed back in time,
// if any: the span stands for them. ParseSpan reads the text lower-cased,
// so the phrase is found whatever its case ("Last Tuesday").
func withoutPhrase(text string, sp *Span) string {
	if sp == nil {
		return text
	}
	n := len(sp.Phrase)
	for i := 0; i+n <= len(text); i++ {
		if strings.EqualFold(text[i:i+n], sp.Phrase) {
			return text[:i] + " " + text[i+n:]
		}
	}
	return text
}

// inSpan returns f bounded to the span.
func inSpan(f store.Filter, sp *Span) store.Filter {
	f.Since, f.Until = sp.From, sp.To
	return f
}

// addSpan adds to each of all the boost times its score among then, the
// candidates within a span, and appends those all lacks; ranks stay as
// all has them, or as then has them for a hit only then found.
func addSpan(all, then []Fused, boost float64) []Fused {
	at := make(map[int64]int, len(all))
	for i, f := range all {
		at[f.ID] = i
	}
	for _, t := range then {
		if i, ok := at[t.ID]; ok {
			all[i].Score += boost * t.Score
			continue
		}
		t.Score *= boost
		all = append(all, t)
	}
	return all
}

// timeStage names the hits from the span of time a query points back to.
// Their scores were raised in fusion (see pass.fuse); switching the stage
// off (Options.Off) turns the reading of time phrases off, as a negative
// Options.TimeBoost does.
type timeStage struct{}

func (timeStage) name() string  { return StageTime }
func (timeStage) enabled() bool { return true }

func (timeStage) rescore(_ context.Context, p *pass) {
	for i := range p.hits {
		if p.fromSpan[p.hits[i].Chunk.ID] {
			p.hits[i].Boosts = append(p.hits[i].Boosts, StageTime)
		}
	}
}
