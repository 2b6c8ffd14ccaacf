// Package assemble builds each turn's context to a model's budget from
// several sources (issue 24; seeds 002, 003 and 004).
//
// The layers of a turn (seed 004's L0-L7: identity, preferences, topics,
// entities, the conversation's arc, retrieval, history, the latest
// message) each ask for a minimum, an ideal and a maximum, with a priority
// and an elasticity (Layers), and share the budget in the seed's four
// phases (Negotiate). The Assembler fills them: the window's system
// prompt, the caller's standing instructions and briefing, the window's
// conversation compacted to the history's allocation (compact.go: full,
// windowed, compacted or multi-level by how far it overflows, or a tool
// loop's window laid out by its own layout (window), every
// message not shown whole under a marker that expands, key messages scored
// for the turn), an extractive arc of the requests no longer shown, and
// engram's pre-fetch for the turn's message, which ends the context.
//
// Multi-level histories keep rolling summaries of their chunks in the
// store (summarize.go), extractive or by a configured model in the
// background, written by compare-and-swap on the window's epoch so that a
// stale summarizer never overwrites a newer one.
//
// gate_test.go is seed 002's verification gate.
package assemble
