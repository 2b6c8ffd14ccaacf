package trajectory_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/engramhq/engram/internal/trajectory"
)

// smallRun is a hand-made run. Turns are the assistant messages 4, 6 and 8,
// whose needles first seen in an observation are:
//
//	4: src/parser.py (message 3)
//	6: parse_tokens, stream.read (message 5), src/lexer.py (message 3)
//	8: 12345 (message 7), parse_tokens (message 5)
//
// "parser" is first seen in the task, so it is never a needle.
func smallRun() trajectory.Run {
	m := func(role, content string) trajectory.Message { return trajectory.Message{Role: role, Content: content} }
	return trajectory.Run{
		ID: "small",
		Messages: []trajectory.Message{
			m(trajectory.System, "You are a helpful agent."),
			m(trajectory.User, "Fix the parser bug."),
			m(trajectory.Assistant, "```bash\nls src\n```"),
			m(trajectory.User, "src/parser.py\nsrc/lexer.py"),
			m(trajectory.Assistant, "cat src/parser.py parser"),
			m(trajectory.User, "def parse_tokens(stream):\n    return stream.read()"),
			m(trajectory.Assistant, "parse_tokens calls stream.read and src/lexer.py"),
			m(trajectory.User, "ok 12345"),
			m(trajectory.Assistant, "12345 parse_tokens"),
		},
		Tokens: []int{10, 20, 5, 30, 5, 40, 8, 3, 6},
	}
}

// scripted is a Strategy that sends a fixed context at each turn, by the
// number of messages it has been given.
type scripted struct {
	n        int
	contexts map[int][]trajectory.Block
}

var _ trajectory.Strategy = (*scripted)(nil)

func (s *scripted) Add(trajectory.Message, int) error {
	s.n++
	return nil
}

func (s *scripted) Context() ([]trajectory.Block, error) { return s.contexts[s.n], nil }

func spec(budget int, contexts map[int][]trajectory.Block) trajectory.Spec {
	return trajectory.Spec{Name: "scripted", Budget: budget, New: func(int) trajectory.Strategy { return &scripted{contexts: contexts} }}
}

func kept(i int) trajectory.Block { return trajectory.Block{Kind: trajectory.Kept, Index: i} }

func TestReplay_FullHistory(t *testing.T) {
	full, scores, err := trajectory.Replay(smallRun(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(scores) != 0 {
		t.Errorf("%d scores for no specs", len(scores))
	}
	// Contexts of 65, 110 and 121 tokens; each begins with the whole of
	// the one before.
	want := trajectory.Score{Turns: 3, Needles: 6, LineHits: 6, StringHits: 6, ExpansionHits: 6,
		TokensSent: 65 + 110 + 121, CachedTokens: 65 + 110}
	if diff := cmp.Diff(want, full); diff != "" {
		t.Errorf("full history mismatch (-want +got):\n%s", diff)
	}
	if got := full.EffectiveTokens(); got != 138.5 {
		t.Errorf("effective tokens %v, want 0.1 x 175 + 121 = 138.5", got)
	}
}

// TestReplay_Scores scores a strategy with a marker, a placeholder and a
// context that keeps an observation without its action.
func TestReplay_Scores(t *testing.T) {
	marker := trajectory.Block{Kind: trajectory.Marker, Text: "[CTX-REF:r1 | 2 turns | src/lexer.py]", Tokens: 7, Covers: []int{2, 3}}
	contexts := map[int][]trajectory.Block{
		// 60 tokens, over the budget of 50; observation 3 without its
		// action 2. src/parser.py: its line, in 3.
		4: {kept(0), kept(1), kept(3)},
		// 54 tokens, over; the pairs 2-3 (both under the marker) and 4-5
		// (5 in place as a placeholder) whole. parse_tokens and
		// stream.read: only in the masked 5. src/lexer.py: in the
		// marker's text (string), and its line in 3, which the marker
		// stands for (within one expansion).
		6: {kept(0), kept(1), marker, kept(4), {Kind: trajectory.Placeholder, Index: 5, Tokens: 12}},
		// 48 tokens, of which 0, 1 and the marker (37) are cached. 12345:
		// its line, in 7. parse_tokens: as a string in 6, not its line.
		8: {kept(0), kept(1), marker, kept(6), kept(7)},
	}
	_, scores, err := trajectory.Replay(smallRun(), []trajectory.Spec{spec(50, contexts)})
	if err != nil {
		t.Fatal(err)
	}
	want := trajectory.Score{Turns: 3, Needles: 6,
		LineHits:      1 + 0 + 1,
		StringHits:    1 + 1 + 2,
		ExpansionHits: 1 + 1 + 1,
		TokensSent:    60 + 54 + 48,
		CachedTokens:  0 + 30 + 37,
		OverBudget:    2,
		Unpaired:      1,
	}
	if diff := cmp.Diff(want, scores[0]); diff != "" {
		t.Errorf("scores mismatch (-want +got):\n%s", diff)
	}
	if got, want := scores[0].LineRecall(), 2.0/6; got != want {
		t.Errorf("line recall %v, want %v", got, want)
	}
	if got, want := scores[0].ExpansionRecall(), 3.0/6; got != want {
		t.Errorf("recall within one expansion %v, want %v", got, want)
	}
	if got, want := scores[0].StringRecall(), 4.0/6; got != want {
		t.Errorf("string recall %v, want %v", got, want)
	}
	if got, want := scores[0].EffectiveTokens(), 0.1*67+(162-67); got != want {
		t.Errorf("effective tokens %v, want %v", got, want)
	}
}

// TestReplay_Excerpt scores excerpts: text kept verbatim from messages
// not sent whole. Their whole lines count for line recall, their text for
// string recall, and the cache compares them by text.
func TestReplay_Excerpt(t *testing.T) {
	excerpt := func(text string, tokens int, covers ...int) trajectory.Block {
		return trajectory.Block{Kind: trajectory.Excerpt, Text: text, Tokens: tokens, Covers: covers}
	}
	a := trajectory.Block{Kind: trajectory.Marker, Text: "[CTX-REF:a]", Tokens: 7, Covers: []int{2, 3}}
	b := trajectory.Block{Kind: trajectory.Marker, Text: "[CTX-REF:b]", Tokens: 9, Covers: []int{2, 3, 4, 5}}
	lines := excerpt("src/lexer.py\nparse_tokens(stream", 6, 3, 5)
	contexts := map[int][]trajectory.Block{
		// 41 tokens. src/parser.py: its line, in the excerpt.
		4: {kept(0), kept(1), a, excerpt("src/parser.py", 4, 3)},
		// 45 tokens, 30 cached. src/lexer.py: its line, in the excerpt.
		// parse_tokens: in the excerpt, but not its whole line "def
		// parse_tokens(stream):"; back within one expansion through b, as
		// is stream.read.
		6: {kept(0), kept(1), b, lines},
		// 56 tokens, 45 cached (the excerpt is the same text). 12345: its
		// line, in 7. parse_tokens: as at 6.
		8: {kept(0), kept(1), b, lines, kept(6), kept(7)},
	}
	_, scores, err := trajectory.Replay(smallRun(), []trajectory.Spec{spec(50, contexts)})
	if err != nil {
		t.Fatal(err)
	}
	want := trajectory.Score{Turns: 3, Needles: 6,
		LineHits:      1 + 1 + 1,
		StringHits:    1 + 2 + 2,
		ExpansionHits: 1 + 3 + 2,
		TokensSent:    41 + 45 + 56,
		CachedTokens:  0 + 30 + 45,
		OverBudget:    1,
	}
	if diff := cmp.Diff(want, scores[0]); diff != "" {
		t.Errorf("scores mismatch (-want +got):\n%s", diff)
	}

	for _, tt := range []struct {
		name  string
		block trajectory.Block
		want  string
	}{
		{"NotVerbatim", excerpt("src/parser.py\nsrc/main.py", 4, 3), `excerpt line "src/main.py" is in none of messages [3]`},
		{"NotItsMessage", excerpt("src/parser.py", 4, 2), `excerpt line "src/parser.py" is in none of messages [2]`},
		{"Future", excerpt("ok", 1, 7), "excerpt quotes message 7, not among the 4 messages given"},
		{"NoMessage", excerpt("src/parser.py", 4), "an excerpt names no message it quotes"},
		{"NegativeTokens", excerpt("src", -1, 3), "block 2: -1 tokens"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			contexts := map[int][]trajectory.Block{4: {kept(0), kept(1), tt.block}}
			_, _, err := trajectory.Replay(smallRun(), []trajectory.Spec{spec(0, contexts)})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got error %v, want one holding %q", err, tt.want)
			}
		})
	}
}

// TestReplay_Text scores texts: what an assembly writes beside the
// messages. Whole lines in them count for line recall, their text for
// string recall, the cache compares them by text, and their lines are not
// checked against any message.
func TestReplay_Text(t *testing.T) {
	text := func(s string, tokens int) trajectory.Block {
		return trajectory.Block{Kind: trajectory.Text, Text: s, Tokens: tokens}
	}
	arc := text("The conversation so far:\n- Fix the parser bug.", 9)
	contexts := map[int][]trajectory.Block{
		// 41 tokens. src/parser.py: its line, in a text that quotes it
		// under a heading no message holds.
		4: {kept(0), kept(1), arc, text("[session s turn 3 tool_result] x\nsrc/parser.py", 2)},
		// 53 tokens, 39 cached (the arc is the same text). parse_tokens:
		// as a string, not its line; stream.read: its line, framed;
		// src/lexer.py: nowhere.
		6: {kept(0), kept(1), arc, text("- user: result: parse_tokens …\n    return stream.read()", 14)},
		// 50 tokens, 39 cached. 12345: its line, in 7. parse_tokens: as
		// a string in 6.
		8: {kept(0), kept(1), arc, kept(6), kept(7)},
	}
	_, scores, err := trajectory.Replay(smallRun(), []trajectory.Spec{spec(50, contexts)})
	if err != nil {
		t.Fatal(err)
	}
	want := trajectory.Score{Turns: 3, Needles: 6,
		LineHits:      1 + 1 + 1,
		StringHits:    1 + 2 + 2,
		ExpansionHits: 1 + 1 + 1,
		TokensSent:    41 + 53 + 50,
		CachedTokens:  0 + 39 + 39,
		OverBudget:    1,
	}
	if diff := cmp.Diff(want, scores[0]); diff != "" {
		t.Errorf("scores mismatch (-want +got):\n%s", diff)
	}
}

// TestReplay_Refused: a turn a strategy has no context for is counted,
// scored as nothing sent, and the replay goes on.
func TestReplay_Refused(t *testing.T) {
	refuse := trajectory.Spec{Name: "refusing", Budget: 50, New: func(int) trajectory.Strategy {
		return &refusing{scripted: scripted{contexts: map[int][]trajectory.Block{4: {kept(0), kept(1), kept(3)}, 8: {kept(0), kept(1)}}}, at: 6}
	}}
	_, scores, err := trajectory.Replay(smallRun(), []trajectory.Spec{refuse})
	if err != nil {
		t.Fatal(err)
	}
	// 4: src/parser.py found in 3; 6: its three needles missed; 8: 30
	// tokens, none cached after nothing was sent.
	want := trajectory.Score{Turns: 3, Needles: 6, LineHits: 1, StringHits: 1, ExpansionHits: 1, TokensSent: 60 + 30, Unpaired: 1, OverBudget: 1, Refused: 1}
	if diff := cmp.Diff(want, scores[0]); diff != "" {
		t.Errorf("scores mismatch (-want +got):\n%s", diff)
	}
}

// refusing is scripted, but has no context after at messages.
type refusing struct {
	scripted
	at int
}

func (s *refusing) Context() ([]trajectory.Block, error) {
	if s.n == s.at {
		return nil, fmt.Errorf("turn %d: %w", s.n, trajectory.ErrNoContext)
	}
	return s.scripted.Context()
}

// TestReplay_LineAnywhere checks a consequence of the README's definition
// of line recall, as baselines.py computes it: a line counts wherever it
// stands in the context, here in an assistant message that quotes it.
func TestReplay_LineAnywhere(t *testing.T) {
	run := smallRun()
	run.Messages = append(run.Messages[:7:7], trajectory.Message{Role: trajectory.User, Content: "parse_tokens calls stream.read"}, run.Messages[8])
	run.Tokens = run.Tokens[:9]
	// At turn 8 the needle parse_tokens has the line "parse_tokens calls
	// stream.read", which observation 7 holds and assistant message 6
	// holds too (as part of a longer line).
	contexts := map[int][]trajectory.Block{4: {kept(0), kept(1)}, 6: {kept(0), kept(1)}, 8: {kept(0), kept(1), kept(6)}}
	_, scores, err := trajectory.Replay(run, []trajectory.Spec{spec(0, contexts)})
	if err != nil {
		t.Fatal(err)
	}
	// Turn 6: parse_tokens, stream.read, src/lexer.py, none in context.
	// Turn 8 wants parse_tokens (from 5); "ok 12345" is gone.
	if got := scores[0]; got.Needles != 5 || got.LineHits != 1 || got.StringHits != 1 {
		t.Errorf("got %d needles, %d found by line, %d as strings; want 5, 1, 1", got.Needles, got.LineHits, got.StringHits)
	}
}

func TestReplay_BadContext(t *testing.T) {
	tests := []struct {
		name  string
		block trajectory.Block
		want  string
	}{
		{"Future", kept(4), "context at message 4: block 2: message 4 is not among the 4 messages given"},
		{"Negative", trajectory.Block{Kind: trajectory.Placeholder, Index: -1}, "message -1 is not among"},
		{"Twice", kept(1), "message 1 is in the context twice"},
		{"MarkerFuture", trajectory.Block{Kind: trajectory.Marker, Covers: []int{2, 9}}, "marker covers message 9, not among the 4 messages given"},
		{"NegativeTokens", trajectory.Block{Kind: trajectory.Marker, Tokens: -3}, "block 2: -3 tokens"},
		{"NoKind", trajectory.Block{}, "block 2: unknown kind 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			contexts := map[int][]trajectory.Block{4: {kept(0), kept(1), tt.block}}
			_, _, err := trajectory.Replay(smallRun(), []trajectory.Spec{spec(0, contexts)})
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "run small: scripted at 0") {
				t.Fatalf("got error %v, want one holding %q", err, tt.want)
			}
		})
	}
}

// TestBaselines checks the baselines' contexts against baselines.py's
// build, worked by hand on the small run's tokens (10, 20, 5, 30, 5, 40, 8,
// 3, 6), before message 8.
func TestBaselines(t *testing.T) {
	placeholder := func(i int) trajectory.Block {
		return trajectory.Block{Kind: trajectory.Placeholder, Index: i, Tokens: trajectory.PlaceholderTokens}
	}
	tests := []struct {
		name     string
		strategy trajectory.Strategy
		want     []trajectory.Block
	}{
		// 30 fixed, then 7 (3) and 6 (8): 41; 5 (40) does not fit.
		{"Recency70", trajectory.NewRecency(70), []trajectory.Block{kept(0), kept(1), kept(6), kept(7)}},
		// Nothing fits beside the fixed messages, which are kept anyway.
		{"Recency10", trajectory.NewRecency(10), []trajectory.Block{kept(0), kept(1)}},
		{"RecencyAll", trajectory.NewRecency(1000), []trajectory.Block{kept(0), kept(1), kept(2), kept(3), kept(4), kept(5), kept(6), kept(7)}},
		// Observations 3, 5 and 7; 3 and 5 masked. 30, then 7 (3), 6 (8),
		// 5 (12), 4 (5), 3 (12): 70; 2 (5) does not fit.
		{"Masking70Keep1", trajectory.NewMasking(70, 1), []trajectory.Block{kept(0), kept(1), placeholder(3), kept(4), placeholder(5), kept(6), kept(7)}},
		// Observation 3 alone is masked. 30, then 7 (3), 6 (8), 5 (40), 4
		// (5), 3 (12): 98; 2 (5) does not fit.
		{"Masking100Keep2", trajectory.NewMasking(100, 2), []trajectory.Block{kept(0), kept(1), placeholder(3), kept(4), kept(5), kept(6), kept(7)}},
	}
	run := smallRun()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i, m := range run.Messages[:8] {
				if err := tt.strategy.Add(m, run.Tokens[i]); err != nil {
					t.Fatal(err)
				}
			}
			got, err := tt.strategy.Context()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("context mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBaselines_Specs(t *testing.T) {
	var got []string
	for _, s := range trajectory.Baselines(4000, 8000) {
		got = append(got, s.Name+" "+strings.Repeat("k", s.Budget/4000))
		if s.New(s.Budget) == nil {
			t.Errorf("%s: no strategy", s.Name)
		}
	}
	want := []string{"recency truncation k", "recency truncation kk", "observation masking (last 5 whole) k", "observation masking (last 5 whole) kk"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Baselines mismatch (-want +got):\n%s", diff)
	}
}
