package archive

import (
	"strings"

	"github.com/engramhq/engram/internal/terms"
)

// relevance returns how much of a recall's text each record holds, from
// 0 to 1: the share of the text's content words (its stop words if it
// has only those), the dates it names left out (terms.Dateless), that the
// record's searched text, category or kind holds ("patterns for auth"
// asks for patterns in category auth). Words count alike: records are
// few and terse, so how rare a word is among them says little (a word no
// record holds would outweigh the rest). With cosines (by position in the
// mirror; nil without an embedder), a record also stands by its cosine's
// standing between the mean cosine of the records compared, which
// unrelated records score about, and 1, which an exact match scores: a
// rewording that shares no word can still be an answer. The caller holds
// a.mu's read lock.
func (m *mirror) relevance(text string, recs []*Record, cosines map[int]float64, mean float64) []float64 {
	out := make([]float64, len(recs))
	groups := terms.Query(terms.Dateless(text))
	if len(groups) == 0 {
		groups = terms.Query(text)
	}
	var content []terms.Group
	for _, g := range groups {
		if !g.Stop {
			content = append(content, g)
		}
	}
	if len(content) == 0 {
		content = groups
	}
	for k, r := range recs {
		pos := m.byID[r.ID]
		if len(content) > 0 {
			set := termSet(m.search[pos] + " " + strings.ReplaceAll(r.Category, ".", " ") + " " + string(r.Kind))
			n := 0
			for _, g := range content {
				if holds(set, g) {
					n++
				}
			}
			out[k] = float64(n) / float64(len(content))
		}
		if cos, ok := cosines[pos]; ok && mean < 1 {
			out[k] = max(out[k], (cos-mean)/(1-mean))
		}
	}
	return out
}

// termSet returns the distinct index terms of text, as search indexes
// them (terms.Append): stemmed words, identifiers whole and by parts.
func termSet(text string) map[string]struct{} {
	set := map[string]struct{}{}
	for _, t := range strings.Fields(terms.String(text)) {
		set[t] = struct{}{}
	}
	return set
}

// holds reports whether a term set holds a query word: whole, or for a
// compound identifier, all its parts.
func holds(set map[string]struct{}, g terms.Group) bool {
	if _, ok := set[g.Whole]; ok {
		return true
	}
	if len(g.Parts) == 0 {
		return false
	}
	for _, p := range g.Parts {
		if _, ok := set[p]; !ok {
			return false
		}
	}
	return true
}
