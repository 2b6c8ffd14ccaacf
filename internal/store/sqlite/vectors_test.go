package sqlite_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
)

// entryOfChunks makes an entry of size bytes cut into chunks of chunkSize.
func entryOfChunks(session string, n, size, chunkSize int) store.Entry {
	var b strings.Builder
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "entry %d line %d of a long tool result\n", n, i)
	}
	content := b.String()[:size]
	e := store.Entry{Content: []byte(content), Occurrence: store.Occurrence{SessionID: session, Type: store.ToolResult}}
	for start, k := 0, 0; start < len(content); start, k = start+chunkSize, k+1 {
		e.Chunks = append(e.Chunks, store.Chunk{Ordinal: k, Start: start, End: min(start+chunkSize, len(content)), StartLine: 1, EndLine: 1})
	}
	return e
}

// TestPendingChunks_LongEntries pages through the chunks of long entries
// (cut from their content) and short ones (read by substr): every chunk
// comes once, in order, with its own text.
func TestPendingChunks_LongEntries(t *testing.T) {
	st := sqlitetest.Open(t, sqlite.Options{})
	ctx := t.Context()
	entries := []store.Entry{entryOfChunks("s", 0, 300, 1000), entryOfChunks("s", 1, 1<<20, 2000),
		entryOfChunks("s", 2, 100<<10, 1000), entryOfChunks("s", 3, 5000, 1000)}
	if _, err := st.PutEntries(ctx, entries); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, e := range entries {
		for _, c := range e.Chunks {
			want = append(want, string(e.Content[c.Start:c.End]))
		}
	}
	var got []string
	var after int64
	for {
		page, err := st.PendingChunks(ctx, "m", after, 97)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, c := range page {
			if c.ID <= after {
				t.Fatalf("chunk %d after %d", c.ID, after)
			}
			after = c.ID
			got = append(got, c.Text)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d chunks pending, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("chunk %d: %.40q, want %.40q", i, got[i], want[i])
		}
	}
}

// BenchmarkPendingChunks lists the chunks of one entry of 1 or 4 MiB in
// pages of the embedding worker's size, against the same number of chunks
// in entries of one chunk each (the baseline).
func BenchmarkPendingChunks(b *testing.B) {
	const chunk = 2000
	for _, size := range []int{1 << 20, 4 << 20} {
		for _, shape := range []string{"small-entries", "one-entry"} {
			b.Run(fmt.Sprintf("%s/%dMiB", shape, size>>20), func(b *testing.B) {
				st := sqlitetest.Open(b, sqlite.Options{})
				var entries []store.Entry
				if shape == "one-entry" {
					entries = append(entries, entryOfChunks("s", 0, size, chunk))
				} else {
					for n := 0; n*chunk < size; n++ {
						entries = append(entries, entryOfChunks("s", n, chunk, chunk))
					}
				}
				if _, err := st.PutEntries(b.Context(), entries); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(size))
				for b.Loop() {
					for after := int64(0); ; {
						page, err := st.PendingChunks(b.Context(), "m", after, 256)
						if err != nil {
							b.Fatal(err)
						}
						if len(page) == 0 {
							break
						}
						after = page[len(page)-1].ID
					}
				}
			})
		}
	}
}
