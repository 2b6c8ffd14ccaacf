package terms

import "strings"

// stopWords are English function words: in a query of several words they
// match nearly everything and carry no meaning. The list is the common
// core of the lists search engines ship (Lucene's, NLTK's), kept short so
// that no word that names something in code (such as "new", "case", "type")
// is in it. "many" and "much" are added: "How many ...?" and "How much
// ...?" open a question, and the evidence rarely says them.
var stopWords = map[string]bool{
	"a": true, "about": true, "above": true, "after": true, "again": true, "against": true, "all": true, "am": true,
	"an": true, "and": true, "any": true, "are": true, "as": true, "at": true, "be": true, "because": true,
	"been": true, "before": true, "being": true, "below": true, "between": true, "both": true, "but": true,
	"by": true, "can": true, "could": true, "did": true, "do": true, "does": true, "doing": true, "down": true,
	"during": true, "each": true, "few": true, "for": true, "from": true, "further": true, "had": true,
	"has": true, "have": true, "having": true, "he": true, "her": true, "here": true, "hers": true,
	"herself": true, "him": true, "himself": true, "his": true, "how": true, "i": true, "if": true, "in": true,
	"into": true, "is": true, "it": true, "its": true, "itself": true, "just": true, "many": true, "me": true, "more": true, "much": true,
	"most": true, "my": true, "myself": true, "no": true, "nor": true, "not": true, "now": true, "of": true,
	"off": true, "on": true, "once": true, "only": true, "or": true, "other": true, "our": true, "ours": true,
	"ourselves": true, "out": true, "over": true, "own": true, "same": true, "she": true, "should": true,
	"so": true, "some": true, "such": true, "than": true, "that": true, "the": true, "their": true,
	"theirs": true, "them": true, "themselves": true, "then": true, "there": true, "these": true, "they": true,
	"this": true, "those": true, "through": true, "to": true, "too": true, "under": true, "until": true,
	"up": true, "very": true, "was": true, "we": true, "were": true, "what": true, "when": true, "where": true,
	"which": true, "while": true, "who": true, "whom": true, "why": true, "will": true, "with": true,
	"would": true, "you": true, "your": true, "yours": true, "yourself": true, "yourselves": true,
}

// Stop reports whether a query word (lower case) is a stop word.
func Stop(word string) bool { return stopWords[word] }

// Content returns the words of a text that carry its content: the
// full-text index's terms (lower-cased stems, compound identifiers whole
// and by their parts) without English stop words. It is what a corpus
// embedding model sees of a text and what the rescoring stages of a
// search count a query's words with.
func Content(text string) []string {
	f := strings.Fields(String(text))
	out := f[:0]
	for _, t := range f {
		if !Stop(t) {
			out = append(out, t)
		}
	}
	return out
}
