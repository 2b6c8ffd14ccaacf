package assemble

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// TestCountLines: parts joined by line breaks count as the joined text
// does, in both encodings, whatever the parts start and end with:
// markers, excerpts, punctuation before the break, a slash or spaces
// after it, empty parts, other scripts; and counted again from the cache.
func TestCountLines(t *testing.T) {
	pieces := []string{
		`[CTX-REF:conversation | 9 turns 2-10 (608 tokens) | retrieve_context(ref_id="c1f0a9c3.2.10.8e41b")]`,
		"[turn 12, user] why does the upload retry loop forever?",
		"[… 4 messages left out]",
		"summary: fixed the race.", "ok", "x)", "a]", "end with spaces  ", "tab\tend\t", "/path/to/file.go:12",
		" leading space", "\tleading tab", "", "\u00a0non-breaking", "日本語の文です。", "🙂 emoji", "'s contraction", "123456",
		"a line\nwith a break", "trailing break\n", "\r\ncarriage", "...", "--- a/b", "}\n", "\"quoted\"", "é",
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, name := range []string{tokens.O200kBase, tokens.Cl100kBase} {
		enc := tokens.MustGet(name)
		a := &Assembler{}
		for range 3000 {
			parts := make([]string, 1+r.IntN(5))
			for i := range parts {
				parts[i] = pieces[r.IntN(len(pieces))]
				if r.IntN(3) == 0 {
					parts[i] += pieces[r.IntN(len(pieces))]
				}
			}
			want := enc.Count(strings.Join(parts, "\n"))
			for pass := range 2 {
				if got := a.countLines(enc, parts); got != want {
					t.Fatalf("%s: %q: countLines = %d (pass %d), Count of the joined text = %d", name, parts, got, pass, want)
				}
			}
		}
	}
}

// TestQuoteOf_Kept: a message's quote is kept under its content and the
// tools it calls: two calls with the same input to different tools quote
// their own tools, the first time and from the cache.
func TestQuoteOf_Kept(t *testing.T) {
	call := func(name string) window.Message {
		return window.Message{Role: window.RoleAssistant, Blocks: []window.Block{
			{Type: window.BlockToolUse, ID: "t1", Name: name, Input: json.RawMessage(`{"path":"a.go"}`)}}}
	}
	c := &conv{msgs: []window.Message{call("Read"), call("Edit")},
		items: []store.WindowItem{{EntryIDs: []string{"e1"}}, {EntryIDs: []string{"e1"}}}}
	a := &Assembler{}
	for pass := range 2 {
		for i, want := range []string{`- assistant: called Read {"path":"a.go"}`, `- assistant: called Edit {"path":"a.go"}`} {
			if got, _ := a.quoteOf(c, i); got != want {
				t.Errorf("pass %d: quote of message %d = %q, want %q", pass, i, got, want)
			}
		}
	}
}
