package archive

import (
	"crypto/sha256"

	"github.com/engramhq/engram/internal/terms"

	"encoding/hex"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// normalize lower-cases text, drops punctuation at word edges and collapses
// white space, so that trivial variants hash alike.
func normalize(s string) string {
	var b strings.Builder
	for w := range strings.FieldsSeq(strings.ToLower(s)) {
		w = strings.TrimFunc(w, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
		if w == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(w)
	}
	return b.String()
}

// hashText is the duplicate key of a text: SHA-256 of its normal form,
// in the kind's namespace.
func hashText(kind, s string) string {
	sum := sha256.Sum256([]byte(kind + "\x00" + normalize(s)))
	return hex.EncodeToString(sum[:16])
}

// trigrams returns the set of byte trigrams of the normal form of s, with
// the ends padded so that short words still count.
func trigrams(s string) map[string]struct{} {
	n := " " + normalize(s) + " "
	set := make(map[string]struct{}, len(n))
	for i := 0; i+3 <= len(n); i++ {
		set[n[i:i+3]] = struct{}{}
	}
	return set
}

// trigramSimilarity is the Jaccard similarity of the trigram sets of a
// and b, in [0, 1].
func trigramSimilarity(a, b string) float64 { return jaccard(trigrams(a), trigrams(b)) }

// jaccard is the Jaccard similarity of two sets.
func jaccard(ta, tb map[string]struct{}) float64 {
	if len(ta) == 0 || len(tb) == 0 {
		return 0
	}
	inter := 0
	for t := range ta {
		if _, ok := tb[t]; ok {
			inter++
		}
	}
	return float64(inter) / float64(len(ta)+len(tb)-inter)
}

// words returns the distinct content words of s (letters and digits, at
// least three long, not a stop word or a stance word).
func words(s string) map[string]bool {
	out := map[string]bool{}
	for w := range strings.FieldsFuncSeq(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' && r != '.'
	}) {
		w = strings.Trim(w, ".")
		if len(w) < 3 || stanceWords[w] || fillerWords[w] {
			continue
		}
		out[w] = true
	}
	return out
}

// stance is which way a pattern leans on its subject: -1 against when it
// holds a negative marker, else +1. A pattern is a prescription, so one
// with no marker at all ("Log errors where they happen") is for what it
// names; the seed's pairs alone miss that.
func stance(s string) int {
	n := " " + normalize(strings.ReplaceAll(s, "'", "")) + " "
	for _, neg := range negativeStances {
		if strings.Contains(n, " "+neg+" ") {
			return -1
		}
	}
	return 1
}

// contentTerms returns the stemmed content words of s: no stop words and
// no stance words, so that "use X" and "avoid X" have the same terms.
func contentTerms(s string) map[string]struct{} {
	out := map[string]struct{}{}
	for _, g := range terms.Query(s) {
		if g.Stop || stanceWords[g.Whole] || fillerWords[g.Whole] || len(g.Whole) < 2 {
			continue
		}
		out[g.Whole] = struct{}{}
	}
	return out
}

// The seed's opposing pairs (use/avoid, always/never, do/don't, should/
// shouldn't, must/must not, enable/disable, add/remove, prefer/avoid,
// recommended/discouraged), split by side. Negative forms are checked
// first so that "do not use" is not read as "use".
var (
	negativeStances = []string{
		"avoid", "never", "dont", "do not", "don't", "shouldnt", "should not", "must not", "mustnt",
		"disable", "remove", "discouraged", "stop using", "no longer", "not use", "drop",
		"forbid", "forbidden", "ban", "deprecate", "deprecated",
	}
	stanceWords = map[string]bool{
		"use": true, "using": true, "avoid": true, "never": true, "always": true, "dont": true, "don": true,
		"should": true, "shouldn": true, "shouldnt": true, "must": true, "mustn": true, "not": true,
		"enable": true, "disable": true, "add": true, "remove": true, "prefer": true,
		"recommended": true, "discouraged": true, "instead": true, "stop": true, "longer": true,
		"drop": true, "require": true, "required": true, "keep": true, "adopt": true,
		"forbid": true, "forbidden": true, "ban": true, "deprecate": true, "deprecated": true,
	}
	fillerWords = map[string]bool{
		"the": true, "and": true, "for": true, "all": true, "any": true, "with": true, "from": true,
		"into": true, "when": true, "that": true, "this": true, "are": true, "was": true, "our": true,
		"new": true, "code": true, "its": true, "only": true, "over": true, "via": true, "per": true,
	}
)

// sameSubject reports whether two texts are about the same thing: their
// content words overlap by more than 30 % of the smaller set (the seed's
// "same subject" test, on words rather than character n-grams, which
// stance words would otherwise dominate).
func sameSubject(a, b string) bool {
	wa, wb := words(a), words(b)
	small := min(len(wa), len(wb))
	if small == 0 {
		return false
	}
	common := 0
	for w := range wa {
		if wb[w] {
			common++
		}
	}
	return float64(common)/float64(small) > 0.3
}

// contradicts reports whether two patterns take opposite stances on the
// same subject.
func contradicts(a, b string) bool {
	return stance(a) != stance(b) && sameSubject(a, b)
}

// scopesOverlap reports whether two scope lists can apply to one file. An
// empty scope is everywhere. Entries are paths, directories or globs.
func scopesOverlap(a, b []string) bool {
	if len(a) == 0 || len(b) == 0 {
		return true
	}
	for _, x := range a {
		for _, y := range b {
			if pathsOverlap(x, y) {
				return true
			}
		}
	}
	return false
}

// pathsOverlap reports whether scope entries x and y can name the same
// file: one is a prefix directory of the other, or a glob matches.
func pathsOverlap(x, y string) bool {
	x, y = cleanScope(x), cleanScope(y)
	if x == "" || y == "" || x == y {
		return true
	}
	if under(x, y) || under(y, x) {
		return true
	}
	if ok, _ := path.Match(x, y); ok {
		return true
	}
	if ok, _ := path.Match(y, x); ok {
		return true
	}
	return false
}

// under reports whether p lies under the directory (or glob prefix) dir.
func under(p, dir string) bool {
	dir = strings.TrimSuffix(strings.TrimSuffix(dir, "**"), "*")
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

func cleanScope(s string) string {
	s = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), "./"))
	if s == "" || s == "." || s == "**" || s == "*" {
		return ""
	}
	return s
}

// Category L1 names: the seed's seven and the other areas coding agents
// record patterns in. A category is L1.L2[.more], lower case.
var categoryL1 = []string{
	"api", "async", "auth", "build", "concurrency", "config", "data", "database", "deps", "docs",
	"error", "logging", "performance", "security", "structure", "style", "testing", "tooling", "ui", "workflow",
}

var categorySegment = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,39}$`)

// ValidateCategory checks that cat is a hierarchical category with a
// known first level, such as "error.handling" or "database.orm". Its
// errors list the first levels.
func ValidateCategory(cat string) error {
	parts := strings.Split(cat, ".")
	if len(parts) < 2 {
		return fmt.Errorf("%q is not hierarchical: write L1.L2, such as error.handling, %s", cat, categoryHelp())
	}
	if len(parts) > 4 {
		return fmt.Errorf("%q has more than 4 levels", cat)
	}
	if !slices.Contains(categoryL1, parts[0]) {
		return fmt.Errorf("%q: unknown first level %q; %s", cat, parts[0], categoryHelp())
	}
	for _, p := range parts {
		if !categorySegment.MatchString(p) {
			return fmt.Errorf("%q: level %q must be lower-case letters, digits, _ or -", cat, p)
		}
	}
	return nil
}

// categoryHelp names the first levels a category may start with.
func categoryHelp() string {
	return "with L1 one of " + strings.Join(categoryL1, ", ")
}

// Categories returns the known first levels of the category hierarchy.
func Categories() []string { return slices.Clone(categoryL1) }

// categoriesOf infers the first-level categories a path or a text is
// about, from the words in it that name one ("internal/auth/token.go" is
// auth).
func categoriesOf(s string) []string {
	var out []string
	for w := range strings.FieldsFuncSeq(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}) {
		if slices.Contains(categoryL1, w) && !slices.Contains(out, w) {
			out = append(out, w)
		}
		if alias, ok := categoryAliases[w]; ok && !slices.Contains(out, alias) {
			out = append(out, alias)
		}
	}
	return out
}

var categoryAliases = map[string]string{
	"db": "database", "sql": "database", "migrations": "database", "migration": "database", "orm": "database",
	"http": "api", "handler": "api", "handlers": "api", "rest": "api", "grpc": "api", "endpoint": "api",
	"login": "auth", "oauth": "auth", "token": "auth", "session": "auth", "tokens": "auth",
	"test": "testing", "tests": "testing", "_test": "testing", "errors": "error",
	"log": "logging", "logs": "logging", "goroutine": "concurrency", "mutex": "concurrency",
	"perf": "performance", "cache": "performance", "benchmark": "performance",
	"crypto": "security", "secrets": "security", "makefile": "build", "ci": "build",
}
