package assemble

import "math"

// The layers of a turn's context, seed 004's L0-L7.
const (
	// Identity is the system prompt: who the agent is (L0).
	Identity = "L0_identity"
	// Preferences are the user's and the project's standing instructions
	// (L1).
	Preferences = "L1_preferences"
	// Topics is knowledge about the subjects in hand: the archivalist's
	// briefing (L2).
	Topics = "L2_topics"
	// Entities is knowledge about the files and names in hand (L3).
	Entities = "L3_entities"
	// Arc is the conversation's arc: what was asked and decided so far,
	// with the markers of what left the window (L4).
	Arc = "L4_arc"
	// Retrieval is what engram's pre-fetch finds for the latest message
	// (L5).
	Retrieval = "L5_retrieval"
	// History is the window's messages (L6).
	History = "L6_history"
	// Message is the latest user message (L7).
	Message = "L7_message"
)

// Depth is how much knowledge a turn wants beside its conversation.
type Depth string

// Depths, seed 004's knowledge depth.
const (
	Minimal  Depth = "minimal"
	Standard Depth = "standard"
	Deep     Depth = "deep"
)

func (d Depth) factor() float64 {
	switch d {
	case Minimal:
		return 0.5
	case Deep:
		return 1.5
	}
	return 1
}

// Situation is what a turn's layers are sized from: the budget, and what
// the conversation and its sources hold (seed 004's BudgetInput).
type Situation struct {
	Budget int
	// Messages and HistoryTokens are the conversation so far (the window's
	// messages and what they take whole); MessageTokens the latest
	// message's.
	Messages      int
	HistoryTokens int
	MessageTokens int
	// IdentityTokens and PreferenceTokens are what the system prompt and
	// the standing instructions take: rigid layers get what they hold
	// (not the seed's caps, which would cut a long system prompt).
	IdentityTokens   int
	PreferenceTokens int
	// Topics and EntityCount are the subjects and names found in the
	// latest message and the recent ones.
	TopicCount  int
	EntityCount int
	// Available is what each source could give at most, by layer: a layer
	// never asks for more than its source holds (the seed's bundles).
	Available map[string]int
	Depth     Depth
	// Continuing: the user goes on with a conversation (not its first
	// message).
	Continuing bool
	// PrioritizeHistory: the user wants the conversation kept over
	// knowledge.
	PrioritizeHistory bool
}

// Layers sizes the eight layers of a turn for a situation, by seed 004's
// formulas with two changes: the identity and the preferences ask for
// what they hold (the seed reserves 2 % and 3 % of the budget whatever
// they hold, and refuses more than 500 and 800 tokens of them), and no
// layer asks beyond what its source holds (Available; the seed only
// bounds the history so). Identity and the latest message are rigid; the
// others elastic.
func Layers(s Situation) []Layer {
	b := float64(s.Budget)
	depth := s.Depth.factor()
	pressure := math.Min(1, float64(s.HistoryTokens)/(b*0.7))
	knowledgeHeavy := s.TopicCount >= 2 || s.Depth == Deep
	dialogueHeavy := s.Messages > 20 && s.PrioritizeHistory
	floor := func(x float64) int { return int(math.Max(0, math.Floor(x))) }

	var ls []Layer
	add := func(l Layer) {
		if avail, ok := s.Available[l.Name]; ok {
			l.Max = min(l.Max, avail)
		}
		// The seed's ideals can pass their caps (deep knowledge, many
		// topics); its allocation clamps them, as this does.
		l.Ideal = min(l.Ideal, l.Max)
		l.Min = min(l.Min, l.Ideal)
		ls = append(ls, l)
	}
	add(Layer{Name: Identity, Min: s.IdentityTokens, Ideal: s.IdentityTokens, Max: s.IdentityTokens, Priority: 100})
	if s.PreferenceTokens > 0 {
		add(Layer{Name: Preferences, Min: min(100, s.PreferenceTokens), Ideal: s.PreferenceTokens, Max: s.PreferenceTokens,
			Priority: 95, Elasticity: 0.1})
	}
	topicFactor := math.Min(2, 1+float64(s.TopicCount-1)*0.3)
	topics := Layer{Name: Topics, Ideal: floor(b * 0.12 * depth * topicFactor * (1 - pressure*0.4)), Max: floor(b * 0.25),
		Priority: 70, Elasticity: 0.6}
	if s.TopicCount > 0 {
		topics.Min = 300
	}
	if knowledgeHeavy {
		topics.Priority = 85
	}
	add(topics)
	entityFactor := math.Min(2, 1+float64(s.EntityCount-1)*0.4)
	entities := Layer{Name: Entities, Ideal: floor(math.Min(b*0.06*entityFactor, float64(s.EntityCount)*400)), Max: floor(b * 0.12),
		Priority: 65, Elasticity: 0.7}
	if s.EntityCount > 0 {
		entities.Min = 150
	}
	add(entities)
	arc := Layer{Name: Arc, Ideal: min(floor(150*math.Log2(float64(max(1, s.Messages))+1)*depth), floor(b*0.15)), Max: floor(b * 0.20),
		Priority: 30, Elasticity: 0.3}
	if s.Continuing {
		arc.Min, arc.Priority = 200, 88
	}
	add(arc)
	coverage := 1 - math.Min(1, float64(s.Available[Topics])/(b*0.15))
	add(Layer{Name: Retrieval, Min: 200, Ideal: floor(b * 0.10 * math.Max(0.3, coverage) * depth), Max: floor(b * 0.18),
		Priority: 75, Elasticity: 0.5})
	ratio := 0.25
	switch h := s.HistoryTokens; {
	case h <= 3000:
		ratio = math.Min(1, float64(h)/b)
	case h <= 10000:
		ratio = 0.35
	case h <= 50000:
		ratio = 0.30
	}
	boost := 1.0
	if s.PrioritizeHistory {
		boost *= 1.3
	}
	if dialogueHeavy {
		boost *= 1.2
	}
	history := Layer{Name: History, Ideal: min(floor(b*ratio*boost), s.HistoryTokens), Max: min(floor(b*0.60), s.HistoryTokens),
		Priority: 80, Elasticity: 0.4}
	if s.Continuing {
		history.Min = 500
	}
	if dialogueHeavy {
		history.Priority = 90
	}
	add(history)
	add(Layer{Name: Message, Min: s.MessageTokens, Ideal: s.MessageTokens, Max: s.MessageTokens, Priority: 100})
	return ls
}
