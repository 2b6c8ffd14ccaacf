package engine_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
)

func TestLineSpan(t *testing.T) {
	for _, c := range []struct {
		content  string
		from, to int
		want     engine.Span
		err      string
	}{
		{"a\nbb\nccc", 1, 1, engine.Span{Start: 0, End: 2, StartLine: 1, EndLine: 1}, ""},
		{"a\nbb\nccc", 2, 3, engine.Span{Start: 2, End: 8, StartLine: 2, EndLine: 3}, ""},
		{"a\nbb\nccc", 2, 99, engine.Span{Start: 2, End: 8, StartLine: 2, EndLine: 3}, ""},
		{"a\nbb\nccc", 3, 3, engine.Span{Start: 5, End: 8, StartLine: 3, EndLine: 3}, ""},
		{"a\nbb\nccc", 4, 5, engine.Span{}, "has 3 lines, the range starts at 4"},
		{"a\nb\n", 2, 5, engine.Span{Start: 2, End: 4, StartLine: 2, EndLine: 2}, ""},
		{"a\nb\n", 3, 3, engine.Span{}, "has 2 lines, the range starts at 3"},
		{"a\n\n\nb\n", 2, 3, engine.Span{Start: 2, End: 4, StartLine: 2, EndLine: 3}, ""},
	} {
		got, err := engine.LineSpan([]byte(c.content), c.from, c.to)
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("LineSpan(%q, %d, %d) error %v, want %q", c.content, c.from, c.to, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("LineSpan(%q, %d, %d): %v", c.content, c.from, c.to, err)
			continue
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("LineSpan(%q, %d, %d) mismatch (-want +got):\n%s", c.content, c.from, c.to, diff)
		}
		if r, _ := engine.LineRange([]byte(c.content), c.from, c.to); string(r) != c.content[got.Start:got.End] {
			t.Errorf("LineRange(%q, %d, %d) = %q, LineSpan says %q", c.content, c.from, c.to, r, c.content[got.Start:got.End])
		}
	}
	for content, want := range map[string]int{"": 0, "a": 1, "a\n": 1, "a\nb": 2, "a\n\n": 2} {
		if got := engine.CountLines([]byte(content)); got != want {
			t.Errorf("CountLines(%q) = %d, want %d", content, got, want)
		}
	}
}

// TestMatchChunks: the chunks of an entry that hold a query's words come
// best first, byte for byte, with their lines; a word every chunk holds
// weighs little; words the entry lacks match nothing.
func TestMatchChunks(t *testing.T) {
	e := newEngine(t, engine.Options{ChunkTokens: 40})
	ctx := t.Context()
	var b strings.Builder
	for i := 1; i <= 60; i++ {
		fmt.Fprintf(&b, "step %d: the upload worker copied block %d\n", i, i)
		if i == 37 {
			b.WriteString("the quokka checksum failed on this block\n")
		}
	}
	content := b.String()
	res, err := e.Add(ctx, []engine.Record{{Session: "s", Agent: "a", Type: store.ToolResult, Content: []byte(content)}})
	if err != nil {
		t.Fatal(err)
	}
	id := res[0].ID
	ms, err := e.MatchChunks(ctx, []string{id}, "upload quokka checksum")
	if err != nil {
		t.Fatal(err)
	}
	chunks, err := e.Store().Chunks(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != len(chunks) {
		t.Errorf("%d matches of %d chunks, all of which hold upload", len(ms), len(chunks))
	}
	best := ms[0]
	if !strings.Contains(best.Text, "the quokka checksum failed") {
		t.Fatalf("best match %q", best.Text)
	}
	if best.Text != content[best.Start:best.End] {
		t.Errorf("match text is not the content's bytes %d-%d", best.Start, best.End)
	}
	if r, _ := engine.LineRange([]byte(content), best.StartLine, best.EndLine); string(r) != best.Text {
		t.Errorf("lines %d-%d are %q, the match %q", best.StartLine, best.EndLine, r, best.Text)
	}
	for _, m := range ms[1:] {
		if m.Score >= best.Score {
			t.Errorf("chunk %d scores %.3f, the best %.3f", m.Ordinal, m.Score, best.Score)
		}
	}
	for _, q := range []string{"zanzibar", "", "the of"} {
		ms, err := e.MatchChunks(ctx, []string{id}, q)
		if err != nil || len(ms) != 0 && q != "the of" {
			t.Errorf("MatchChunks(%q) = %d matches, %v", q, len(ms), err)
		}
	}
	if _, err := e.MatchChunks(ctx, []string{strings.Repeat("0", 64)}, "upload"); err == nil {
		t.Error("an entry that is not stored matched")
	}
}
