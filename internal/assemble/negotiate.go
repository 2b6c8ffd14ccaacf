package assemble

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// ErrInvalid marks layers or a budget that cannot be negotiated: the
// caller's mistake, named in the error.
var ErrInvalid = errors.New("invalid budget")

// ErrOverBudget is returned by Negotiate when the rigid layers alone (the
// identity, the user's message) need more than the budget.
var ErrOverBudget = errors.New("the fixed layers do not fit the budget")

// A Layer is one source of a turn's context asking for tokens (seed 004):
// at least Min to be included at all, Ideal if it can, never more than
// Max. Priority (0-100) decides which layers are dropped when not every
// minimum fits, and which take what is left past every ideal; Elasticity
// (0-1) how much of a shortfall it absorbs when not every ideal fits. A
// layer of elasticity 0 is rigid: it gets its Ideal or the negotiation
// fails.
type Layer struct {
	Name            string
	Min, Ideal, Max int
	Priority        int
	Elasticity      float64
}

// Validate checks a layer: a name, 0 <= Min <= Ideal <= Max, a priority
// within 0-100, an elasticity within 0-1.
func (l Layer) Validate() error {
	switch {
	case l.Name == "":
		return fmt.Errorf("%w: a layer without a name", ErrInvalid)
	case l.Min < 0 || l.Min > l.Ideal || l.Ideal > l.Max:
		return fmt.Errorf("%w: layer %s: min %d, ideal %d, max %d must be 0 <= min <= ideal <= max", ErrInvalid, l.Name, l.Min, l.Ideal, l.Max)
	case l.Priority < 0 || l.Priority > 100:
		return fmt.Errorf("%w: layer %s: priority %d is not within 0-100", ErrInvalid, l.Name, l.Priority)
	case !(l.Elasticity >= 0 && l.Elasticity <= 1):
		return fmt.Errorf("%w: layer %s: elasticity %v is not within 0-1", ErrInvalid, l.Name, l.Elasticity)
	}
	return nil
}

// An Allocation is what a layer was given.
type Allocation struct {
	Layer
	// Tokens is the layer's allocation: 0 when it is dropped, else
	// within [Min, Max].
	Tokens int
	// Dropped: the layer's minimum did not fit beside those of the
	// layers of higher priority.
	Dropped bool
}

// A Plan is a negotiated budget: each layer's allocation, in the order
// the layers were given.
type Plan struct {
	Budget int
	Layers []Allocation
	// Allocated is the sum of the allocations, at most Budget.
	Allocated int
}

// Tokens returns the allocation of the named layer, 0 if there is none.
func (p Plan) Tokens(name string) int {
	for _, a := range p.Layers {
		if a.Name == name {
			return a.Tokens
		}
	}
	return 0
}

// Negotiate shares budget tokens among layers, in four phases (seed 004's,
// made exact):
//
//  1. Rigid layers (elasticity 0) get their Ideal; if they alone need more
//     than the budget, the negotiation fails (ErrOverBudget).
//  2. Elastic layers get their Min; while the minimums do not fit, the
//     layer of lowest priority is dropped (a layer below its minimum is
//     not worth including: seed 004's "hard floor").
//  3. What is left goes toward the ideals. When it cannot reach them all,
//     the shortfall is shared in proportion to each layer's want (Ideal -
//     Min) times its elasticity, so a rigid-minded layer stays near its
//     ideal and an elastic one gives way.
//  4. What is left past every ideal goes to the layers of highest priority,
//     up to their Max.
//
// The seed distributes the second pass by priority-weighted shares whose
// sum is below one and stops early, so its result depends on the order of
// the layers and leaves tokens to a third pass by accident; it declares
// elasticity and never uses it; and it cuts layers below their floor
// rather than dropping them. Here every token is accounted for, the order
// of the layers only breaks exact ties, and the same input gives the same
// plan.
func Negotiate(budget int, layers []Layer) (Plan, error) {
	if budget <= 0 {
		return Plan{}, fmt.Errorf("%w: a budget of %d tokens", ErrInvalid, budget)
	}
	seen := map[string]bool{}
	for _, l := range layers {
		if err := l.Validate(); err != nil {
			return Plan{}, err
		}
		if seen[l.Name] {
			return Plan{}, fmt.Errorf("%w: layer %s is given twice", ErrInvalid, l.Name)
		}
		seen[l.Name] = true
	}
	p := Plan{Budget: budget, Layers: make([]Allocation, len(layers))}
	left := budget
	// Phase 1: the rigid layers.
	rigid := 0
	for i, l := range layers {
		p.Layers[i].Layer = l
		if l.Elasticity == 0 {
			p.Layers[i].Tokens = l.Ideal
			rigid += l.Ideal
		}
	}
	if rigid > budget {
		return Plan{}, fmt.Errorf("%w: they need %d tokens, the budget is %d", ErrOverBudget, rigid, budget)
	}
	left -= rigid
	// Phase 2: the minimums of the elastic layers, dropping the lowest
	// priorities while they do not fit.
	var in []int // elastic layers kept, by priority, highest first
	for i, l := range layers {
		if l.Elasticity > 0 {
			in = append(in, i)
		}
	}
	slices.SortStableFunc(in, func(a, b int) int { return cmp.Compare(layers[b].Priority, layers[a].Priority) })
	mins := 0
	for _, i := range in {
		mins += layers[i].Min
	}
	for mins > left {
		last := in[len(in)-1]
		p.Layers[last].Dropped = true
		mins -= layers[last].Min
		in = in[:len(in)-1]
	}
	for _, i := range in {
		p.Layers[i].Tokens = layers[i].Min
	}
	left -= mins
	// Phase 3: toward the ideals.
	wants := 0
	for _, i := range in {
		wants += layers[i].Ideal - layers[i].Min
	}
	if wants <= left {
		for _, i := range in {
			p.Layers[i].Tokens = layers[i].Ideal
		}
		left -= wants
	} else {
		left -= p.shareShortfall(in, left)
	}
	// Phase 4: past the ideals, by priority, up to the maximums.
	for _, i := range in {
		if left == 0 {
			break
		}
		give := min(left, layers[i].Max-p.Layers[i].Tokens)
		p.Layers[i].Tokens += give
		left -= give
	}
	p.Allocated = budget - left
	return p, nil
}

// shareShortfall gives the layers in (at their minimums) as much of their
// wants as avail allows, the shortfall shared in proportion to want times
// elasticity, and returns what it gave (all of avail).
func (p *Plan) shareShortfall(in []int, avail int) int {
	type claim struct {
		i    int
		want int
		w    float64 // want * elasticity
	}
	var cs []claim
	short := -avail
	for _, i := range in {
		l := p.Layers[i].Layer
		if want := l.Ideal - l.Min; want > 0 {
			cs = append(cs, claim{i, want, float64(want) * l.Elasticity})
			short += want
		}
	}
	// Water-filling: a layer whose share of the cut would exceed its want
	// gives all of it, and the rest is shared again among the others.
	cut := make(map[int]float64, len(cs))
	open := cs
	for short > 0 && len(open) > 0 {
		var sum float64
		for _, c := range open {
			sum += c.w
		}
		var next []claim
		capped := false
		s0 := float64(short)
		for _, c := range open {
			if s0*c.w/sum >= float64(c.want) {
				cut[c.i] = float64(c.want)
				short -= c.want
				capped = true
			} else {
				next = append(next, c)
			}
		}
		if !capped {
			for _, c := range open {
				cut[c.i] = float64(short) * c.w / sum
			}
			break
		}
		open = next
	}
	// Whole tokens: each layer gets its want less its cut, rounded down;
	// the tokens the rounding leaves go to the layers of highest priority
	// (in's order), one each.
	gave := 0
	for _, c := range cs {
		g := c.want - int(ceil(cut[c.i]))
		p.Layers[c.i].Tokens += g
		gave += g
	}
	for _, c := range cs {
		if gave == avail {
			break
		}
		l := &p.Layers[c.i]
		if l.Tokens < l.Ideal {
			l.Tokens++
			gave++
		}
	}
	return gave
}

// ceil rounds up, a hair of float error kept from costing a token.
func ceil(x float64) float64 {
	n := float64(int(x))
	if x-n > 1e-9 {
		return n + 1
	}
	return n
}
