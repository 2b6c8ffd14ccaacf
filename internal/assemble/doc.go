// Package assemble builds each turn's context to a model's budget from
// several sources (issue 24; seeds 002, 003 and 004). This is its first
// part: the negotiation of a budget among the layers of a turn (seed 004's
// L0-L7: identity, preferences, topics, entities, the conversation's arc,
// retrieval, history, the latest message), each asking for a minimum, an
// ideal and a maximum, with a priority and an elasticity (Negotiate), and
// the sizes of those layers for a turn's situation by the seed's formulas
// (Layers). Filling the layers from a window, the archivalist's briefing
// and engram's pre-fetch, progressive compaction and handoff come next.
package assemble
