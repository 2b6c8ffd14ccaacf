// Package window manages agents' context windows: a ledger per (session,
// agent) of the messages in the agent's window, the thresholds at which
// it evicts, and what it evicts. Evicted content is never lost: it stays
// in the content store, and a reference marker ([CTX-REF:…]) in the window
// expands back to it byte for byte.
//
// The window's pure core, with no store: messages as content blocks
// (message.go), the one rule that keeps a tool call with its result
// (units.go), the budget and thresholds by agent role (policy.go), and the
// window itself as a pure value, the one eviction engine of every role
// (layout.go: Layout, where to start): its segments kept, evicted behind
// markers or clipped, the strategies that choose what goes (strategies.go,
// evict.go), re-admission, and its digest of lines of evicted tool results
// (digest.go, lines.go, entities.go). Whoever reads what a block says
// reads Block.Readable (readable.go), which gives the text of a block
// kept in its vendor's form (an MCP tool's array of content blocks)
// without its JSON or base64. The Manager (manager.go, laidout.go)
// keeps windows in the store: a window's Layout is rebuilt from its ledger
// in any process, byte for byte the same. A marker's reference is named by
// the run of the ledger it stands for (store.RunRefID), so the markers of
// views and assembled turns (view.go, refer.go) expand from the ledger
// with nothing written. A pipeline agent's window hands
// off to a new instance of the agent (handoff.go: Manager.Handoff, due at
// its policy's Handoff share): a structured state (handoff_state.go),
// built with no model from the window and the archivalist's facts, stored
// as a handoff_state entry chained by index, opens the next window, with
// references that stand for every message of the prior one.
//
// The core follows seed 000 ("Memory Management Thresholds", "Eviction
// Strategies") where it is sound, and departs from it where it is not:
//
//   - The seed selects individual entries to evict, skipping those it
//     preserves, so that one eviction can leave a tool result without its
//     call, or cut a conversation into many small references. Here the
//     unit of eviction is Units' unit (a message, or a tool call with all
//     its results), and a run of consecutive units becomes one reference,
//     capped in size (MaxRefTokens) so that it can be re-admitted whole.
//   - The seed's targets are shares of the window's current size, so a
//     window just over its threshold evicts a little, then crosses again
//     a few turns later: every eviction rewrites what a provider's prompt
//     cache holds. Here a window evicts down to a low-water mark (Target),
//     in one large step, so that what stands before the newest messages is
//     byte-stable for many turns between evictions.
package window
