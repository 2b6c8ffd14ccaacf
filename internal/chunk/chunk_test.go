package chunk

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/tokens"
)

var o200k = tokens.MustGet(tokens.O200kBase).Count

// check verifies the invariants every split must hold.
func check(t *testing.T, content string, chunks []Chunk, maxTokens int) {
	t.Helper()
	if content == "" {
		if len(chunks) != 0 {
			t.Fatalf("empty content: %d chunks", len(chunks))
		}
		return
	}
	pos := 0
	for i, c := range chunks {
		if c.Start != pos || c.End <= c.Start || c.End > len(content) {
			t.Fatalf("chunk %d [%d,%d) does not follow %d", i, c.Start, c.End, pos)
		}
		text := content[c.Start:c.End]
		if got := o200k(text); got != c.Tokens {
			t.Fatalf("chunk %d: Tokens %d, counted %d", i, c.Tokens, got)
		}
		// A few tokens of slack: lines counted apart merge when joined.
		if c.Tokens > maxTokens+4 && strings.Count(text, "\n") > 0 {
			t.Fatalf("chunk %d has %d tokens, limit %d", i, c.Tokens, maxTokens)
		}
		wantStart := 1 + strings.Count(content[:c.Start], "\n")
		if c.StartLine != wantStart {
			t.Fatalf("chunk %d: StartLine %d, want %d", i, c.StartLine, wantStart)
		}
		if c.EndLine < c.StartLine {
			t.Fatalf("chunk %d: lines %d-%d", i, c.StartLine, c.EndLine)
		}
		// Cut only at line ends, unless the line itself is over the limit.
		if c.End < len(content) && content[c.End-1] != '\n' {
			lineStart := strings.LastIndexByte(content[:c.End], '\n') + 1
			lineEnd := strings.IndexByte(content[c.End:], '\n')
			if lineEnd < 0 {
				lineEnd = len(content)
			} else {
				lineEnd += c.End + 1
			}
			if o200k(content[lineStart:lineEnd]) <= maxTokens {
				t.Fatalf("chunk %d cuts inside a line that fits: %q", i, content[lineStart:lineEnd])
			}
		}
		pos = c.End
	}
	if pos != len(content) {
		t.Fatalf("chunks end at %d of %d", pos, len(content))
	}
}

func TestText_Small(t *testing.T) {
	for _, tc := range []struct {
		in      string
		endLine int
	}{
		{"one line", 1},
		{"one line\n", 1},
		{"a\nb\n", 2},
		{"a\nb\n\n", 3},
		{"\n", 1},
	} {
		got := Text(tc.in, o200k, Options{})
		if len(got) != 1 || got[0].StartLine != 1 || got[0].EndLine != tc.endLine || got[0].End != len(tc.in) {
			t.Errorf("Text(%q) = %+v, want one chunk on lines 1-%d", tc.in, got, tc.endLine)
		}
	}
	if got := Text("", o200k, Options{}); got != nil {
		t.Errorf("Text(\"\") = %+v", got)
	}
}

func TestText_Paragraphs(t *testing.T) {
	var b strings.Builder
	for p := range 30 {
		for l := range 4 {
			fmt.Fprintf(&b, "paragraph %d line %d says something about retrieval and budgets\n", p, l)
		}
		b.WriteString("\n")
	}
	content := b.String()
	chunks := Text(content, o200k, Options{MaxTokens: 100})
	check(t, content, chunks, 100)
	if len(chunks) < 5 {
		t.Fatalf("%d chunks", len(chunks))
	}
	for i, c := range chunks[:len(chunks)-1] {
		if !strings.HasSuffix(content[c.Start:c.End], "\n\n") {
			t.Errorf("chunk %d does not end at a paragraph break: %q", i, content[c.End-20:c.End])
		}
	}
}

func TestText_LongLines(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	word := func() string { return fmt.Sprintf("w%x", r.Uint32()) }
	var b strings.Builder
	for range 3000 { // a minified file: one enormous line
		b.WriteString(word())
		b.WriteString(";")
	}
	b.WriteString("\nshort tail\n")
	for range 2000 { // one long line with spaces, multi-byte runes and no newline at the end
		b.WriteString("größe ")
	}
	content := b.String()
	chunks := Text(content, o200k, Options{MaxTokens: 200})
	check(t, content, chunks, 200)
	for i, c := range chunks {
		if c.Tokens > 200 {
			t.Errorf("chunk %d of a long line has %d tokens", i, c.Tokens)
		}
	}
}

func FuzzText(f *testing.F) {
	f.Add("a\nb\n\nc", 3)
	f.Add("\n\n\n", 1)
	f.Add(strings.Repeat("x", 500), 2)
	f.Fuzz(func(t *testing.T, s string, maxTokens int) {
		maxTokens = 1 + (maxTokens&0xff)%64
		check(t, s, Text(s, o200k, Options{MaxTokens: maxTokens}), maxTokens)
	})
}
