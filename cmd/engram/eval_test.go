package main

import (
	"slices"
	"testing"

	"github.com/engramhq/engram/internal/store"
)

func TestItemsOf(t *testing.T) {
	hit := func(entry, msg string, files ...string) store.Hit {
		var h store.Hit
		h.Chunk.EntryID, h.Occurrence.MsgID, h.Occurrence.Files = entry, msg, files
		return h
	}
	// Turns with the same content are one entry: a hit on it finds them
	// all, the hit's own occurrence first; repeats count once.
	shared := map[string][]string{"e1": {"s1:1", "s9:1"}, "e2": {"s1:2"}}
	hits := []store.Hit{hit("e1", "s9:1"), hit("e1", "s1:1"), hit("e2", "s1:2"), hit("e3", "")}
	if got := itemsOf(hits, false, shared, 10); !slices.Equal(got, []string{"s9:1", "s1:1", "s1:2"}) {
		t.Errorf("turns: %v", got)
	}
	if got := itemsOf(hits, false, shared, 2); !slices.Equal(got, []string{"s9:1", "s1:1"}) {
		t.Errorf("turns, k 2: %v", got)
	}
	files := []store.Hit{hit("a", "", "x.go"), hit("b", "", "x.go"), hit("c", "", "y.go")}
	if got := itemsOf(files, true, nil, 10); !slices.Equal(got, []string{"x.go", "y.go"}) {
		t.Errorf("files: %v", got)
	}
}
