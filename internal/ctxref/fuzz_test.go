package ctxref

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/engramhq/engram/internal/store"
)

// FuzzParse: Parse never panics; what it accepts renders to a marker
// that parses back to the same Marker, and to the same bytes when it had
// no unknown field; what it refuses gets a message and an offset within
// the input.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		seedRendered, "[CTX-REF:r1]", "r1", " ref_7f3a\n", "",
		`[CTX-REF:context | (0 tokens) | retrieve_context(ref_id="r1")]`,
		`[CTX-REF:tool_results | 1 turn 7 (1 token) | retrieve_context(ref_id="r1")]`,
		`[CTX-REF:research | 3 turns 4-19 (1,234,567 tokens) @ 0001-01-01 00:01 | Summary: a: b, c | retrieve_context(ref_id="r1")]`,
		`[CTX-REF:research | (12 tokens) | Agent: librarian | Topics: x | Mood-Ring: calm | retrieve_context(ref_id="r.1")]`,
		`[CTX-REF:conversation | (3 tokens) | Ask: x | Topics: y | retrieve_context(ref_id="r1")]`,
		`[CTX-REF:conversation | 2 turns 07-8 (4200 tokens) | retrieve_context(ref_id="r1")]`,
		`retrieve_context(ref_id="r1")`, "see [CTX-REF:r1]", "[CTX-REF:r1] more",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := Parse(s)
		if err != nil {
			se, ok := err.(*SyntaxError)
			if !ok || se.Msg == "" || se.Offset < 0 || se.Offset > len(s) {
				t.Fatalf("Parse(%q) = %#v", s, err)
			}
			if se.ID != "" && !store.ValidRefID(se.ID) {
				t.Fatalf("Parse(%q) error names id %q", s, se.ID)
			}
			return
		}
		if !store.ValidRefID(m.ID) {
			t.Fatalf("Parse(%q) = id %q", s, m.ID)
		}
		r := Render(m)
		back, err := Parse(r)
		if err != nil {
			t.Fatalf("Parse(Render(Parse(%q))) = %v\nrendered %s", s, err, r)
		}
		if diff := cmp.Diff(normal(m), back, equal); diff != "" {
			t.Fatalf("Parse(Render(Parse(%q))) (-normal +got):\n%s", s, diff)
		}
		t2 := strings.TrimSpace(s)
		if _, skipped, _ := parse(t2); strings.HasPrefix(t2, Prefix) && m.Type != "" && skipped == 0 && r != t2 {
			t.Fatalf("Render(Parse(%q)) = %q", t2, r)
		}
	})
}

// FuzzRoundTrip: whatever a Marker holds, Render writes one line that
// Parse reads back as the normalised Marker and Find finds.
func FuzzRoundTrip(f *testing.F) {
	f.Add("ref_7f3a", "conversation", 12, 26, 15, 4200, int64(1795789380), "", "auth flow\x00JWT\x00middleware", "jwt.go", "why does refresh fail")
	f.Add("a b", "Tool Results", 0, -1, 3, -7, int64(0), "a | b ] [c\n\"d\"", "x|y]\x00\x00a,b", "\u2028\t", "\xff\xfe")
	f.Add("", "", 7, 7, 0, 1, int64(-62135596800), strings.Repeat("é", 100), strings.Repeat("w", 40), "日本語\x00🙂", ", , ,")
	f.Fuzz(func(t *testing.T, id, typ string, from, to, turns, tokens int, unix int64, summary, topics, entities, hints string) {
		split := func(s string) []string {
			if s == "" {
				return nil
			}
			return strings.Split(s, "\x00")
		}
		m := Marker{ID: id, Type: store.RefType(typ), TurnFrom: from, TurnTo: to, Turns: turns, Tokens: tokens,
			Summary: summary, Topics: split(topics), Entities: split(entities), Hints: split(hints)}
		if unix != 0 {
			m.Time = time.Unix(unix, 0)
		}
		checkRoundTrip(t, m)
	})
}

// FuzzFind: the markers Find returns lie in order within the text, do
// not overlap, and are each what Parse reads there.
func FuzzFind(f *testing.F) {
	f.Add("head " + seedRendered + " [CTX-REF:r2] tail")
	f.Add("[CTX-REF:[CTX-REF:r1]][CTX-REF:")
	f.Add("[CTX-REF:conversation | (3 tokens) | retrieve_context(ref_id=\"r1\")]]")
	f.Fuzz(func(t *testing.T, text string) {
		end := 0
		for _, l := range Find(text) {
			if l.Start < end || l.End <= l.Start || l.End > len(text) {
				t.Fatalf("Find(%q): marker at %d-%d after %d", text, l.Start, l.End, end)
			}
			end = l.End
			m, err := Parse(text[l.Start:l.End])
			if err != nil {
				t.Fatalf("Find(%q) found %q, which Parse refuses: %v", text, text[l.Start:l.End], err)
			}
			if diff := cmp.Diff(m, l.Marker, equal); diff != "" {
				t.Fatalf("Find(%q) at %d (-Parse +Find):\n%s", text, l.Start, diff)
			}
		}
	})
}

func BenchmarkRender(b *testing.B) {
	m := seedMarker()
	b.ReportAllocs()
	for b.Loop() {
		Render(m)
	}
}

// BenchmarkRender_Dirty renders a marker whose texts all need cleaning.
func BenchmarkRender_Dirty(b *testing.B) {
	m := seedMarker()
	m.Summary = "Fixed the race:\n the [JWT] \"refresh\" | retry"
	m.Topics = []string{"auth\nflow", "JWT|x", "middle  ware", "dropped"}
	b.ReportAllocs()
	for b.Loop() {
		Render(m)
	}
}

func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(seedRendered); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFind looks for markers in a 200-message window's text: 20
// markers among 180 messages of 400 bytes.
func BenchmarkFind(b *testing.B) {
	var sb strings.Builder
	for i := range 200 {
		if i%10 == 0 {
			sb.WriteString(seedRendered)
		} else {
			sb.WriteString(strings.Repeat("some text [with brackets] and words ", 11))
		}
		sb.WriteByte('\n')
	}
	text := sb.String()
	b.ReportAllocs()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if n := len(Find(text)); n != 20 {
			b.Fatalf("found %d markers", n)
		}
	}
}
