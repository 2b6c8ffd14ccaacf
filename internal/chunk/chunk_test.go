package chunk

import (
	"encoding/base64"
	"fmt"
	"iter"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/tokens"
)

var o200k = tokens.MustGet(tokens.O200kBase)

func doc(text string) *Doc { return NewDoc(text, o200k.CountLines, o200k.Starts) }

// check verifies the invariants every split must hold.
func check(t *testing.T, content string, chunks []Chunk, maxTokens int) {
	t.Helper()
	if content == "" {
		if len(chunks) != 0 {
			t.Fatalf("empty content: %d chunks", len(chunks))
		}
		return
	}
	lines := o200k.CountLines(content)
	// The chunks hold every token of the content once: the tokens of whole
	// lines as the content's tokenization counts them, and those of a
	// line too long for one chunk as the line alone has them.
	wantTotal, total := 0, 0
	first := 0 // where the line starts
	for _, n := range lines {
		end := len(content)
		if nl := strings.IndexByte(content[first:], '\n'); nl >= 0 {
			end = first + nl + 1
		}
		if n > maxTokens {
			n = o200k.Count(content[first:end])
		}
		wantTotal += n
		first = end
	}
	for _, c := range chunks {
		total += c.Tokens
	}
	if total != wantTotal {
		t.Fatalf("chunks hold %d tokens, the content %d", total, wantTotal)
	}
	pos := 0
	for i, c := range chunks {
		if c.Start != pos || c.End <= c.Start || c.End > len(content) {
			t.Fatalf("chunk %d [%d,%d) does not follow %d", i, c.Start, c.End, pos)
		}
		text := content[c.Start:c.End]
		wantStart := 1 + strings.Count(content[:c.Start], "\n")
		if c.StartLine != wantStart || c.EndLine < c.StartLine {
			t.Fatalf("chunk %d: lines %d-%d, want start %d", i, c.StartLine, c.EndLine, wantStart)
		}
		startsLine := c.Start == 0 || content[c.Start-1] == '\n'
		endsLine := c.End == len(content) || content[c.End-1] == '\n'
		if startsLine && endsLine {
			sum, longLine := 0, false
			for l := c.StartLine - 1; l < c.EndLine; l++ {
				sum += lines[l]
				longLine = longLine || lines[l] > maxTokens
			}
			// A chunk of whole lines holds its lines' tokens, unless a line
			// too long for one chunk was cut and tokenized alone.
			if sum != c.Tokens && !longLine {
				t.Fatalf("chunk %d: Tokens %d, its lines hold %d", i, c.Tokens, sum)
			}
			if c.Tokens > maxTokens && c.StartLine != c.EndLine {
				t.Fatalf("chunk %d of lines %d-%d has %d tokens, limit %d", i, c.StartLine, c.EndLine, c.Tokens, maxTokens)
			}
		} else {
			// Only a line too long for one chunk is cut inside.
			if !startsLine && lines[c.StartLine-1] <= maxTokens {
				t.Fatalf("chunk %d starts inside line %d, which fits (%d tokens)", i, c.StartLine, lines[c.StartLine-1])
			}
			if !endsLine && lines[c.EndLine-1] <= maxTokens {
				t.Fatalf("chunk %d ends inside line %d, which fits (%d tokens)", i, c.EndLine, lines[c.EndLine-1])
			}
			// Over the limit only where no token starts on a rune
			// boundary within it: where the line's tokens straddle its
			// runes (a multi-byte rune of several tokens, or tokens
			// that cut runes), there is nowhere to cut.
			if c.Tokens > maxTokens {
				lineStart := strings.LastIndexByte(content[:c.Start], '\n') + 1
				lineEnd := len(content)
				if nl := strings.IndexByte(content[c.Start:], '\n'); nl >= 0 {
					lineEnd = c.Start + nl + 1
				}
				line := content[lineStart:lineEnd]
				runeStarts := map[int]bool{}
				for k := range line {
					runeStarts[lineStart+k] = true
				}
				for st := range o200k.Starts(line) {
					if p := lineStart + st; p > c.Start && p < c.End && runeStarts[p] {
						t.Fatalf("chunk %d: %d tokens, limit %d, though a token starts on a rune at %d: %q", i, c.Tokens, maxTokens, p, text)
					}
				}
			}
		}
		pos = c.End
	}
	if pos != len(content) {
		t.Fatalf("chunks end at %d of %d", pos, len(content))
	}
}

// symbolsOf lists the symbols of chunks in order, once each where the
// pieces of a split declaration repeat them.
func symbolsOf(chunks []Chunk) []string {
	var out []string
	var prev []string
	for _, c := range chunks {
		if slices.Equal(c.Symbols, prev) {
			continue
		}
		out = append(out, c.Symbols...)
		prev = c.Symbols
	}
	return out
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
		got := Text(doc(tc.in), Options{})
		if len(got) != 1 || got[0].StartLine != 1 || got[0].EndLine != tc.endLine || got[0].End != len(tc.in) || got[0].Tokens != o200k.Count(tc.in) {
			t.Errorf("Text(%q) = %+v, want one chunk on lines 1-%d", tc.in, got, tc.endLine)
		}
	}
	if got := Text(doc(""), Options{}); got != nil {
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
	chunks := Text(doc(content), Options{MaxTokens: 100})
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
	var b strings.Builder
	for range 3000 { // a minified file: one enormous line
		fmt.Fprintf(&b, "w%x;", r.Uint32())
	}
	b.WriteString("\nshort tail\n")
	for range 2000 { // a long line with spaces and multi-byte runes, no final newline
		b.WriteString("größe ")
	}
	content := b.String()
	check(t, content, Text(doc(content), Options{MaxTokens: 200}), 200)
}

// TestText_LongLineTokens checks that a line too long for one chunk is
// cut at its tokens' boundaries: the pieces' counts add up to the line's,
// and prose is cut between words.
func TestText_LongLineTokens(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	words := strings.Fields("the budget of tokens per chunk keeps retrieval precise while long messages arrive")
	var prose strings.Builder
	for prose.Len() < 200_000 {
		prose.WriteString(words[r.IntN(len(words))] + " ")
	}
	raw := make([]byte, 150_000)
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	for name, content := range map[string]string{
		"prose":  prose.String(),
		"base64": base64.StdEncoding.EncodeToString(raw),
		"letter": strings.Repeat("a", 300_000),
	} {
		chunks := Text(doc(content), Options{MaxTokens: 400})
		check(t, content, chunks, 400)
		total := 0
		for _, c := range chunks {
			total += c.Tokens
		}
		if want := o200k.Count(content); total != want {
			t.Errorf("%s: chunks hold %d tokens, Count says %d", name, total, want)
		}
		for i, c := range chunks[:len(chunks)-1] {
			if c.Tokens < 200 {
				t.Errorf("%s: chunk %d holds %d tokens, less than half a chunk", name, i, c.Tokens)
			}
			if name == "prose" && content[c.End] != ' ' && content[c.End-1] != ' ' {
				t.Errorf("%s: chunk %d ends inside a word: %q|%q", name, i, content[c.End-10:c.End], content[c.End:c.End+10])
			}
		}
	}
}

// TestText_LongLineWork checks that splitting a long line tokenizes each
// byte at most twice (once for the line counts, once to cut the line),
// whatever its size: today's machine is too noisy for timings.
func TestText_LongLineWork(t *testing.T) {
	// Dense runs (emoji, CJK) in a line of mostly sparse text, and the
	// reverse, so that a guess of bytes per token from the line's average
	// is far off in places.
	line := func(size int) string {
		var b strings.Builder
		for b.Len() < size {
			b.WriteString(strings.Repeat("a", 4000))
			b.WriteString(strings.Repeat("😀漢", 700))
			b.WriteString(strings.Repeat("x=1;", 300))
		}
		return b.String()
	}
	work := func(content string) int {
		n := 0
		lines := func(s string) []int { n += len(s); return o200k.CountLines(s) }
		starts := func(s string) iter.Seq[int] { n += len(s); return o200k.Starts(s) }
		check(t, content, Text(NewDoc(content, lines, starts), Options{}), DefaultMaxTokens)
		return n
	}
	small, large := line(256<<10), line(1<<20)
	ws, wl := work(small), work(large)
	for _, c := range []struct {
		content string
		work    int
	}{{small, ws}, {large, wl}} {
		if c.work > 2*len(c.content) {
			t.Errorf("splitting %d bytes tokenized %d bytes", len(c.content), c.work)
		}
	}
	if ratio := float64(wl) / float64(ws); ratio > 4.4 {
		t.Errorf("1 MiB took %.1fx the work of 256 KiB", ratio)
	}
}

const goSrc = `// Package shop sells things.
package shop

import (
	"errors"
	"fmt"
)

// ErrSoldOut is returned when nothing is left.
var ErrSoldOut = errors.New("sold out")

const (
	MaxItems = 10
	minPrice = 1
)

// Cart holds items.
type Cart struct {
	items []string
}

// Add puts an item in the cart.
func (c *Cart) Add(item string) error {
	if len(c.items) >= MaxItems {
		return ErrSoldOut
	}
	c.items = append(c.items, item)
	return nil
}

type Stack[T any] struct{ v []T }

func (s *Stack[T]) Push(v T) { s.v = append(s.v, v) }

// Checkout pays.
func Checkout(c *Cart) string {
	return fmt.Sprint(len(c.items))
}

// trailing comment
`

func TestCode_Go(t *testing.T) {
	chunks := Code(doc(goSrc), Go, Options{MaxTokens: 30})
	check(t, goSrc, chunks, 30)
	symbols := symbolsOf(chunks)
	want := []string{"ErrSoldOut", "MaxItems", "minPrice", "Cart", "Cart.Add", "Stack", "Stack.Push", "Checkout"}
	if !slices.Equal(symbols, want) {
		t.Errorf("symbols %v, want %v", symbols, want)
	}
	// The doc comment stays with its declaration.
	for _, c := range chunks {
		if slices.Contains(c.Symbols, "Cart.Add") {
			if !strings.Contains(goSrc[c.Start:c.End], "// Add puts an item") {
				t.Errorf("Cart.Add's first chunk lost its doc comment:\n%s", goSrc[c.Start:c.End])
			}
			break
		}
	}
	// With room, small declarations share chunks.
	if big := Code(doc(goSrc), Go, Options{MaxTokens: 400}); len(big) != 1 || len(big[0].Symbols) != len(want) {
		t.Errorf("with a large budget: %d chunks", len(big))
	}
	// A file that does not parse falls back to line patterns.
	broken := "package x\n\nfunc ok() {}\n\nfunc broken( {\n\nfunc after() {}\n"
	chunks = Code(doc(broken), Go, Options{MaxTokens: 5})
	check(t, broken, chunks, 5)
	symbols = symbolsOf(chunks)
	if !slices.Equal(symbols, []string{"ok", "broken", "after"}) {
		t.Errorf("broken Go symbols: %v", symbols)
	}
}

func TestCode_Languages(t *testing.T) {
	for _, tc := range []struct {
		lang, src string
		want      []string
	}{
		{Python, "import os\n\n# helper\ndef load(path):\n    return open(path)\n\nclass Store:\n    \"\"\"A store.\"\"\"\n\n    @property\n    def size(self):\n        return 0\n\n    async def fetch(self, key):\n        if key:\n            return None\n", []string{"load", "Store", "size", "fetch"}},
		{TypeScript, "import x from 'y';\n\nexport interface Options {\n  limit: number;\n}\n\nexport async function search(q: string): Promise<void> {\n  if (q) {\n    return;\n  }\n}\n\nexport const parse = (s: string) => s.trim();\n\nexport class Index {\n  constructor() {}\n  add(doc: string): void {\n    for (const x of doc) {}\n  }\n}\n", []string{"Options", "search", "parse", "Index", "constructor", "add"}},
		{Rust, "use std::io;\n\n/// Reads.\npub fn read(p: &str) -> io::Result<String> {\n    todo!()\n}\n\npub struct Config {\n    name: String,\n}\n\nimpl Config {\n    pub fn new() -> Self { todo!() }\n}\n\nimpl Display for Config {}\n", []string{"read", "Config", "Config", "new", "Config"}},
		{Java, "package a;\n\n/** A shop. */\npublic class Shop {\n    private int n;\n\n    public int count(String item) {\n        if (item == null) {\n            return 0;\n        }\n        return n;\n    }\n}\n", []string{"Shop", "count"}},
		{C, "#include <stdio.h>\n#define MAX 10\n\nstruct point {\n  int x;\n};\n\nstatic int add(int a, int b)\n{\n  if (a) { return a + b; }\n  return b;\n}\n\nint sub(int a, int b);\n", []string{"MAX", "point", "add"}},
		{Ruby, "require 'json'\n\n# A cart.\nclass Cart\n  def add(item)\n    @items << item\n  end\n\n  def empty?\n    @items.empty?\n  end\nend\n", []string{"Cart", "add", "empty?"}},
		{Shell, "#!/bin/sh\nset -e\n\n# build it\nbuild() {\n  go build ./...\n}\n\nfunction test_all {\n  go test ./...\n}\n\nbuild\n", []string{"build", "test_all"}},
		{Markdown, "Intro text.\n\n# Install\n\nRun it.\n\n```sh\n# not a heading\nmake\n```\n\n## Configure ##\n\nEdit the file.\n", []string{"Install", "Configure"}},
	} {
		chunks := Code(doc(tc.src), tc.lang, Options{MaxTokens: 16})
		check(t, tc.src, chunks, 16)
		symbols := symbolsOf(chunks)
		if !slices.Equal(symbols, tc.want) {
			t.Errorf("%s symbols %v, want %v", tc.lang, symbols, tc.want)
		}
	}
}

func TestLanguage(t *testing.T) {
	for p, want := range map[string]string{
		"main.go": Go, "a/b/x.PY": Python, "web/app.tsx": TypeScript, "lib.rs": Rust, "Makefile": "make",
		"Dockerfile.dev": "dockerfile", "README.md": Markdown, "data.bin": "", "go.mod": "go.mod",
	} {
		if got := Language(p, nil); got != want {
			t.Errorf("Language(%q) = %q, want %q", p, got, want)
		}
	}
	if got := Language("bin/deploy", []byte("#!/usr/bin/env bash\necho")); got != Shell {
		t.Errorf("shebang: %q", got)
	}
	if got := Language("tool", []byte("#!/usr/bin/env python3\n")); got != Python {
		t.Errorf("python shebang: %q", got)
	}
}

func FuzzText(f *testing.F) {
	f.Add("a\nb\n\nc", 3)
	f.Add("\n\n\n", 1)
	f.Add(strings.Repeat("x", 500), 2)
	f.Fuzz(func(t *testing.T, s string, maxTokens int) {
		maxTokens = 1 + (maxTokens&0xff)%64
		check(t, s, Text(doc(s), Options{MaxTokens: maxTokens}), maxTokens)
	})
}

func FuzzCode(f *testing.F) {
	f.Add(goSrc, 0, 20)
	f.Add("def a():\n  pass\n# x\nclass B:\n  def c(self): pass\n", 1, 5)
	f.Add("# T\n\n```\n# no\n```\n## U\n", 2, 3)
	langs := []string{Go, Python, Markdown, TypeScript, Rust, C, Shell, Ruby, Java}
	f.Fuzz(func(t *testing.T, s string, lang, maxTokens int) {
		maxTokens = 1 + (maxTokens&0xff)%64
		l := langs[(lang&0xff)%len(langs)]
		check(t, s, Code(doc(s), l, Options{MaxTokens: maxTokens}), maxTokens)
	})
}

// BenchmarkText_LongLine counts and splits 1 and 4 MiB in one line, of
// prose and of one letter, against the same prose in lines of about 100
// bytes (the baseline).
func BenchmarkText_LongLine(b *testing.B) {
	o200k.Count(strings.Repeat("a", 1<<17)) // the trie of long pieces, built once per process
	words := strings.Fields("the budget of tokens per chunk keeps retrieval precise while long messages arrive")
	for _, size := range []int{1 << 20, 4 << 20} {
		var prose strings.Builder
		for i := 0; prose.Len() < size; i++ {
			prose.WriteString(words[i%len(words)])
			if i%16 == 15 {
				prose.WriteString("\n")
			} else {
				prose.WriteString(" ")
			}
		}
		lines := prose.String()[:size]
		for _, in := range []struct{ name, text string }{
			{"lines", lines},
			{"one-line", strings.ReplaceAll(lines, "\n", " ")},
			{"one-letter", strings.Repeat("a", size)},
		} {
			b.Run(fmt.Sprintf("%s/%dMiB", in.name, size>>20), func(b *testing.B) {
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					Text(doc(in.text), Options{})
				}
			})
		}
	}
}
