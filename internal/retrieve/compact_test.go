package retrieve

import (
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/store"
)

// TestExcerpt_Compact: a compact excerpt of what was said names its turn
// and speaker in a few words, its session only when the search spans
// several; code keeps its fence.
func TestExcerpt_Compact(t *testing.T) {
	count := func(s string) int { return len(strings.Fields(s)) }
	said := Hit{Hit: store.Hit{Chunk: store.Chunk{EntryID: "e1", Text: "Caroline: I adopted a dog last May.\n", StartLine: 1, EndLine: 1},
		Occurrence: store.Occurrence{SessionID: "conv-26", Turn: 12, Type: store.AgentResponse}}}
	for oneSession, want := range map[bool]string{
		true:  "[turn 12, assistant] Caroline: I adopted a dog last May.",
		false: "[session conv-26 turn 12, assistant] Caroline: I adopted a dog last May.",
	} {
		text, in, ok := excerpt(said, 0.9, 20, 100, true, oneSession, count)
		if !ok || text != want || in.Tokens != count(want) {
			t.Errorf("one session %v: %q (%d tokens), %v; want %q", oneSession, text, in.Tokens, ok, want)
		}
	}
	code := Hit{Hit: store.Hit{Chunk: store.Chunk{EntryID: "e2", Text: "func main() {}\n", StartLine: 1, EndLine: 1},
		Occurrence: store.Occurrence{Type: store.CodeFile, Files: []string{"main.go"}}}}
	if text, _, ok := excerpt(code, 0.9, 20, 100, true, true, count); !ok || !strings.Contains(text, "```go\nfunc main() {}\n```") {
		t.Errorf("code: %q", text)
	}
	// A file of no known language is named by its path, not as a turn.
	notes := Hit{Hit: store.Hit{Chunk: store.Chunk{EntryID: "e3", Text: "{\"role\": \"user\"}\n", StartLine: 7, EndLine: 7},
		Occurrence: store.Occurrence{Type: store.CodeFile, Files: []string{"examples/window.jsonl"}}}}
	if text, _, ok := excerpt(notes, 0.9, 20, 100, true, true, count); !ok || !strings.Contains(text, "examples/window.jsonl:7-7") || strings.Contains(text, "turn") {
		t.Errorf("a file of no known language: %q", text)
	}
}

// TestExcerpt_Fences: an excerpt cut to a Markdown file's fence line, or
// to nothing but blank lines, is no excerpt; one that holds a fence is
// put in a longer fence, which its own cannot close.
func TestExcerpt_Fences(t *testing.T) {
	count := func(s string) int { return len(strings.Fields(s)) }
	readme := Hit{Hit: store.Hit{Chunk: store.Chunk{EntryID: "e1", Text: "```sh\nengram index --yes\n```\n", StartLine: 462, EndLine: 464},
		Occurrence: store.Occurrence{Type: store.CodeFile, Files: []string{"README.md"}}}}
	// 12 words: the heading, the fences, the fence line and the hint
	// for more; the next line would take 3 more.
	if text, _, ok := excerpt(readme, 0.61, 20, 12, false, false, count); ok {
		t.Errorf("an excerpt of a fence line alone: %q", text)
	}
	text, _, ok := excerpt(readme, 0.61, 20, 100, false, false, count)
	if !ok || !strings.Contains(text, "````markdown\n```sh\nengram index --yes\n```\n````") {
		t.Errorf("an excerpt holding a fence: %q", text)
	}
	blank := Hit{Hit: store.Hit{Chunk: store.Chunk{EntryID: "e2", Text: "\n\n  \n", StartLine: 1, EndLine: 3},
		Occurrence: store.Occurrence{Type: store.Note}}}
	if text, _, ok := excerpt(blank, 0.9, 20, 100, false, false, count); ok {
		t.Errorf("an excerpt of blank lines: %q", text)
	}
}
