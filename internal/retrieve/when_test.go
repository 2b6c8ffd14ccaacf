package retrieve

import (
	"testing"
	"time"
)

func TestParseSpan(t *testing.T) {
	// Wednesday 24 May 2023, 10:29.
	now := time.Date(2023, 5, 24, 10, 29, 0, 0, time.UTC)
	day := func(m time.Month, d, h int) time.Time { return time.Date(2023, m, d, h, 0, 0, 0, time.UTC) }
	for _, c := range []struct {
		q      string
		phrase string
		// inside and outside are times the span must and must not hold.
		inside, outside []time.Time
	}{
		{"Which book did I finish a week ago?", "a week ago",
			[]time.Time{day(5, 17, 10), day(5, 16, 0), day(5, 18, 20)}, []time.Time{day(5, 14, 0), day(5, 20, 0), now}},
		{"What did I cook yesterday?", "yesterday",
			[]time.Time{day(5, 23, 0), day(5, 23, 23)}, []time.Time{day(5, 21, 0), day(5, 25, 0)}},
		{"I mentioned cooking something a couple of days ago", "a couple of days ago",
			[]time.Time{day(5, 22, 10), day(5, 21, 12), day(5, 23, 10)}, []time.Time{day(5, 20, 0), now.Add(time.Hour)}},
		{"What did I do with Rachel on the Wednesday two months ago?", "two months ago",
			[]time.Time{day(3, 25, 0), day(3, 15, 0)}, []time.Time{day(2, 20, 0), day(4, 20, 0)}},
		{"What kitchen appliance did I buy 10 days ago?", "10 days ago",
			[]time.Time{day(5, 14, 10), day(5, 12, 12)}, []time.Time{day(5, 10, 0), day(5, 18, 0)}},
		{"Who did I meet for lunch last Tuesday?", "last tuesday",
			[]time.Time{day(5, 23, 12)}, []time.Time{day(5, 16, 12), day(5, 20, 0)}},
		{"Who did I meet for lunch last Thursday?", "last thursday",
			[]time.Time{day(5, 18, 12)}, []time.Time{day(5, 25, 12), day(5, 11, 12)}},
		{"Where did I go last weekend?", "last weekend",
			[]time.Time{day(5, 20, 12), day(5, 21, 20)}, []time.Time{day(5, 13, 12), day(5, 23, 12)}},
		{"How many plants did I buy in the past month?", "past month",
			[]time.Time{day(5, 1, 0), day(4, 25, 0), day(5, 24, 9)}, []time.Time{day(4, 10, 0), day(5, 25, 0)}},
		{"How many Crash Course videos have I watched in the past few weeks?", "past few weeks",
			[]time.Time{day(5, 10, 0), day(4, 25, 0)}, []time.Time{day(3, 1, 0)}},
		{"Which concerts did I attend over the last 3 months?", "last 3 months",
			[]time.Time{day(3, 1, 0)}, []time.Time{day(1, 1, 0)}},
	} {
		sp, ok := ParseSpan(c.q, now)
		if !ok {
			t.Errorf("%q: no span", c.q)
			continue
		}
		if sp.Phrase != c.phrase {
			t.Errorf("%q: phrase %q, want %q", c.q, sp.Phrase, c.phrase)
		}
		for _, in := range c.inside {
			if !sp.Contains(in) {
				t.Errorf("%q: %v should hold %v", c.q, sp, in)
			}
		}
		for _, out := range c.outside {
			if sp.Contains(out) {
				t.Errorf("%q: %v should not hold %v", c.q, sp, out)
			}
		}
	}
	for _, q := range []string{
		"retry backoff jitter",
		"Can you recommend cultural events this weekend?", // ahead, not back
		"What should I plan for next week?",
		"fix the last use of the deprecated API",
		"remove ago from the parser", // no count before it
		"",
	} {
		if sp, ok := ParseSpan(q, now); ok {
			t.Errorf("%q: span %v, want none", q, sp)
		}
	}
}

func TestSpanString(t *testing.T) {
	sp := Span{From: time.Date(2022, 12, 30, 0, 0, 0, 0, time.UTC), To: time.Date(2023, 1, 2, 0, 0, 0, 0, time.UTC), Phrase: "a week ago"}
	if got, want := sp.String(), `"a week ago": Dec 30 2022 to Jan 2 2023`; got != want {
		t.Errorf("String() = %s, want %s", got, want)
	}
}

func TestWithoutPhrase(t *testing.T) {
	now := time.Date(2023, 5, 24, 10, 29, 0, 0, time.UTC)
	for _, c := range []struct{ q, want string }{
		{"What did I cook a couple of days ago?", "What did I cook  ?"},
		// ParseSpan reads lower case; the phrase goes whatever its case.
		{"Where did we eat Last Tuesday", "Where did we eat  "},
		{"YESTERDAY: the café bill", " : the café bill"},
		{"Über die Straße, two weeks ago", "Über die Straße,  "},
	} {
		sp, ok := ParseSpan(c.q, now)
		if !ok {
			t.Fatalf("%q: no span", c.q)
		}
		if got := withoutPhrase(c.q, &sp); got != c.want {
			t.Errorf("withoutPhrase(%q) = %q, want %q", c.q, got, c.want)
		}
	}
	if got := withoutPhrase("no time here", nil); got != "no time here" {
		t.Errorf("no span: %q", got)
	}
}
