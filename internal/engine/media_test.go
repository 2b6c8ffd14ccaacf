package engine_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
)

// A picture in a vendor's block is stored whole, byte for byte, but its
// base64 is neither chunked nor counted as text: no search finds the
// entry by the letters of its data, the text around it is found, and
// its lines are where they are.
func TestAdd_EncodedMedia(t *testing.T) {
	e := newEngine(t, engine.Options{})
	ctx := t.Context()
	// Letters of base64's alphabet that a search could find were they
	// indexed: zebrafinch, 1,000 times, between slashes.
	data := strings.Repeat("zebrafinch/", 1000) + "AA=="
	cases := []struct{ name, content string }{
		{"an image in a tool result", "{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":[\n{\"type\":\"text\",\"text\":\"the login form before\"},\n" +
			"{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"" + data + "\"}},\n" +
			"{\"type\":\"text\",\"text\":\"and the login form after\"}]}"},
		{"a data: URL", `{"type":"input_image","image_url":"data:image/png;base64,` + data + `","detail":"high"} the login form`},
		{"nothing but the data", `"` + data + `"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := e.Add(ctx, []engine.Record{{Session: "s-" + c.name, Agent: "a", Type: store.ToolResult, Content: []byte(c.content)}})
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.Entry(ctx, res[0].ID)
			if err != nil || !bytes.Equal(got.Content, []byte(c.content)) {
				t.Fatalf("the entry as stored is not the content: %v", err)
			}
			chunks, err := e.Store().Chunks(ctx, res[0].ID)
			if err != nil || len(chunks) == 0 {
				t.Fatalf("%d chunks, %v", len(chunks), err)
			}
			at := strings.Index(c.content, data)
			whole := c.content == `"`+data+`"`
			for _, ch := range chunks {
				if !whole && ch.Start < at+len(data) && ch.End > at {
					t.Errorf("chunk %d [%d,%d) holds the picture's data at [%d,%d)", ch.Ordinal, ch.Start, ch.End, at, at+len(data))
				}
				if want := strings.Count(c.content[:ch.Start], "\n") + 1; ch.StartLine != want {
					t.Errorf("chunk %d starts on line %d, want %d", ch.Ordinal, ch.StartLine, want)
				}
			}
			text := strings.Replace(c.content, data, "", 1)
			if n, want := got.TokenCount, tokens.MustGet(tokens.O200kBase).Count(text)+(2*len(data)+2)/3; !whole && (n < want-5 || n > want+5) {
				t.Errorf("TokenCount = %d, want %d: the text's, and 2 in 3 of the data's bytes", n, want)
			}
			if whole {
				return
			}
			hits, err := e.Search(ctx, store.Query{Text: "zebrafinch", Filter: store.Filter{SessionID: "s-" + c.name}})
			if err != nil || len(hits) != 0 {
				t.Errorf("a search for the data's letters: %d hits, %v; want none", len(hits), err)
			}
			hits, err = e.Search(ctx, store.Query{Text: "login form", Filter: store.Filter{SessionID: "s-" + c.name}})
			if err != nil || len(hits) == 0 || hits[0].Chunk.EntryID != res[0].ID {
				t.Errorf("a search for the text around it: %d hits, %v", len(hits), err)
			}
		})
	}
}

// BenchmarkAdd_Picture stores a picture of 1 MB in a vendor's block (1.3
// MB of base64), against text of the same size as the baseline.
func BenchmarkAdd_Picture(b *testing.B) {
	raw := make([]byte, 1_000_000)
	rand.New(rand.NewSource(1)).Read(raw)
	picture := `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + base64.StdEncoding.EncodeToString(raw) + `"}}`
	words := strings.Fields("the quick brown fox jumps over the lazy dog while the quartermaster counts crates of tea")
	var text strings.Builder
	r := rand.New(rand.NewSource(2))
	for text.Len() < len(picture) {
		text.WriteString(words[r.Intn(len(words))])
		text.WriteByte(' ')
		if r.Intn(15) == 0 {
			text.WriteByte('\n')
		}
	}
	for _, c := range []struct{ name, content string }{{"picture", picture}, {"text", text.String()}} {
		b.Run(c.name, func(b *testing.B) {
			e := newEngine(b, engine.Options{})
			b.SetBytes(int64(len(c.content)))
			for i := 0; b.Loop(); i++ {
				// A new entry each time: the picture's JSON, or the text,
				// led by the iteration.
				content := fmt.Sprintf("%d ", i) + c.content
				if c.name == "picture" {
					content = fmt.Sprintf(`{"n":%d,`, i) + c.content[1:]
				}
				if _, err := e.Add(b.Context(), []engine.Record{{Session: fmt.Sprintf("s%d", i), Agent: "a", Type: store.ToolResult, Content: []byte(content)}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
