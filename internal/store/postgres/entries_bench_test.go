package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/storetest"
)

func BenchmarkPutEntries(b *testing.B) {
	s := openStore(b)
	ctx := context.Background()
	n := 0
	for b.Loop() {
		var batch []store.Entry
		for i := range 500 {
			typ := store.AgentResponse
			if i%5 == 0 {
				typ = store.UserPrompt
			}
			batch = append(batch, storetest.Entry("s", "a", typ, fmt.Sprintf("entry %d says something about the parser, line %d\n\nand more", n, i)))
			n++
		}
		if _, err := s.PutEntries(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
}
