package retrieve

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Span is a stretch of time a question points back to: "a week ago",
// "last Tuesday", "in the past month". Phrase is the words that said so.
type Span struct {
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	Phrase string    `json:"phrase"`
}

// String says what the span is, for people: `"a week ago": Jan 29 to Feb 2 2023`.
func (s Span) String() string {
	from, to := s.From.Format("Jan 2"), s.To.Format("Jan 2 2006")
	if s.From.Year() != s.To.Year() {
		from = s.From.Format("Jan 2 2006")
	}
	return fmt.Sprintf("%q: %s to %s", s.Phrase, from, to)
}

// Contains reports whether t falls in the span.
func (s Span) Contains(t time.Time) bool { return !t.Before(s.From) && !t.After(s.To) }

const day = 24 * time.Hour

var (
	countWords = map[string]int{"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
		"six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
		"a couple of": 2, "couple of": 2, "a few": 3, "few": 3, "several": 3}
	unitDays = map[string]int{"day": 1, "week": 7, "month": 30, "year": 365}
	weekdays = map[string]time.Weekday{"sunday": time.Sunday, "monday": time.Monday, "tuesday": time.Tuesday,
		"wednesday": time.Wednesday, "thursday": time.Thursday, "friday": time.Friday, "saturday": time.Saturday}

	count = `(\d{1,3}|a couple of|couple of|a few|few|several|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)`
	unit  = `(day|week|month|year)s?`
	// "three weeks ago", "a couple of days ago"
	agoRE = regexp.MustCompile(`\b` + count + `\s+` + unit + `\s+ago\b`)
	// "in the past month", "over the last few weeks", "the past 3 days"
	pastRE = regexp.MustCompile(`\b(?:past|last)\s+(?:` + count + `\s+)?` + unit + `\b`)
	// "last Tuesday", "last weekend"
	lastDayRE = regexp.MustCompile(`\blast\s+(sunday|monday|tuesday|wednesday|thursday|friday|saturday|weekend)\b`)
	// "on the Wednesday two months ago" is caught by agoRE; "yesterday",
	// "the day before yesterday", "earlier today"
	yesterdayRE = regexp.MustCompile(`\b(the day before yesterday|yesterday|earlier today)\b`)
)

// ParseSpan finds the first phrase of text that points back in time from
// now and returns the span it means, widened for the vagueness of the
// phrase: "a week ago" is within a day or two of seven days before now,
// "a few months ago" anywhere from six weeks to five months. It knows
// English phrases that look back (ago, yesterday, last, past); phrases that
// look ahead ("this weekend", "next week") are not spans of history.
func ParseSpan(text string, now time.Time) (Span, bool) {
	s := strings.ToLower(text)
	if m := yesterdayRE.FindStringSubmatch(s); m != nil {
		switch m[1] {
		case "earlier today":
			return Span{From: startOfDay(now), To: now, Phrase: m[0]}, true
		case "yesterday":
			d := startOfDay(now).Add(-day)
			return Span{From: d.Add(-day / 2), To: d.Add(day + day/2), Phrase: m[0]}, true
		default:
			d := startOfDay(now).Add(-2 * day)
			return Span{From: d.Add(-day / 2), To: d.Add(day + day/2), Phrase: m[0]}, true
		}
	}
	if m := agoRE.FindStringSubmatch(s); m != nil {
		n, vague := countOf(m[1])
		back := time.Duration(n*unitDays[m[2]]) * day
		// The slack grows with the distance and with a vague count: "two
		// days ago" is a day either side, "two months ago" two weeks,
		// "a few months ago" half the distance.
		slack := max(day, back/4)
		if vague {
			slack = back / 2
		}
		at := now.Add(-back)
		return Span{From: at.Add(-slack), To: at.Add(slack), Phrase: m[0]}, true
	}
	if m := lastDayRE.FindStringSubmatch(s); m != nil {
		if m[1] == "weekend" {
			// The last Saturday and Sunday before now, not counting the
			// weekend now is in.
			back := (int(now.Weekday()) - int(time.Saturday) + 7) % 7
			if back < 2 {
				back += 7
			}
			sat := startOfDay(now).Add(-time.Duration(back) * day)
			return Span{From: sat.Add(-day / 2), To: sat.Add(2*day + day/2), Phrase: m[0]}, true
		}
		back := (int(now.Weekday()) - int(weekdays[m[1]]) + 7) % 7
		if back == 0 {
			back = 7
		}
		d := startOfDay(now).Add(-time.Duration(back) * day)
		return Span{From: d.Add(-day), To: d.Add(2 * day), Phrase: m[0]}, true
	}
	if m := pastRE.FindStringSubmatch(s); m != nil {
		n, vague := 1, false
		if m[1] != "" {
			n, vague = countOf(m[1])
		}
		// "the past month" reaches a little past a month back, "the past
		// few weeks" half as far again.
		back := time.Duration(n*unitDays[m[2]]) * day
		reach := back + back/4
		if vague {
			reach = back + back/2
		}
		return Span{From: now.Add(-reach), To: now, Phrase: m[0]}, true
	}
	return Span{}, false
}

// countOf reads a count word or number; vague is set for "a few",
// "several" and the like.
func countOf(s string) (n int, vague bool) {
	if v, err := strconv.Atoi(s); err == nil {
		return v, false
	}
	switch s {
	case "a couple of", "couple of", "a few", "few", "several":
		vague = true
	}
	return countWords[s], vague
}

func startOfDay(t time.Time) time.Time {
	y, m, d := t.Date()
	return time.Date(y, m, d, 0, 0, 0, 0, t.Location())
}
