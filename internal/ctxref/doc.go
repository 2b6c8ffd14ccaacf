// Package ctxref owns the grammar of the [CTX-REF] marker: the one line
// that stands in an agent's window for content evicted from it, and that
// retrieve_context expands back byte for byte. Render writes a marker,
// Parse reads one (or the short form, or a bare ref id, which is what
// agents type back), and Find locates every marker in a text. Every
// reader of markers goes through Parse or Find; nothing else builds or
// takes them apart.
//
// The package does not choose what a marker says (the window's eviction
// does, into a store.Reference) nor read the store.
//
// # Grammar
//
// A marker, as Render writes it:
//
//	[CTX-REF:conversation | 15 turns 12-26 (4,200 tokens) @ 2026-11-25 14:23 | Summary: fixed the token refresh race | Topics: auth flow, JWT, middleware | Entities: internal/auth/jwt.go, refreshToken | Ask: why does token refresh fail | retrieve_context(ref_id="ref_7f3a")]
//
// In EBNF, every literal exact, with no space allowed where none is shown:
//
//	marker   = "[CTX-REF:" ( full | id ) "]" ;            (* at most MaxBytes bytes *)
//	full     = type " | " span { " | " field } " | " call ;
//	type     = lower { lower | digit | "_" } ;           (* at most 32 bytes *)
//	span     = [ turns " " ] "(" grouped " token" [ "s" ] ")" [ " @ " time ] ;
//	turns    = "1 turn " turn | count " turns " turn "-" turn ;
//	turn     = nonzero { digit } ;
//	count    = nonzero { digit } ;
//	grouped  = digit [ digit [ digit ] ] { "," digit digit digit } ; (* 0; 4,200 *)
//	time     = year "-" mm "-" dd " " hh ":" mi ;        (* UTC, to the minute *)
//	field    = "Summary: " text
//	         | "Topics: " list | "Entities: " list | "Ask: " list
//	         | label ": " text ;                         (* not one of the four *)
//	label    = upper { letter | "-" } ;
//	list     = item { ", " item } ;
//	call     = 'retrieve_context(ref_id="' id '")' ;
//	id       = 1*64 ( letter | digit | "-" | "_" | "." ) ; (* store.ValidRefID *)
//
// A text is valid UTF-8 without control characters, line or paragraph
// separators, '|', '[', ']' or '"'; its only space is U+0020, never at
// either end nor two in a row. An item is a text without ','.
//
// The rules the EBNF does not say:
//
//   - Turns: the range runs from the first turn to the last, inclusive,
//     and count is how many turns of it the marker stands for: "1 turn 7"
//     when first and last are one turn, otherwise 2 <= count <= last -
//     first + 1. Numbers have no leading zero; the token count is grouped
//     by thousands with commas (as the seed wrote it), turns are not.
//     "token" is singular for exactly one.
//   - Time is UTC to the minute, with a year from 0001 to 9999, and never
//     0001-01-01 00:00 (Go's zero time, which means "no time": the field
//     is left out).
//   - Fields: Summary, Topics, Entities and Ask each appear at most once,
//     in that order, and only when they hold something. A list holds at
//     most MaxTopics, MaxEntities or MaxHints items, and an item or the
//     summary at most MaxTopicBytes, MaxEntityBytes, MaxHintBytes or
//     MaxSummaryBytes bytes.
//   - Unknown fields (a label other than the four, which are matched
//     exactly, case included), anywhere between the span and the call,
//     are skipped, so a marker a newer engram writes with a field this
//     one does not know still expands. Everything else is strict: Parse accepts a
//     known field only as Render writes it, so that a parsed marker
//     renders back to the same bytes.
//
// Parse also accepts the short form "[CTX-REF:" id "]" (older markers,
// and what an agent may write) and a bare id, and trims the input's
// surrounding white space first. Find finds both forms of marker in a
// text; a bare id in a text is not a marker.
//
// # Rendering
//
// Render is deterministic: the same Marker gives the same bytes, so a
// marker kept in a window stays byte-stable for providers' prompt caches.
// It always writes the full form, normalising what it is given (see
// Render), and its result always parses back to the normalised Marker.
// What every marker has (type, turns, tokens, time and the call) is some
// 45 tokens (cl100k_base); the seed's example with its three topics is
// 54, and 72 with two entities and a hint. The caps bound the largest,
// summary included, at some 850 bytes (MaxBytes takes 1,024).
package ctxref
