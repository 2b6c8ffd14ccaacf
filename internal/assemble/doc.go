// Package assemble builds each turn's context to a model's budget from
// several sources (issue 24; seeds 002, 003 and 004).
//
// Built so far: the negotiation of a budget among the layers of a turn
// (seed 004's L0-L7: identity, preferences, topics, entities, the
// conversation's arc, retrieval, history, the latest message), each asking
// for a minimum, an ideal and a maximum, with a priority and an elasticity
// (Negotiate); the sizes of those layers for a turn's situation by the
// seed's formulas (Layers); and the Assembler, which fills them: the
// window's system prompt, the caller's standing instructions and
// briefing, the window's conversation laid out to the history's
// allocation by the window's own engine (window.Manager.View: markers that
// expand for what it does not show), an extractive arc of the requests no
// longer shown, and engram's pre-fetch for the turn's message, which ends
// the context. Progressive compaction's strategies, rolling summaries,
// handoff and snapshots come next.
package assemble
