package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/storetest"
)

// TestContexts_BatchingDoesNotMatter writes one set of conversations in
// one batch, one entry per batch and in batches of random sizes, and
// checks that every entry gets the same conversation context each way: a
// context is worked out from the batch's own entries when they are known
// to be the session's latest, and from the store otherwise, and the two
// must agree. The conversations have what makes that hard: several turns
// at once, turns given out of order (an entry for a turn earlier than
// those already stored), content seen twice, short and long entries.
func TestContexts_BatchingDoesNotMatter(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	words := strings.Fields("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike " +
		"november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu")
	text := func(n int) string {
		w := make([]string, n)
		for i := range w {
			w[i] = words[rng.IntN(len(words))]
		}
		return strings.Join(w, " ")
	}
	var entries []store.Entry
	turns := map[string]int{}
	for i := range 240 {
		session := fmt.Sprintf("s%d", rng.IntN(3))
		turn := turns[session] + rng.IntN(2) // often the same turn again
		if rng.IntN(8) == 0 {
			turn = max(1, turn-1-rng.IntN(4)) // a turn already passed
		}
		turns[session] = max(turns[session], turn, 1)
		n := 2 + rng.IntN(12)
		if rng.IntN(5) == 0 {
			n = 150 // long enough to stand alone
		}
		content := fmt.Sprintf("m%d %s", i, text(n))
		if i > 0 && rng.IntN(10) == 0 {
			content = string(entries[rng.IntN(i)].Content) // seen before
		}
		e := storetest.Entry(session, "a", store.UserPrompt, content)
		e.Turn = max(1, turn)
		entries = append(entries, e)
	}

	write := func(name string, split func(rest int) int) map[string]string {
		path := filepath.Join(t.TempDir(), "engram.db")
		s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for rest := entries; len(rest) > 0; {
			n := min(split(len(rest)), len(rest))
			if _, err := s.PutEntries(context.Background(), slices.Clone(rest[:n])); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			rest = rest[n:]
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		rows, err := db.Query("SELECT e.content, c.text FROM contexts c JOIN entries e ON e.pk = c.entry")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for rows.Next() {
			var content, ctx string
			if err := rows.Scan(&content, &ctx); err != nil {
				t.Fatal(err)
			}
			got[content] = ctx
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			t.Fatal(err)
		}
		return got
	}
	one := write("one entry per batch", func(int) int { return 1 })
	if len(one) < 100 {
		t.Fatalf("only %d of %d entries have a context; the test needs more", len(one), len(entries))
	}
	for name, split := range map[string]func(int) int{
		"one batch":          func(rest int) int { return rest },
		"batches of 1 to 40": func(int) int { return 1 + rng.IntN(40) },
	} {
		got := write(name, split)
		for content, want := range one {
			if got[content] != want {
				t.Errorf("%s: context of %.30q = %q, want %q", name, content, got[content], want)
			}
		}
		if len(got) != len(one) {
			t.Errorf("%s: %d contexts, want %d", name, len(got), len(one))
		}
	}
}
