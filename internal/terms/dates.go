package terms

import "regexp"

var (
	dateNames = regexp.MustCompile(`(?i)\b(january|february|march|april|may|june|july|august|september|october|november|december|` +
		`monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b`)
	monthNames = regexp.MustCompile(`(?i)\b(january|february|march|april|may|june|july|august|september|october|november|december)\b`)
	// years and days of a month, as a date writes them: 2023, 7, 21st.
	dateNumbers = regexp.MustCompile(`(?i)\b((19|20)\d\d|([1-9]|[12]\d|3[01])(st|nd|rd|th)?)\b`)
)

// Dateless returns text without the words that name a date: the names of
// months and days of the week, and in a text that names a month, the
// years (1900 to 2099) and days of a month (1 to 31, 1st to 31st) it
// holds. They say when something was said, which a message's time
// records, not what it says: a measure of how much of a question a
// message holds leaves them out ("what did Ana bake in May 2023?" asks
// for a message about baking, said then).
func Dateless(text string) string {
	hasMonth := monthNames.MatchString(text)
	text = dateNames.ReplaceAllString(text, " ")
	if hasMonth {
		text = dateNumbers.ReplaceAllString(text, " ")
	}
	return text
}
