package window

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
)

var o200k = tokens.MustGet(tokens.O200kBase)

// step returns a call with its text and the result it gets.
func step(id, command, output string) []Message {
	c := Message{Role: RoleAssistant, Blocks: []Block{{Type: BlockText, Text: command}, {Type: BlockToolUse, ID: id, Name: "bash"}}}
	r := Message{Role: RoleUser, Blocks: []Block{{Type: BlockToolResult, ToolUseID: id, Text: output}}}
	return []Message{counted(c), counted(r)}
}

// counted sets m's tokens: its texts', counted with o200k_base.
func counted(m Message) Message {
	m.Tokens = 0
	for _, b := range m.Blocks {
		m.Tokens += o200k.Count(b.Text)
	}
	return m
}

func newLayout(t testing.TB, budget int) *Layout {
	t.Helper()
	l, err := NewLayout(Options{Policy: ToolLoopPolicy(), Budget: budget, Count: o200k.Count})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestLayout_Evict walks a window through its first evictions: nothing
// goes under the threshold; past it, the oldest steps leave as one
// reference, the newest stays whole, and the digest keeps the line of the
// path the agent went on to use; a later eviction extends that reference
// and leaves the first digest part as it was.
func TestLayout_Evict(t *testing.T) {
	l := newLayout(t, 400)
	conv := []Message{
		counted(Message{Role: RoleSystem, Blocks: []Block{{Type: BlockText, Text: "You are a coding agent."}}}),
		counted(Message{Role: RoleUser, Pinned: true, Blocks: []Block{{Type: BlockText, Text: "Fix the failing parser test."}}}),
	}
	filler := strings.Repeat("unrelated output line\n", 25)
	conv = append(conv, step("c1", "grep -rn parse_tokens src", "src/lexer/parser_impl.py:12: def parse_tokens(stream):\n"+filler)...)
	conv = append(conv, step("c2", "cat src/lexer/parser_impl.py", filler+"return stream.read()")...)
	conv = append(conv, step("c3", "sed -n 1,20p src/lexer/parser_impl.py", filler)...)
	for i, m := range conv[:6] {
		if err := l.Append(m); err != nil {
			t.Fatal(err)
		}
		if i < 5 && l.Evictions() != 0 {
			t.Fatalf("evicted at message %d, at %d of 400 tokens", i, l.Tokens())
		}
	}
	if err := l.Append(conv[6]); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(conv[7]); err != nil {
		t.Fatal(err)
	}
	if l.Evictions() == 0 {
		t.Fatalf("no eviction at %d of 400 tokens", l.Tokens())
	}
	var kinds []string
	for _, s := range l.Segments() {
		kinds = append(kinds, fmt.Sprintf("%d:%d-%d", s.Kind, s.From, s.To))
	}
	// System and task kept, the first two steps one reference, the
	// newest step kept.
	if want := []string{"1:0-1", "1:1-2", "2:2-6", "1:6-8"}; !slices.Equal(kinds, want) {
		t.Fatalf("segments %v, want %v", kinds, want)
	}
	ref := l.Segments()[2]
	m, err := ctxref.Parse(ref.Marker)
	if err != nil || m.ID != "ref-2-6" || m.TurnFrom != 3 || m.TurnTo != 6 || m.Tokens != ref.Tokens {
		t.Errorf("marker %q: %+v, %v", ref.Marker, m, err)
	}
	if m.Type != store.RefToolResults { // as its reference is typed (laidOut.refID)
		t.Errorf("marker %q of tool steps only: type %s, want %s", ref.Marker, m.Type, store.RefToolResults)
	}
	if len(ref.Digest) == 0 || !strings.Contains(ref.Digest[0].Text, "src/lexer/parser_impl.py:12: def parse_tokens(stream):") {
		t.Errorf("digest %+v: want the grep line of the path the agent used", ref.Digest)
	}
	if l.Tokens() > 400 {
		t.Errorf("%d tokens over a budget of 400", l.Tokens())
	}
	first := ref.Digest[0]

	// More steps: the reference grows, its first digest part stays.
	n := l.Evictions()
	for k := 4; l.Evictions() == n; k++ {
		for _, m := range step(fmt.Sprintf("c%d", k), "ls", filler) {
			if err := l.Append(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	ref = l.Segments()[2]
	if ref.Kind != Evicted || ref.From != 2 || ref.To <= 6 || len(ref.Digest) == 0 || !cmp.Equal(ref.Digest[0], first, cmp.AllowUnexported(Excerpt{})) {
		t.Errorf("after a second eviction: %+v", ref)
	}
}

// TestLayout_ShortReplies: a policy that preserves the user's prompts,
// in a small window, over many turns of a prompt and a short reply. A
// reply is never put under a marker larger than itself; and once the
// prompts alone overflow the budget, runs of turns are joined under one
// reference, prompts and all, so that the window stays within its
// budget and every message is one expansion away.
func TestLayout_ShortReplies(t *testing.T) {
	p := PolicyFor("librarian")
	p.KeepTurns = 1
	l, err := NewLayout(Options{Policy: p, Budget: 300, Count: o200k.Count})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(counted(Message{Role: RoleSystem, Blocks: []Block{{Type: BlockText, Text: "You are a careful assistant."}}})); err != nil {
		t.Fatal(err)
	}
	for turn := range 40 {
		prompt := fmt.Sprintf("Please rename the field count%d to total%d in stats.go and run the tests again.", turn, turn)
		for _, m := range []Message{
			{Role: RoleUser, Blocks: []Block{{Type: BlockText, Text: prompt}}},
			{Role: RoleAssistant, Blocks: []Block{{Type: BlockText, Text: "Done."}}},
		} {
			if err := l.Append(counted(m)); err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("turn %d", turn)
			checkLayout(t, name, l)
			for _, s := range l.Segments() {
				if s.Kind == Evicted && s.Tokens <= s.MarkerTokens {
					t.Fatalf("%s: messages %d-%d, %d tokens, under a marker of %d", name, s.From, s.To, s.Tokens, s.MarkerTokens)
				}
			}
		}
	}
	markers := 0
	for _, s := range l.Segments() {
		if s.Kind != Kept {
			markers++
		}
	}
	if markers > 2 {
		t.Errorf("%d markers: the turns were not joined", markers)
	}
}

// TestLayout_Huge: a tool result larger than the whole budget is shown as
// a marker and its head and tail, within the budget, the call whole; so
// is a task larger than the budget.
func TestLayout_Huge(t *testing.T) {
	out := hugeLog()
	items := layOutHuge(t, step("c1", "cat huge.log", out))
	if items[len(items)-2].Kind != PieceMarker {
		t.Errorf("no marker before the excerpt: %+v", items)
	}

	task := counted(Message{Role: RoleUser, Pinned: true, Blocks: []Block{{Type: BlockText, Text: out}}})
	l := newLayout(t, 500)
	if err := l.Append(task); err != nil {
		t.Fatal(err)
	}
	if l.Tokens() > 500 || l.Segments()[0].Kind != Clipped {
		t.Errorf("a task over the budget: %d tokens, %+v", l.Tokens(), l.Segments()[0].Kind)
	}
}

// TestLayout_ClipCall: a command of the agent's larger than
// ClipCallTokens (a heredoc that writes a file) is shown from the start as
// a marker and its head and tail, and its result whole beside it.
func TestLayout_ClipCall(t *testing.T) {
	var heredoc strings.Builder
	heredoc.WriteString("cat <<'EOF' > src/app/main.go\n")
	for i := range 400 {
		fmt.Fprintf(&heredoc, "\tx%d := parse_tokens(%d) // naïve ✓\n", i, i)
	}
	heredoc.WriteString("EOF")
	p := ToolLoopPolicy()
	p.ClipCallTokens = 300
	l, err := NewLayout(Options{Policy: p, Budget: 8000, Count: o200k.Count})
	if err != nil {
		t.Fatal(err)
	}
	sys := counted(Message{Role: RoleSystem, Blocks: []Block{{Type: BlockText, Text: "sys"}}})
	result := "wrote src/app/main.go: 402 lines"
	for _, m := range append([]Message{sys}, step("c1", heredoc.String(), result)...) {
		if err := l.Append(m); err != nil {
			t.Fatal(err)
		}
	}
	segs := l.Segments()
	last := segs[len(segs)-1]
	if last.Kind != Clipped || last.From != 1 || last.To != 3 {
		t.Fatalf("the step with a huge command: %+v", last)
	}
	if most := p.ClipCallTokens + o200k.Count(result) + 1; last.Excerpt.Tokens > most {
		t.Errorf("excerpt of %d tokens, more than %d", last.Excerpt.Tokens, most)
	}
	ex := last.Excerpt.Text
	if !strings.HasPrefix(ex, "cat <<'EOF' > src/app/main.go\n") || !strings.HasSuffix(ex, "EOF\n"+result) {
		t.Errorf("excerpt: %.60q … %q", ex, ex[max(0, len(ex)-60):])
	}

	// A small command stays whole.
	l, _ = NewLayout(Options{Policy: p, Budget: 8000, Count: o200k.Count})
	for _, m := range append([]Message{sys}, step("c1", "cat src/app/main.go", result)...) {
		if err := l.Append(m); err != nil {
			t.Fatal(err)
		}
	}
	if k := l.Segments()[1].Kind; k != Kept {
		t.Errorf("a small step shown as %d, not kept", k)
	}
}

// randomText is lines of paths, identifiers, numbers, words and Unicode.
func randomText(r *rand.Rand, lines int) string {
	words := []string{"src/app/main.go", "parse_tokens", "12345", "error:", "Traceback", "naïve", "日本語のテキスト", "🙂", "x", "self.assertEqual",
		"README.md", "line", "  ", "\t", "def", "return", "ValueError", "42", "./run.sh", "über-long-identifier_name"}
	var b strings.Builder
	for i := range lines {
		if i > 0 {
			b.WriteByte('\n')
		}
		for range r.IntN(12) {
			b.WriteString(words[r.IntN(len(words))])
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// randomWindowConversation is a conversation of calls (some parallel,
// some never answered), results of any size (some larger than any
// budget), prompts and answers, with texts of paths, identifiers and
// Unicode, counted with o200k_base.
func randomWindowConversation(r *rand.Rand, n int) []Message {
	msgs := []Message{{Role: RoleSystem, Blocks: []Block{{Type: BlockText, Text: "You are an agent. " + randomText(r, 3)}}}}
	for _, m := range randomConversation(r, n) {
		for i := range m.Blocks {
			b := &m.Blocks[i]
			switch b.Type {
			case BlockToolResult:
				size := 1 + r.IntN(30)
				if r.IntN(12) == 0 {
					size = 800 + r.IntN(1200) // over any budget here
				}
				b.Text = randomText(r, size)
			case BlockText:
				b.Text += " " + randomText(r, 1+r.IntN(4))
			}
		}
		if m.Role == RoleAssistant && r.IntN(2) == 0 {
			m.Blocks = append([]Block{{Type: BlockText, Text: randomText(r, 2)}}, m.Blocks...)
		}
		m.Pinned = r.IntN(25) == 0
		msgs = append(msgs, m)
	}
	for i := range msgs {
		msgs[i] = counted(msgs[i])
	}
	return msgs
}

// TestLayout_Properties: on random conversations, after every message,
// the window is within its budget; what it shows adds up to its Tokens;
// every message is shown whole or stood for by exactly one marker (so
// everything evicted is one expansion away), never both; a unit is shown
// whole or not at all (no call without its result, no result without its
// call); markers parse and name their messages; every line of an excerpt
// is part of a message it names, which is not shown whole; and the same
// messages give the same window.
func TestLayout_Properties(t *testing.T) {
	n := uint64(80)
	if testing.Short() {
		n = 20
	}
	var seeds []uint64
	for seed := range n {
		seeds = append(seeds, seed)
	}
	// Seeds found past the first ones: 776 re-admitted messages a digest
	// part quoted, and kept the part whole; 1051, many preserved prompts
	// with the markers of short runs between them, went over its budget.
	seeds = append(seeds, 776, 1051)
	if s := os.Getenv("ENGRAM_LAYOUT_SEEDS"); s != "" {
		// A sweep, FROM-TO: go test -run TestLayout_Properties
		// with ENGRAM_LAYOUT_SEEDS=0-5000.
		var from, to uint64
		if _, err := fmt.Sscanf(s, "%d-%d", &from, &to); err != nil {
			t.Fatalf("ENGRAM_LAYOUT_SEEDS=%q: want FROM-TO", s)
		}
		seeds = seeds[:0]
		for seed := from; seed < to; seed++ {
			seeds = append(seeds, seed)
		}
	}
	for _, seed := range seeds {
		r := rand.New(rand.NewPCG(seed, 3))
		msgs := randomWindowConversation(r, 5+r.IntN(80))
		budget := []int{300, 800, 2000, 6000}[r.IntN(4)]
		p := []Policy{ToolLoopPolicy(), PolicyFor("claude"), PolicyFor("librarian"), PolicyFor("architect"), PolicyFor("academic")}[r.IntN(5)]
		p.Clip = []float64{0, 0.3, SeedClip}[r.IntN(3)]
		p.ClipCallTokens = []int{0, 40}[r.IntN(2)]
		p.KeepTurns = r.IntN(4)
		p.MaxRefTokens = []int{DefaultMaxRefTokens, 400}[r.IntN(2)]
		l, err := NewLayout(Options{Policy: p, Budget: budget, Count: o200k.Count})
		if err != nil {
			t.Fatal(err)
		}
		// Appends, and now and then the re-admission of a reference:
		// taken back whole, or refused with the window unchanged.
		type readmit struct{ at, from, to int }
		var readmits []readmit
		for n, m := range msgs {
			if err := l.Append(m); err != nil {
				t.Fatalf("seed %d: append %d: %v", seed, n, err)
			}
			name := fmt.Sprintf("seed %d, %d messages, budget %d", seed, n+1, budget)
			checkLayout(t, name, l)
			if r.IntN(6) != 0 {
				continue
			}
			var refs []Segment
			for _, s := range l.Segments() {
				if s.Kind != Kept {
					refs = append(refs, s)
				}
			}
			if len(refs) == 0 {
				continue
			}
			s := refs[r.IntN(len(refs))]
			before := l.Pieces()
			err := l.Readmit(s.From, s.To)
			switch {
			case errors.Is(err, ErrNoRoom):
				if diff := cmp.Diff(before, l.Pieces()); diff != "" {
					t.Fatalf("%s: a refused re-admission changed the window:\n%s", name, diff)
				}
			case err != nil:
				t.Fatalf("%s: readmit %d-%d: %v", name, s.From, s.To, err)
			default:
				readmits = append(readmits, readmit{n + 1, s.From, s.To})
				for _, p := range l.Pieces() {
					if p.Kind == PieceMarker && p.From < s.To && s.From < p.To {
						t.Fatalf("%s: messages %d-%d re-admitted, and under marker %q", name, s.From, s.To, p.Text)
					}
				}
				checkLayout(t, name+", re-admitted", l)
			}
		}
		again, _ := NewLayout(Options{Policy: p, Budget: budget, Count: o200k.Count})
		k := 0
		for n, m := range msgs {
			if err := again.Append(m); err != nil {
				t.Fatal(err)
			}
			for ; k < len(readmits) && readmits[k].at == n+1; k++ {
				if err := again.Readmit(readmits[k].from, readmits[k].to); err != nil {
					t.Fatalf("seed %d: the same re-admission again: %v", seed, err)
				}
			}
		}
		if diff := cmp.Diff(l.Pieces(), again.Pieces()); diff != "" {
			t.Fatalf("seed %d: the same messages gave another window (-first +second):\n%s", seed, diff)
		}
	}
}

func checkLayout(t *testing.T, name string, l *Layout) {
	t.Helper()
	msgs := l.Messages()
	if l.Tokens() > l.o.Budget {
		t.Fatalf("%s: %d tokens over the budget", name, l.Tokens())
	}
	units, err := Units(msgs)
	if err != nil {
		t.Fatal(err)
	}
	where := make([]string, len(msgs)) // "kept" or the marker's text
	total := 0
	var excerpts []Piece
	for _, it := range l.Pieces() {
		total += it.Tokens
		switch it.Kind {
		case PieceMessage:
			if where[it.From] != "" {
				t.Fatalf("%s: message %d shown twice", name, it.From)
			}
			where[it.From] = "kept"
		case PieceMarker:
			m, err := ctxref.Parse(it.Text)
			if err != nil || m.ID != fmt.Sprintf("ref-%d-%d", it.From, it.To) || m.TurnFrom != it.From+1 || m.TurnTo != it.To {
				t.Fatalf("%s: marker %q for %d-%d: %+v, %v", name, it.Text, it.From, it.To, m, err)
			}
			for i := it.From; i < it.To; i++ {
				if where[i] != "" {
					t.Fatalf("%s: message %d is %s and under %q", name, i, where[i], it.Text)
				}
				where[i] = it.Text
			}
			if got := o200k.Count(it.Text); got != it.Tokens {
				t.Fatalf("%s: marker of %d tokens counted %d", name, got, it.Tokens)
			}
		case PieceExcerpt:
			excerpts = append(excerpts, it)
			if got := o200k.Count(it.Text); got != it.Tokens {
				t.Fatalf("%s: excerpt of %d tokens counted %d", name, got, it.Tokens)
			}
		}
	}
	if total != l.Tokens() {
		t.Fatalf("%s: items add up to %d tokens, the window says %d", name, total, l.Tokens())
	}
	for i, w := range where {
		if w == "" {
			t.Fatalf("%s: message %d is neither shown nor stood for", name, i)
		}
	}
	// What may never go (the system prompt, pinned and preserved
	// messages) is shown whole when it takes at most a quarter of a
	// budget that is not tiny (a tiny one clips and joins anything), and
	// no call waits for its result.
	fixed := 0 // units holding such a message stay whole
	for _, u := range units {
		if !evictable(msgs[u.From:u.To], l.o.Policy, leads(msgs, u.From)) {
			fixed += l.sum(u.From, u.To)
		}
	}
	open := len(units) > 0 && units[len(units)-1].Open // a call waiting, which may not go either
	if l.o.Budget >= 2000 && fixed <= l.o.Budget/4 && !open {
		for _, s := range l.segs {
			if s.Kind != Kept && !evictable(msgs[s.From:s.To], l.o.Policy, leads(msgs, s.From)) && s.Tokens <= l.o.Budget/4 {
				t.Fatalf("%s: messages %d-%d, which may not go, are not shown whole", name, s.From, s.To)
			}
		}
	}
	for _, u := range units {
		for i := u.From; i < u.To; i++ {
			if (where[i] == "kept") != (where[u.From] == "kept") {
				t.Fatalf("%s: unit %v is cut: message %d is %q, %d is %q", name, u, u.From, where[u.From], i, where[i])
			}
		}
	}
	for _, ex := range excerpts {
		for line := range strings.SplitSeq(ex.Text, "\n") {
			if line == "" {
				continue
			}
			if !slices.ContainsFunc(ex.Sources, func(i int) bool {
				return slices.ContainsFunc(msgs[i].Blocks, func(b Block) bool { return strings.Contains(b.Text, line) })
			}) {
				t.Fatalf("%s: excerpt line %q is in none of messages %v", name, line, ex.Sources)
			}
		}
		for _, i := range ex.Sources {
			if where[i] == "kept" {
				t.Fatalf("%s: an excerpt quotes message %d, which is shown whole", name, i)
			}
		}
	}
}

// BenchmarkLayout_Evict measures an eviction of a window of 200 messages
// (100 steps of a coding agent with results of 20 to 200 lines): the
// decision, the markers rendered and counted, and the digest chosen. It
// reports the median and the 95th percentile of the appends that evicted.
func BenchmarkLayout_Evict(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	msgs := []Message{counted(Message{Role: RoleSystem, Blocks: []Block{{Type: BlockText, Text: "You are a coding agent."}}}),
		counted(Message{Role: RoleUser, Pinned: true, Blocks: []Block{{Type: BlockText, Text: "Fix the bug. " + randomText(r, 20)}}})}
	for k := range 99 {
		msgs = append(msgs, step(fmt.Sprintf("c%d", k), randomText(r, 3), randomText(r, 20+r.IntN(180)))...)
	}
	var took []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		l := newLayout(b, 8000)
		for _, m := range msgs {
			n := l.Evictions()
			start := time.Now()
			if err := l.Append(m); err != nil {
				b.Fatal(err)
			}
			if l.Evictions() > n {
				took = append(took, time.Since(start))
			}
		}
	}
	slices.Sort(took)
	if len(took) > 0 {
		b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs/evict")
		b.ReportMetric(float64(took[len(took)*95/100].Microseconds()), "p95-µs/evict")
		b.ReportMetric(float64(len(took))/float64(b.N), "evictions/op")
	}
}

// BenchmarkLayout_Rebuild lays out a window of 2,000 messages from the
// start, as a process that opens a window's ledger does: appends that
// each cost what is new, not the whole conversation again.
func BenchmarkLayout_Rebuild(b *testing.B) {
	var msgs []Message
	for i := range 2000 {
		role := RoleUser
		if i%2 == 1 {
			role = RoleAssistant
		}
		msgs = append(msgs, counted(Message{Role: role, Blocks: []Block{{Type: BlockText,
			Text: fmt.Sprintf("step %d internal/pkg%d/file.go ", i, i) + strings.Repeat("word ", 100)}}}))
	}
	p := PolicyFor(DefaultRole)
	for b.Loop() {
		l, err := NewLayout(Options{Policy: p, Budget: 21000, Count: o200k.Count})
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range msgs {
			if err := l.Append(m); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/2000, "µs/msg")
}

// leads reports whether messages from i on would open the conversation:
// every one before is a system message.
func leads(msgs []Message, i int) bool {
	for _, m := range msgs[:i] {
		if m.Role != RoleSystem {
			return false
		}
	}
	return true
}

// TestFirstLine: a marker's hint is the first line of the user's words,
// not of a block a harness wrapped in a tag and added to them.
func TestFirstLine(t *testing.T) {
	for _, tc := range []struct {
		blocks []string
		want   string
	}{
		{[]string{"\n  fix the flaky test\nin retry.go"}, "fix the flaky test"},
		{[]string{"<system-reminder>\nAs you answer, use the tools.\n</system-reminder>", "why does TestRetry time out?"}, "why does TestRetry time out?"},
		{[]string{"<environment_context>\n  <cwd>/repo</cwd>\n</environment_context>"}, ""},
		{[]string{"<b>bold</b> is how HTML says it"}, "<b>bold</b> is how HTML says it"},
		{[]string{"<<< HEAD merge conflict >>>"}, "<<< HEAD merge conflict >>>"},
	} {
		var m Message
		for _, b := range tc.blocks {
			m.Blocks = append(m.Blocks, Block{Type: BlockText, Text: b})
		}
		if got := firstLine(&m); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.blocks, got, tc.want)
		}
	}
}

// TestLayout_KeepsTask: a tool loop's window keeps the prompt that opens
// the newest turn through an eviction when nothing pins it (a harness's
// session through engram proxy), as the trajectories it was measured on
// pin their task; an older turn's prompt goes like any step.
func TestLayout_KeepsTask(t *testing.T) {
	l, conv := evictedLoop(t, append(append([]Message{prompt("List the packages.")},
		step("c1", "go list ./...", loopFiller)...), prompt("Fix the failing parser test.")))
	var shown []string
	for _, s := range l.Segments() {
		if s.Kind == Evicted {
			continue
		}
		for _, m := range conv[s.From:s.To] {
			if isPrompt(&m) {
				shown = append(shown, m.Blocks[0].Text)
			}
		}
	}
	if want := []string{"Fix the failing parser test."}; !slices.Equal(shown, want) {
		t.Errorf("prompts shown %q, want %q", shown, want)
	}
}

// TestLayout_KeepsTaskPastForget: a call's result whose call an operator
// forgot stands as a user's message saying so (unpaired), which the
// layout takes for a prompt; the tool loop's window still keeps the task,
// not that message.
func TestLayout_KeepsTaskPastForget(t *testing.T) {
	// c2's call was forgotten: its result stands as the placeholder.
	l, _ := evictedLoop(t, append(append([]Message{prompt("Fix the failing parser test.")},
		step("c1", "ls", loopFiller)...), prompt(forgottenPair)))
	task := false
	for _, s := range l.Segments() {
		task = task || s.Kind != Evicted && s.From <= 1 && 1 < s.To
	}
	if !task {
		t.Errorf("the task is not shown: %s", spans(l))
	}
}

// loopFiller is a step's output that names nothing the agent uses.
var loopFiller = strings.Repeat("unrelated output line\n", 25)

// prompt is a user's text message, counted.
func prompt(text string) Message {
	return counted(Message{Role: RoleUser, Blocks: []Block{{Type: BlockText, Text: text}}})
}

// evictedLoop lays out, in a tool loop's window of 400 tokens, a system
// prompt, head and six steps of filler after it, and checks that the
// window evicted and is within its budget; it returns the layout and the
// messages.
func evictedLoop(t *testing.T, head []Message) (*Layout, []Message) {
	t.Helper()
	l := newLayout(t, 400)
	conv := append([]Message{counted(Message{Role: RoleSystem, Blocks: []Block{{Type: BlockText, Text: "You are a coding agent."}}})}, head...)
	for k := range 6 {
		conv = append(conv, step(fmt.Sprintf("s%d", k), "ls", loopFiller)...)
	}
	for _, m := range conv {
		if err := l.Append(m); err != nil {
			t.Fatal(err)
		}
	}
	if l.Evictions() == 0 {
		t.Fatalf("no eviction at %d of 400 tokens", l.Tokens())
	}
	if l.Tokens() > 400 {
		t.Errorf("%d tokens over a budget of 400", l.Tokens())
	}
	return l, conv
}

// hugeLog is a tool's output far larger than a 1,000-token window.
func hugeLog() string {
	var out strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&out, "line %d of a very long log: naïve café ✓\n", i)
	}
	return out.String()
}

// layOutHuge lays out a system prompt and conv, a call of "cat huge.log"
// and its result of hugeLog, in a tool loop's window of 1,000 tokens, and
// checks that the window is within its budget and ends with the result's
// head and tail; it returns the window's pieces.
func layOutHuge(t *testing.T, conv []Message) []Piece {
	t.Helper()
	l := newLayout(t, 1000)
	for _, m := range append([]Message{counted(Message{Role: RoleSystem, Blocks: []Block{{Type: BlockText, Text: "sys"}}})}, conv...) {
		if err := l.Append(m); err != nil {
			t.Fatal(err)
		}
	}
	if l.Tokens() > 1000 {
		t.Fatalf("%d tokens over 1000", l.Tokens())
	}
	items := l.Pieces()
	last := items[len(items)-1]
	if last.Kind != PieceExcerpt || !strings.HasPrefix(last.Text, "cat huge.log\nline 0 of") || !strings.HasSuffix(last.Text, "line 4999 of a very long log: naïve café ✓\n") {
		t.Errorf("excerpt of the huge result: %.80q … %q", last.Text, last.Text[max(0, len(last.Text)-60):])
	}
	return items
}
