package window

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestEntityCount: a run's entities counted as joinRefs counts them, in
// pieces added one after another, are topEntities of the whole run.
func TestEntityCount(t *testing.T) {
	l, err := NewLayout(Options{Policy: PolicyFor(DefaultRole), Budget: 1 << 20, Count: o200k.Count})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	names := []string{"Parser", "Lexer", "HandlerFunc", "ServeMux", "Conn", "Transport", "RoundTrip", "Cookie"}
	for i := range 200 {
		role := RoleUser
		if i%2 == 1 {
			role = RoleAssistant
		}
		text := fmt.Sprintf("step %d:", i)
		for range r.IntN(6) {
			text += " " + names[r.IntN(len(names))]
		}
		if err := l.Append(Message{Role: role, Blocks: []Block{{Type: BlockText, Text: text}}}); err != nil {
			t.Fatal(err)
		}
	}
	named := 0
	for range 200 {
		from := r.IntN(len(l.msgs))
		c := &entityCount{count: map[string]int{}}
		for at := from; at < len(l.msgs); {
			to := min(len(l.msgs), at+1+r.IntN(10))
			c.add(l, at, to)
			at = to
			for _, n := range []int{1, 3, 5} {
				got, want := c.top(n), l.topEntities(from, at, n)
				if !slices.Equal(got, want) {
					t.Fatalf("[%d, %d) top %d: %v, want %v", from, at, n, got, want)
				}
				named += len(got)
			}
		}
	}
	if named == 0 {
		t.Fatal("no run named an entity: the test shows nothing")
	}
}
