// Package hook plugs engram into agent harnesses through their hooks:
// short-lived processes the harness starts at points of a session, with
// the event's JSON on standard input, whose standard output may add
// context for the model or replace a tool's output.
//
// A Runner handles one event (Run) for one harness:
//
//   - SessionStart registers the session's agent in the archivalist and
//     injects a briefing (the standard tier by default, Options.Briefing):
//     the session's state, the shared memory's open intents, active
//     patterns, failures with their resolutions and decisions, and, when
//     the session is new, where the project's last session stopped. After a
//     compaction it also lists the [CTX-REF] markers that PreCompact
//     recorded, so that the model can get any compacted turn back exactly.
//   - UserPromptSubmit stores the prompt and injects engram's pre-fetch
//     block for it: only what clears the relevance floor (and the
//     confidence thresholds, if set), under a token budget.
//   - PostToolUse stores the tool call and its whole result (Claude Code
//     cuts a command's output at 30,000 characters and keeps the rest in a
//     file, which is read), and replaces a result over a size for the
//     model by its head, its tail and a marker that expands it: eviction
//     at the source.
//   - PreCompact imports the transcript so far and records one reference
//     for the turns about to be compacted; Stop imports the rest and
//     updates the session's resume point.
//
// What the hook injects is wrapped in an <engram-context> element
// (Mark), which the transcript importer recognises, so that engram's own
// briefings are never stored as if the agent had seen them first.
//
// Transcripts (Import) are read incrementally: the offset of the last
// whole line read is kept per file in the store, and every record carries
// a message id derived from the transcript (the line's uuid, the tool
// call's id), so reading a file again stores nothing twice. Prompts,
// which the hook stores before the harness writes their line, are named
// by their text's hash and its count in the session, which the hook and
// the importer work out alike.
package hook
