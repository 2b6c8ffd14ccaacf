package trajectory

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/engramhq/engram/internal/assemble"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// TestTurnBlocks maps an assembled turn back onto blocks, and refuses a
// turn whose messages are not the run's at the places it names.
func TestTurnBlocks(t *testing.T) {
	run := []Message{
		{Role: System, Content: "system"},
		{Role: User, Content: "the task"},
		{Role: Assistant, Content: "ls"},
		{Role: User, Content: "a.py\nb.py"},
		{Role: Assistant, Content: "cat a.py"},
		{Role: User, Content: "def f(): pass"},
		{Role: Assistant, Content: "cat b.py"},
		{Role: User, Content: "def g(): pass"},
	}
	given, err := WindowMessages(run)
	if err != nil {
		t.Fatal(err)
	}
	enc := tokens.MustGet(tokens.O200kBase)
	marker := `[CTX-REF:tool_results | 2 turns 3-4 (12 tokens) | retrieve_context(ref_id="ref-abc")]`
	arc, found := "The conversation so far: the task", "[session s turn 0 tool_result] def f(): pass"
	msg := func(i int) *window.Message { m := given[i]; return &m }
	// What the Assembler makes of the step 6-7: the system prompt, the
	// task, a marker for 2-3 with a summary, 4 and 5 whole, then the step,
	// the arc and the pre-fetch after its result.
	final := given[7]
	final.Blocks = append(append([]window.Block(nil), final.Blocks...), window.Block{Type: window.BlockText, Text: arc},
		window.Block{Type: window.BlockText, Text: found})
	turn := func(items []window.Item) assemble.Turn {
		return assemble.Turn{
			Messages: []window.Message{given[0], given[1], {Role: window.RoleUser, Blocks: []window.Block{{Type: window.BlockText, Text: marker + "\nQuoted: a.py"}}},
				given[4], given[5], given[6], final},
			History: assemble.Compaction{Items: items},
		}
	}
	items := []window.Item{{Pos: 1, Message: msg(1)}, {Pos: 2, Marker: marker}, {Pos: 2, Excerpt: "Quoted: a.py"}, {Pos: 4, Message: msg(4)}, {Pos: 5, Message: msg(5)}}
	got, err := turnBlocks(turn(items), given, enc)
	if err != nil {
		t.Fatal(err)
	}
	want := []Block{
		{Kind: Kept, Index: 0}, {Kind: Kept, Index: 1},
		{Kind: Marker, Text: marker, Tokens: enc.Count(marker), Covers: []int{2, 3}},
		{Kind: Text, Text: "Quoted: a.py", Tokens: enc.Count("Quoted: a.py")},
		{Kind: Kept, Index: 4}, {Kind: Kept, Index: 5}, {Kind: Kept, Index: 6}, {Kind: Kept, Index: 7},
		{Kind: Text, Text: arc, Tokens: enc.Count(arc)}, {Kind: Text, Text: found, Tokens: enc.Count(found)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("blocks mismatch (-want +got):\n%s", diff)
	}

	for name, bad := range map[string][]window.Item{
		// Message 5 said to be at place 4: a kept message mapped to the
		// wrong index.
		"WrongPlace":      {{Pos: 1, Message: msg(1)}, {Pos: 2, Marker: marker}, {Pos: 4, Message: msg(5)}, {Pos: 5, Message: msg(5)}},
		"PlaceOutOfRange": {{Pos: 1, Message: msg(1)}, {Pos: 2, Marker: marker}, {Pos: 4, Message: msg(4)}, {Pos: 8, Message: msg(5)}},
		"MarkerPastRun":   {{Pos: 1, Message: msg(1)}, {Pos: 2, Marker: strings.Replace(marker, "3-4", "3-12", 1)}},
	} {
		t.Run(name, func(t *testing.T) {
			if b, err := turnBlocks(turn(bad), given, enc); err == nil {
				t.Errorf("no error; blocks %+v", b)
			}
		})
	}
	t.Run("StepNotGiven", func(t *testing.T) {
		tr := turn(items)
		tr.Messages[5] = given[4] // the step's call is another message
		if b, err := turnBlocks(tr, given, enc); err == nil {
			t.Errorf("no error; blocks %+v", b)
		}
	})
}
