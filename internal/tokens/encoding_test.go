package tokens

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/tiktoken-go/tokenizer"
)

// The expected counts and IDs come from OpenAI's reference tokenizer (npm
// tiktoken); testdata/gen.mjs regenerates them.

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func TestCount_Fixtures(t *testing.T) {
	var expected map[string]map[string]int
	readJSON(t, "testdata/expected.json", &expected)
	files, err := filepath.Glob("testdata/fixtures/*")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(expected) {
		t.Fatalf("%d fixture files, %d in expected.json: run testdata/gen.mjs", len(files), len(expected))
	}
	for _, path := range files {
		name := filepath.Base(path)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, enc := range Names() {
			want, ok := expected[name][enc]
			if !ok {
				t.Fatalf("%s: no expected count for %s: run testdata/gen.mjs", name, enc)
			}
			if got := MustGet(enc).Count(string(b)); got != want {
				t.Errorf("%s %s: Count = %d, reference %d", enc, name, got, want)
			}
		}
	}
}

type refCase struct {
	Text   string `json:"text"`
	Cl100k []int  `json:"cl100k_base"`
	O200k  []int  `json:"o200k_base"`
}

func TestEncode_Cases(t *testing.T) {
	var cases []refCase
	readJSON(t, "testdata/cases.json", &cases)
	if len(cases) < 1000 {
		t.Fatalf("only %d cases in testdata/cases.json", len(cases))
	}
	for _, enc := range Names() {
		e := MustGet(enc)
		failed := 0
		for _, c := range cases {
			want := c.O200k
			if enc == Cl100kBase {
				want = c.Cl100k
			}
			got := e.Encode(c.Text)
			if !slices.Equal(got, want) {
				failed++
				if failed <= 5 {
					t.Errorf("%s Encode(%q) mismatch (-ref +got):\n%s\npieces %q", enc, c.Text, cmp.Diff(want, got), e.Pieces(c.Text))
				}
			}
			if n := e.Count(c.Text); n != len(want) {
				t.Errorf("%s Count(%q) = %d, reference %d", enc, c.Text, n, len(want))
			}
		}
		if failed > 0 {
			t.Errorf("%s: %d of %d cases differ from the reference", enc, failed, len(cases))
		}
	}
}

// TestLibraryDiffers pins the reason this package has its own pre-tokenizer:
// github.com/tiktoken-go/tokenizer splits whitespace runs that hold several
// line breaks at the first break instead of the last. If this test fails,
// the library was fixed and its splitter could be used again.
func TestLibraryDiffers(t *testing.T) {
	const text = "x\t\r\n\t\r\nZ" // a blank line indented with a tab, CRLF endings
	codec, err := tokenizer.Get(tokenizer.Cl100kBase)
	if err != nil {
		t.Fatal(err)
	}
	lib, _, err := codec.Encode(text)
	if err != nil {
		t.Fatal(err)
	}
	ours := MustGet(Cl100kBase).Encode(text)
	// Reference (npm tiktoken): x, "\t\r\n\t\r\n", Z.
	if want := []int{87, 27189, 57}; !slices.Equal(ours, want) {
		t.Errorf("Encode(%q) = %v, reference %v", text, ours, want)
	}
	if len(lib) == len(ours) {
		t.Errorf("tiktoken-go/tokenizer now gives %v for %q, like the reference: reconsider split.go", lib, text)
	}
}

func TestCount_InvalidUTF8(t *testing.T) {
	e := MustGet(O200kBase)
	// Each maximal invalid sequence counts as one U+FFFD.
	for _, tc := range []struct{ bad, good string }{
		{"a\xffb", "a\uFFFDb"},
		{"\xe2\x82", "\uFFFD"},                       // truncated 3-byte sequence: one replacement
		{"\xe2\x82x\xc0\xaf", "\uFFFDx\uFFFD\uFFFD"}, // overlong: one per byte
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"},       // surrogate
	} {
		if got, want := e.Count(tc.bad), e.Count(tc.good); got != want {
			t.Errorf("Count(%q) = %d, want %d (as %q)", tc.bad, got, want, tc.good)
		}
	}
}

func TestGet_Unknown(t *testing.T) {
	_, err := Get("p99k_base")
	if err == nil || !strings.Contains(err.Error(), "o200k_base") {
		t.Fatalf("Get(unknown) error = %v, want one listing the known encodings", err)
	}
}

// FuzzPieces checks the pre-tokenizer's invariants: pieces are non-empty,
// cover the text in order, and re-encoding gives the same count.
func FuzzPieces(f *testing.F) {
	for _, s := range []string{"", "hello world", "\t\r\n\t\r\n", "e\u0301\u0301X", "'ſ's", "😀\u3000\n  x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		for _, name := range Names() {
			e := MustGet(name)
			pieces := e.Pieces(s)
			if strings.Join(pieces, "") != s {
				t.Fatalf("%s: pieces of %q do not join back", name, s)
			}
			n := 0
			for _, p := range pieces {
				if p == "" {
					t.Fatalf("%s: empty piece in %q", name, s)
				}
				n += e.Count(p)
			}
			if got := e.Count(s); got != n || got != len(e.Encode(s)) {
				t.Fatalf("%s: Count(%q) = %d, sum over pieces %d, len(Encode) %d", name, s, got, n, len(e.Encode(s)))
			}
		}
	})
}

func TestCountLines(t *testing.T) {
	var cases []refCase
	readJSON(t, "testdata/cases.json", &cases)
	files, _ := filepath.Glob("testdata/fixtures/*")
	var texts []string
	for _, c := range cases {
		texts = append(texts, c.Text)
	}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		texts = append(texts, string(b))
	}
	for _, enc := range Names() {
		e := MustGet(enc)
		for _, text := range texts {
			lines := e.CountLines(text)
			want := strings.Count(text, "\n") + 1
			if strings.HasSuffix(text, "\n") {
				want--
			}
			if text == "" {
				want = 1
			}
			if len(lines) != want {
				t.Fatalf("%s: CountLines(%.30q) has %d lines, want %d", enc, text, len(lines), want)
			}
			sum := 0
			for _, n := range lines {
				sum += n
			}
			if total := e.Count(text); sum != total {
				t.Fatalf("%s: CountLines(%.30q) sums to %d, Count says %d", enc, text, sum, total)
			}
		}
	}
	// One token per line for simple lines; a blank line holds the newline
	// token that starts on it.
	if got := MustGet(O200kBase).CountLines("a\nb\n"); !slices.Equal(got, []int{2, 2}) {
		t.Errorf("CountLines(a\\nb\\n) = %v, want [2 2]", got)
	}
}

// TestStarts checks that Starts cuts text into Encode's tokens, and maps
// the tokens of invalid UTF-8 back into the text in order.
func TestStarts(t *testing.T) {
	var cases []refCase
	readJSON(t, "testdata/cases.json", &cases)
	texts := []string{""}
	for _, c := range cases {
		texts = append(texts, c.Text)
	}
	files, _ := filepath.Glob("testdata/fixtures/*")
	for _, f := range files {
		b, _ := os.ReadFile(f)
		texts = append(texts, string(b))
	}
	// Offsets inside a replacement character fall among the bytes it
	// replaced: "a\xffb\xe2\x82c" is "a\uFFFDb\uFFFDc".
	valid, fixes := validUTF8Fixes("a\xffb\xe2\x82c")
	at := offsetIn(fixes)
	var got []int
	for v := range len(valid) {
		got = append(got, at(v))
	}
	if want := []int{0, 1, 1, 1, 2, 3, 4, 4, 5}; !slices.Equal(got, want) {
		t.Errorf("offsets of %q in the original: %v, want %v", valid, got, want)
	}
	for _, enc := range Names() {
		e := MustGet(enc)
		for _, text := range texts {
			ids := e.Encode(text)
			starts := slices.Collect(e.Starts(text))
			if len(starts) != len(ids) {
				t.Fatalf("%s: Starts(%.30q) has %d tokens, Encode %d", enc, text, len(starts), len(ids))
			}
			for k, st := range starts {
				end := len(text)
				if k+1 < len(starts) {
					end = starts[k+1]
				}
				if r, ok := e.ranks[text[st:end]]; !ok || int(r) != ids[k] {
					t.Fatalf("%s: Starts(%.30q): token %d is %q, Encode has ID %d", enc, text, k, text[st:end], ids[k])
				}
			}
		}
		for _, text := range []string{"a\xffb", "\xe2\x82", "\xe2\x82x\xc0\xafyz", "\xed\xa0\x80 w", "ok\xf0\x9f\x98 \xff\xfe\xfd" + strings.Repeat("é", 50) + "\xc3"} {
			starts := slices.Collect(e.Starts(text))
			if len(starts) != e.Count(text) || starts[0] != 0 {
				t.Errorf("%s: Starts(%q) = %v, for %d tokens", enc, text, starts, e.Count(text))
			}
			for k := 1; k < len(starts); k++ {
				if starts[k] < starts[k-1] || starts[k] >= len(text) {
					t.Errorf("%s: Starts(%q) = %v, not in order within the text", enc, text, starts)
					break
				}
			}
		}
	}
}
