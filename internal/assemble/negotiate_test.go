package assemble

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestNegotiate(t *testing.T) {
	layers := []Layer{
		{Name: "identity", Min: 300, Ideal: 300, Max: 300, Priority: 100},
		{Name: "history", Min: 500, Ideal: 4000, Max: 6000, Priority: 80, Elasticity: 0.4},
		{Name: "retrieval", Min: 200, Ideal: 1200, Max: 2000, Priority: 75, Elasticity: 0.5},
		{Name: "message", Min: 100, Ideal: 100, Max: 100, Priority: 100},
	}
	// Room for every ideal, and 1,000 more: it goes to the highest
	// priority first, up to its maximum.
	p, err := Negotiate(6600, layers)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(p.Tokens("identity"), p.Tokens("history"), p.Tokens("retrieval"), p.Tokens("message"), p.Allocated); got != "300 5000 1200 100 6600" {
		t.Errorf("past the ideals: %s", got)
	}
	// 1,000 short of the ideals: shared by want times elasticity, the
	// history (want 3,500 x 0.4 = 1,400) and the retrieval (1,000 x 0.5 =
	// 500) giving 736.8 and 263.2, the token of rounding to the history,
	// of higher priority.
	p, err = Negotiate(4600, layers)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(p.Tokens("history"), p.Tokens("retrieval"), p.Allocated); got != "3264 936 4600" {
		t.Errorf("short of the ideals: %s", got)
	}
	// Not every minimum fits: the lowest priority is dropped whole.
	p, err = Negotiate(1000, layers)
	if err != nil {
		t.Fatal(err)
	}
	if p.Tokens("retrieval") != 0 || !p.Layers[2].Dropped || p.Tokens("history") != 600 {
		t.Errorf("minimums: %+v", p.Layers)
	}
	// The rigid layers alone over the budget.
	if _, err := Negotiate(350, layers); !errors.Is(err, ErrOverBudget) {
		t.Errorf("rigid layers over the budget: %v", err)
	}
	for name, ls := range map[string][]Layer{
		"min over ideal":   {{Name: "a", Min: 5, Ideal: 4, Max: 9, Elasticity: 1}},
		"no name":          {{Min: 1, Ideal: 1, Max: 1}},
		"twice":            {{Name: "a", Max: 1}, {Name: "a", Max: 1}},
		"priority":         {{Name: "a", Max: 1, Priority: 101}},
		"elasticity":       {{Name: "a", Max: 1, Elasticity: 1.5}},
		"negative minimum": {{Name: "a", Min: -1, Max: 1}},
	} {
		if _, err := Negotiate(100, ls); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := Negotiate(0, layers); !errors.Is(err, ErrInvalid) {
		t.Errorf("a budget of 0: %v", err)
	}
}

// TestNegotiate_Properties: on random layers and budgets, a plan never
// exceeds its budget; each layer gets 0 (dropped) or within its minimum
// and maximum, a rigid one its ideal; no layer is dropped while one of
// lower priority is kept; tokens are left over only when every kept layer
// is at its maximum; every kept layer reaches its ideal when the ideals
// fit; and the same input gives the same plan.
func TestNegotiate_Properties(t *testing.T) {
	for seed := range uint64(2000) {
		r := rand.New(rand.NewPCG(seed, 24))
		var ls []Layer
		for i := range 1 + r.IntN(8) {
			lo := r.IntN(800)
			ideal := lo + r.IntN(3000)
			l := Layer{Name: fmt.Sprint("L", i), Min: lo, Ideal: ideal, Max: ideal + r.IntN(2000), Priority: r.IntN(101)}
			if r.IntN(4) > 0 {
				l.Elasticity = float64(1+r.IntN(10)) / 10
			} else {
				l.Max = l.Ideal
			}
			ls = append(ls, l)
		}
		budget := 1 + r.IntN(12000)
		p, err := Negotiate(budget, ls)
		rigid, ideals := 0, 0
		for _, l := range ls {
			ideals += l.Ideal
			if l.Elasticity == 0 {
				rigid += l.Ideal
			}
		}
		if rigid > budget {
			if !errors.Is(err, ErrOverBudget) {
				t.Fatalf("seed %d: rigid %d over %d: %v", seed, rigid, budget, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		sum := 0
		atMax := true
		for _, a := range p.Layers {
			sum += a.Tokens
			switch {
			case a.Dropped:
				if a.Tokens != 0 {
					t.Fatalf("seed %d: dropped %s holds %d", seed, a.Name, a.Tokens)
				}
				for _, b := range p.Layers {
					if !b.Dropped && b.Elasticity > 0 && b.Priority < a.Priority {
						t.Fatalf("seed %d: %s (priority %d) dropped, %s (priority %d) kept", seed, a.Name, a.Priority, b.Name, b.Priority)
					}
				}
			case a.Tokens < a.Min || a.Tokens > a.Max:
				t.Fatalf("seed %d: %s gets %d outside [%d, %d]", seed, a.Name, a.Tokens, a.Min, a.Max)
			case a.Elasticity == 0 && a.Tokens != a.Ideal:
				t.Fatalf("seed %d: rigid %s gets %d, not its ideal %d", seed, a.Name, a.Tokens, a.Ideal)
			case ideals <= budget && a.Tokens < a.Ideal:
				t.Fatalf("seed %d: the ideals fit, and %s gets %d < %d", seed, a.Name, a.Tokens, a.Ideal)
			}
			if !a.Dropped && a.Tokens < a.Max {
				atMax = false
			}
		}
		if sum != p.Allocated || sum > budget {
			t.Fatalf("seed %d: %d allocated (says %d) of %d", seed, sum, p.Allocated, budget)
		}
		if sum < budget && !atMax {
			t.Fatalf("seed %d: %d of %d allocated, and a layer is under its maximum: %+v", seed, sum, budget, p.Layers)
		}
		again, _ := Negotiate(budget, slices.Clone(ls))
		if fmt.Sprint(again) != fmt.Sprint(p) {
			t.Fatalf("seed %d: not deterministic", seed)
		}
	}
}

// TestNegotiate_Elasticity: of two layers wanting as much, the less
// elastic keeps more of its want.
func TestNegotiate_Elasticity(t *testing.T) {
	p, err := Negotiate(1000, []Layer{
		{Name: "stiff", Ideal: 1000, Max: 1000, Priority: 50, Elasticity: 0.2},
		{Name: "soft", Ideal: 1000, Max: 1000, Priority: 50, Elasticity: 0.8},
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.Tokens("stiff") != 800 || p.Tokens("soft") != 200 {
		t.Errorf("stiff %d, soft %d; want 800 and 200", p.Tokens("stiff"), p.Tokens("soft"))
	}
}

func BenchmarkNegotiate(b *testing.B) {
	ls := Layers(Situation{Budget: 12000, Messages: 40, HistoryTokens: 20000, MessageTokens: 120, IdentityTokens: 350,
		PreferenceTokens: 200, TopicCount: 2, EntityCount: 3, Continuing: true})
	for b.Loop() {
		if _, err := Negotiate(12000, ls); err != nil {
			b.Fatal(err)
		}
	}
}
