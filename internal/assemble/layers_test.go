package assemble

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestLayers: seed 004's formulas for a continuing, knowledge-heavy turn
// of a 12,000-token budget with a long history.
func TestLayers(t *testing.T) {
	ls := Layers(Situation{Budget: 12000, Messages: 40, HistoryTokens: 20000, MessageTokens: 120, IdentityTokens: 350,
		PreferenceTokens: 200, TopicCount: 2, EntityCount: 3, Continuing: true})
	got := map[string]string{}
	for _, l := range ls {
		got[l.Name] = fmt.Sprintf("%d/%d/%d p%d e%.1f", l.Min, l.Ideal, l.Max, l.Priority, l.Elasticity)
	}
	want := map[string]string{
		Identity:    "350/350/350 p100 e0.0",
		Preferences: "100/200/200 p95 e0.1",
		// 12 % x 1.3 for two topics, less 40 % under the pressure of a
		// history larger than 70 % of the budget.
		Topics:    "300/1123/3000 p85 e0.6",
		Entities:  "150/1200/1440 p65 e0.7", // three entities: 6 % x 1.8, at most 400 each
		Arc:       "200/803/2400 p88 e0.3",  // 150 x log2(41)
		Retrieval: "200/1200/2160 p75 e0.5",
		History:   "500/3600/7200 p80 e0.4", // 30 % of the budget for 10k-50k tokens of history
		Message:   "120/120/120 p100 e0.0",
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %s, want %s", name, got[name], w)
		}
	}
	// A source holding less than a layer's ideal caps it; a short history
	// is asked for whole.
	ls = Layers(Situation{Budget: 12000, Messages: 4, HistoryTokens: 900, MessageTokens: 50, IdentityTokens: 300,
		TopicCount: 1, Continuing: true, Available: map[string]int{Topics: 120}})
	for _, l := range ls {
		switch l.Name {
		case Topics:
			if l.Max != 120 || l.Ideal != 120 || l.Min != 120 {
				t.Errorf("topics capped by its source: %+v", l)
			}
		case History:
			if l.Ideal != 900 || l.Max != 900 {
				t.Errorf("a short history: %+v", l)
			}
		case Preferences:
			t.Errorf("no preferences, and a layer for them: %+v", l)
		}
	}
}

// TestLayers_Negotiate: for any situation, the layers are valid, and the
// plan fits the budget unless the system prompt and the message alone do
// not (then ErrOverBudget).
func TestLayers_Negotiate(t *testing.T) {
	for seed := range uint64(1000) {
		r := rand.New(rand.NewPCG(seed, 4))
		s := Situation{Budget: 500 + r.IntN(200000), Messages: r.IntN(500), HistoryTokens: r.IntN(300000),
			MessageTokens: r.IntN(3000), IdentityTokens: r.IntN(3000), PreferenceTokens: r.IntN(1500),
			TopicCount: r.IntN(5), EntityCount: r.IntN(8), Depth: []Depth{Minimal, Standard, Deep, ""}[r.IntN(4)],
			Continuing: r.IntN(2) == 0, PrioritizeHistory: r.IntN(2) == 0}
		ls := Layers(s)
		for _, l := range ls {
			if err := l.Validate(); err != nil {
				t.Fatalf("seed %d: %v (%+v)", seed, err, s)
			}
		}
		p, err := Negotiate(s.Budget, ls)
		if s.IdentityTokens+s.MessageTokens > s.Budget {
			if !errors.Is(err, ErrOverBudget) {
				t.Fatalf("seed %d: %v", seed, err)
			}
			continue
		}
		if err != nil || p.Allocated > s.Budget {
			t.Fatalf("seed %d: %d of %d, %v", seed, p.Allocated, s.Budget, err)
		}
	}
}
