package ctxref

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
)

// seedMarker is the marker of seed 000's example, with what this grammar
// adds.
func seedMarker() Marker {
	return Marker{ID: "ref_7f3a", Type: store.RefConversation, TurnFrom: 12, TurnTo: 26, Turns: 15, Tokens: 4200,
		Time: time.Date(2026, 11, 25, 14, 23, 41, 0, time.UTC), Topics: []string{"auth flow", "JWT", "middleware"},
		Entities: []string{"internal/auth/jwt.go", "refreshToken"}, Hints: []string{"why does token refresh fail"}}
}

const seedRendered = `[CTX-REF:conversation | 15 turns 12-26 (4,200 tokens) @ 2026-11-25 14:23 | Topics: auth flow, JWT, middleware | Entities: internal/auth/jwt.go, refreshToken | Ask: why does token refresh fail | retrieve_context(ref_id="ref_7f3a")]`

// equal compares markers as Parse returns them: no list and an empty
// one are alike.
var equal = cmpopts.EquateEmpty()

func TestRender(t *testing.T) {
	paris := time.FixedZone("Paris", 3600)
	for _, c := range []struct {
		name string
		m    Marker
		want string
	}{
		{"Seed", seedMarker(), seedRendered},
		{"Minimal", Marker{ID: "r1"}, `[CTX-REF:context | (0 tokens) | retrieve_context(ref_id="r1")]`},
		{"OneTurnOneToken", Marker{ID: "r1", Type: store.RefToolResults, TurnFrom: 7, TurnTo: 7, Tokens: 1},
			`[CTX-REF:tool_results | 1 turn 7 (1 token) | retrieve_context(ref_id="r1")]`},
		{"TurnsApart", Marker{ID: "r1", Type: store.RefResearch, TurnFrom: 4, TurnTo: 19, Turns: 3, Tokens: 1234567},
			`[CTX-REF:research | 3 turns 4-19 (1,234,567 tokens) | retrieve_context(ref_id="r1")]`},
		{"TurnsDefault", Marker{ID: "r1", TurnFrom: 4, TurnTo: 6},
			`[CTX-REF:context | 3 turns 4-6 (0 tokens) | retrieve_context(ref_id="r1")]`},
		{"TurnsOverRange", Marker{ID: "r1", TurnFrom: 4, TurnTo: 6, Turns: 9},
			`[CTX-REF:context | 3 turns 4-6 (0 tokens) | retrieve_context(ref_id="r1")]`},
		{"TurnsBackwards", Marker{ID: "r1", TurnFrom: 6, TurnTo: 4, Turns: 2, Tokens: -5},
			`[CTX-REF:context | (0 tokens) | retrieve_context(ref_id="r1")]`},
		{"TimeInUTC", Marker{ID: "r1", Time: time.Date(2026, 1, 2, 0, 30, 59, 999, paris)},
			`[CTX-REF:context | (0 tokens) @ 2026-01-01 23:30 | retrieve_context(ref_id="r1")]`},
		{"TimeOutOfRange", Marker{ID: "r1", Time: time.Date(12026, 1, 2, 0, 30, 0, 0, time.UTC)},
			`[CTX-REF:context | (0 tokens) | retrieve_context(ref_id="r1")]`},
		{"UnknownType", Marker{ID: "r1", Type: "Tool Results"},
			`[CTX-REF:context | (0 tokens) | retrieve_context(ref_id="r1")]`},
		{"NewType", Marker{ID: "r1", Type: "handoff_2"},
			`[CTX-REF:handoff_2 | (0 tokens) | retrieve_context(ref_id="r1")]`},
		{"BadID", Marker{ID: `a "b"]`},
			`[CTX-REF:context | (0 tokens) | retrieve_context(ref_id="a__b__")]`},
		{"Summary", Marker{ID: "r1", Summary: "  Fixed the race:\n the [JWT] \"refresh\" | retry, twice \xff "},
			`[CTX-REF:context | (0 tokens) | Summary: Fixed the race: the (JWT) 'refresh' / retry, twice ` + "\uFFFD" + ` | retrieve_context(ref_id="r1")]`},
		{"Items", Marker{ID: "r1", Topics: []string{"", " \n ", "a,b", "x|y]", "\u2028tab\there\u00a0", "dropped"},
			Entities: []string{"日本語", "🙂 ok"}, Hints: []string{"h1", "h2", "h3"}},
			`[CTX-REF:context | (0 tokens) | Topics: a b, x/y), tab here | Entities: 日本語, 🙂 ok | Ask: h1, h2 | retrieve_context(ref_id="r1")]`},
		{"Cut", Marker{ID: "r1", Topics: []string{"a topic far longer than thirty-two bytes"}, Entities: []string{strings.Repeat("é", 40)}},
			`[CTX-REF:context | (0 tokens) | Topics: a topic far longer than…` + ` | Entities: ` + strings.Repeat("é", 22) + `… | retrieve_context(ref_id="r1")]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Render(c.m)
			if got != c.want {
				t.Errorf("Render(%+v)\n got %s\nwant %s", c.m, got, c.want)
			}
			m, err := Parse(got)
			if err != nil {
				t.Fatalf("Parse(Render) = %v", err)
			}
			if diff := cmp.Diff(normal(c.m), m, equal); diff != "" {
				t.Errorf("Parse(Render) (-normal +got):\n%s", diff)
			}
		})
	}
}

// TestRender_Size: the seed's marker (three topics) is some 55 tokens,
// about 70 with two entities and a hint, and the largest Render can
// write fits MaxBytes.
func TestRender_Size(t *testing.T) {
	enc := tokens.MustGet(tokens.Cl100kBase)
	m := seedMarker()
	m.Entities, m.Hints = nil, nil
	for _, c := range []struct {
		m    Marker
		most int
	}{{m, 60}, {seedMarker(), 75}} {
		s := Render(c.m)
		if n := enc.Count(s); n > c.most {
			t.Errorf("%s is %d tokens, over %d", s, n, c.most)
		} else {
			t.Logf("%d tokens, %d bytes: %s", n, len(s), s)
		}
	}
	long := func(n, size int) []string {
		var out []string
		for range n {
			out = append(out, strings.Repeat("w", size))
		}
		return out
	}
	huge := Marker{ID: strings.Repeat("i", store.MaxRefIDBytes), Type: store.RefType(strings.Repeat("t", MaxTypeBytes)),
		TurnFrom: 1 << 61, TurnTo: 1<<62 + 1, Turns: 1<<62 - 7, Tokens: 1<<63 - 1, Time: time.Date(9999, 12, 31, 23, 59, 0, 0, time.UTC),
		Summary: strings.Repeat("s", 1000), Topics: long(9, 100), Entities: long(9, 100), Hints: long(9, 100)}
	r := Render(huge)
	if len(r) > MaxBytes {
		t.Errorf("the largest marker is %d bytes, over MaxBytes %d", len(r), MaxBytes)
	}
	t.Logf("the largest marker: %d bytes, %d tokens", len(r), enc.Count(r))
	if _, err := Parse(r); err != nil {
		t.Errorf("Parse(the largest marker) = %v", err)
	}
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     Marker
	}{
		{"Seed", seedRendered, normal(seedMarker())},
		{"Short", "[CTX-REF:ref_7f3a]", Marker{ID: "ref_7f3a"}},
		{"Bare", "ref_7f3a", Marker{ID: "ref_7f3a"}},
		{"Spaces", " \n\t[CTX-REF:ref_7f3a] \n", Marker{ID: "ref_7f3a"}},
		{"BareHex", strings.Repeat("ab", 32), Marker{ID: strings.Repeat("ab", 32)}},
		{"UnknownFields", `[CTX-REF:research | (12 tokens) | Agent: librarian | Topics: x | Mood-Ring: calm, as ever | retrieve_context(ref_id="r.1")]`,
			Marker{ID: "r.1", Type: store.RefResearch, Tokens: 12, Topics: []string{"x"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Parse(c.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, got, equal); diff != "" {
				t.Errorf("Parse(%q) (-want +got):\n%s", c.in, diff)
			}
		})
	}
}

func TestParse_Errors(t *testing.T) {
	call := ` | retrieve_context(ref_id="r1")]`
	for _, c := range []struct {
		in, want string
		id       string // the id the error should name
	}{
		{"", "empty", ""},
		{"  \n", "empty", ""},
		{"ref 1", `"ref 1" is neither a [CTX-REF] marker nor a ref id`, ""},
		{strings.Repeat("r", 65), "is neither", ""},
		{`see [CTX-REF:r1]`, "text before the marker (at byte 4)", ""},
		{`retrieve_context(ref_id="r1")`, "is neither", "r1"},
		{"[CTX-REF:r1", "no closing ]", ""},
		{"[CTX-REF:r1] and more", "text after the marker's closing ] (at byte 12)", ""},
		{"[CTX-REF:r 1]", `"r 1" is not a ref id`, ""},
		{"[CTX-REF:]", `"" is not a ref id`, ""},
		{"[CTX-REF:conversation | " + strings.Repeat("x", 1100) + call, "bytes: a marker has at most 1024", "r1"},
		{"[CTX-REF:conversation | (3 tokens)]", "a marker is its type, span", ""},
		{"[CTX-REF:conversation | (3 tokens) | Topics: x]", `the last field "Topics: x" is not retrieve_context`, ""},
		{`[CTX-REF:conversation | (3 tokens) | retrieve_context(ref_id="r 1")]`, `"r 1" is not a ref id`, ""},
		{"[CTX-REF:Conversation | (3 tokens)" + call, `type "Conversation" is not a word`, "r1"},
		{"[CTX-REF:conversation | 3 tokens" + call, "a span is", "r1"},
		{"[CTX-REF:conversation | (3 tokens) @ 14:23" + call, `time "14:23" is not YYYY-MM-DD HH:MM`, "r1"},
		{"[CTX-REF:conversation | (3 tokens) @ 0001-01-01 00:00" + call, "means none", "r1"},
		{"[CTX-REF:conversation | (3 tokens) @ 0000-01-01 00:00" + call, "before the year 1", "r1"},
		{"[CTX-REF:conversation | (4200 tokens)" + call, `span "(4200 tokens)" is written "(4,200 tokens)"`, "r1"},
		{"[CTX-REF:conversation | (1 tokens)" + call, `is written "(1 token)"`, "r1"},
		{"[CTX-REF:conversation | 1 turn 7-7 (3 tokens)" + call, `is written "1 turn 7 (3 tokens)"`, "r1"},
		{"[CTX-REF:conversation | 2 turns 07-8 (3 tokens)" + call, `is written "2 turns 7-8 (3 tokens)"`, "r1"},
		{"[CTX-REF:conversation | 3 turns 8-7 (3 tokens)" + call, "turns 8-7 run backwards", "r1"},
		{"[CTX-REF:conversation | 1 turn 0 (3 tokens)" + call, "turns start at 1", "r1"},
		{"[CTX-REF:conversation | 2 turns 7 (3 tokens)" + call, "2 turns in the one turn 7", "r1"},
		{"[CTX-REF:conversation | 9 turns 7-8 (3 tokens)" + call, "9 turns do not fit turns 7-8", "r1"},
		{"[CTX-REF:conversation | (3 tokens) | topics: x" + call, `field "topics: x" is not "Label: text"`, "r1"},
		{"[CTX-REF:conversation | (3 tokens) | Topics: x, y, z, w" + call, "Topics has 4 items, at most 3", "r1"},
		{"[CTX-REF:conversation | (3 tokens) | Topics: x,y" + call, `Topics item "x,y" holds ','`, "r1"},
		{"[CTX-REF:conversation | (3 tokens) | Topics: x, " + call, `Topics item "" is empty`, "r1"},
		{"[CTX-REF:conversation | (3 tokens) | Topics: x  y" + call, `holds two spaces`, "r1"},
		{"[CTX-REF:conversation | (3 tokens) | Topics: x\ty" + call, `holds '\t'`, "r1"},
		{"[CTX-REF:conversation | (3 tokens) | Topics: x\xffy" + call, `is not UTF-8`, "r1"},
		{"[CTX-REF:conversation | (3 tokens) | Topics: " + strings.Repeat("x", 33) + call, "is 33 bytes, over 32", "r1"},
		{"[CTX-REF:conversation | (3 tokens) | Summary: " + strings.Repeat("x", 161) + call, "Summary is 161 bytes, over 160", "r1"},
		{"[CTX-REF:conversation | (3 tokens) | Summary: a \"b\"" + call, `Summary holds '"'`, "r1"},
		{"[CTX-REF:conversation | (3 tokens) | Topics: x | Topics: y" + call, "a second Topics field", "r1"},
		{"[CTX-REF:conversation | (3 tokens) | Ask: x | Topics: y" + call, "Topics after Ask: the fields go Summary, Topics, Entities, Ask", "r1"},
		{"[CTX-REF:conversation | (3 tokens) | Note: a|b" + call, "field Note holds '|'", "r1"},
		{"[CTX-REF:conversation | (3 tokens) | Topics: [CTX-REF:x" + call, `holds '['`, "r1"},
	} {
		m, err := Parse(c.in)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Parse(%q) = %+v, %v, want a *SyntaxError", c.in, m, err)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", c.in, err, c.want)
		}
		if se.ID != c.id {
			t.Errorf("Parse(%q) error names id %q, want %q", c.in, se.ID, c.id)
		}
		if se.Offset < 0 || se.Offset > len(c.in) {
			t.Errorf("Parse(%q) error at byte %d, out of the input", c.in, se.Offset)
		}
	}
}

func TestFromReference(t *testing.T) {
	ref := store.Reference{ID: "ref_7f3a", Type: store.RefConversation, SessionID: "s", AgentID: "a",
		ContentIDs: []string{store.ID([]byte("x"))}, TokensSaved: 4200, TurnFrom: 12, TurnTo: 26,
		CreatedAt: time.Date(2026, 11, 25, 14, 23, 41, 0, time.UTC), Topics: []string{"auth flow", "JWT", "middleware"},
		Entities: []string{"internal/auth/jwt.go", "refreshToken"}, QueryHints: []string{"why does token refresh fail"}}
	if got := Render(FromReference(ref)); got != seedRendered {
		t.Errorf("Render(FromReference)\n got %s\nwant %s", got, seedRendered)
	}
	ref.TurnFrom, ref.TurnTo = 0, 0
	if m := FromReference(ref); m.Turns != 0 {
		t.Errorf("no turns: Turns %d", m.Turns)
	}
}

func TestFind(t *testing.T) {
	short := "[CTX-REF:r2]"
	text := "head [CTX-REF:broken | x] " + seedRendered + "\n[CTX-REF:[CTX-REF:r1] " + short + " [CTX-REF:tail"
	got := Find(text)
	var want []Located
	for _, s := range []string{seedRendered, "[CTX-REF:r1]", short} {
		i := strings.Index(text, s)
		m, err := Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, Located{Start: i, End: i + len(s), Marker: m})
	}
	if diff := cmp.Diff(want, got, equal); diff != "" {
		t.Errorf("Find (-want +got):\n%s", diff)
	}
	if got := Find("no markers here [CTX-REF:"); len(got) != 0 {
		t.Errorf("Find without markers = %+v", got)
	}
}

// TestFind_Linear: many openings without an end cost a bounded scan
// each.
func TestFind_Linear(t *testing.T) {
	text := strings.Repeat("[CTX-REF:x ", 100_000)
	start := time.Now()
	if got := Find(text); len(got) != 0 {
		t.Errorf("found %d markers", len(got))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Find took %v on 1 MB", d)
	}
}

// runes are what random texts are made of: the grammar's separators,
// white space of every kind, text in several scripts, bytes that are not
// UTF-8.
var runes = []string{"a", "b", "Z", "7", " ", "  ", "|", " | ", "]", "[", "[CTX-REF:", `"`, ",", ", ", ":", ": ", "\n", "\r\n", "\t",
	"\u2028", "\u00a0", "\u0085", "\x00", "\x1b", "é", "e\u0301", "世界", "🙂", "\u200d", "\uFFFD", "\xff", "\xe2\x80", "…", "-", "_"}

func randText(r *rand.Rand, n int) string {
	var b strings.Builder
	for range r.IntN(n + 1) {
		b.WriteString(runes[r.IntN(len(runes))])
	}
	return b.String()
}

func randList(r *rand.Rand) []string {
	var out []string
	for range r.IntN(6) {
		out = append(out, randText(r, 30))
	}
	return out
}

func randInt(r *rand.Rand) int {
	switch r.IntN(4) {
	case 0:
		return r.IntN(3) - 1
	case 1:
		return r.IntN(100)
	case 2:
		return r.IntN(1 << 40)
	}
	return int(r.Int64()) // any, negative too
}

func randMarker(r *rand.Rand) Marker {
	m := Marker{ID: randText(r, 10), Type: store.RefType(randText(r, 4)), TurnFrom: randInt(r), TurnTo: randInt(r), Turns: randInt(r),
		Tokens: randInt(r), Summary: randText(r, 120), Topics: randList(r), Entities: randList(r), Hints: randList(r)}
	if r.IntN(2) == 0 {
		m.ID = []string{"r1", "ref_7f3a", strings.Repeat("x", 64), "a.b-c_d"}[r.IntN(4)]
	}
	if r.IntN(2) == 0 {
		m.Type = []store.RefType{store.RefConversation, store.RefToolResults, "", "new_type9"}[r.IntN(4)]
	}
	if r.IntN(3) == 0 {
		m.TurnTo = m.TurnFrom + r.IntN(30)
	}
	switch r.IntN(4) {
	case 0:
	case 1:
		m.Time = time.Unix(r.Int64N(1<<36)-1<<35, r.Int64N(1e9)).In(time.FixedZone("z", r.IntN(86400)-43200))
	case 2:
		m.Time = time.Date(r.IntN(12000)-1000, time.Month(r.IntN(12)+1), 1, 0, 0, r.IntN(120), 0, time.UTC)
	default:
		m.Time = time.Date(1, 1, 1, 0, 0, r.IntN(120), 0, time.UTC)
	}
	return m
}

// TestRoundTrip: every marker Render writes parses back to the marker
// normalised, renders back to the same bytes, stays within MaxBytes and
// is found in a text.
func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 4))
	n := 20_000
	if testing.Short() {
		n = 2_000
	}
	for range n {
		checkRoundTrip(t, randMarker(r))
		if t.Failed() {
			break
		}
	}
}

func checkRoundTrip(t *testing.T, m Marker) {
	t.Helper()
	s := Render(m)
	want := normal(m)
	if diff := cmp.Diff(want, normal(want), equal); diff != "" {
		t.Fatalf("normal is not idempotent on %+v:\n%s", m, diff)
	}
	if len(s) > MaxBytes || strings.ContainsAny(s, "\n\r") {
		t.Fatalf("Render(%+v) = %q: %d bytes or more than a line", m, s, len(s))
	}
	got, err := Parse(s)
	if err != nil {
		t.Fatalf("Parse(Render(%+v)) = %v\nmarker %s", m, err, s)
	}
	if diff := cmp.Diff(want, got, equal); diff != "" {
		t.Fatalf("Parse(Render(%+v)) (-normal +got):\n%s\nmarker %s", m, diff, s)
	}
	if again := Render(got); again != s {
		t.Fatalf("Render(Parse(%s)) = %s", s, again)
	}
	locs := Find("x]" + s + s[:len(s)/2])
	if len(locs) != 1 || locs[0].Start != 2 || locs[0].End != 2+len(s) {
		t.Fatalf("Find(%q) = %+v", s, locs)
	}
}
