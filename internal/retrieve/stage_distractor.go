package retrieve

import (
	"context"
	"path"
	"regexp"
	"strings"

	"github.com/engramhq/engram/internal/chunk"
	"github.com/engramhq/engram/internal/store"
)

// A file's role in its project, by its path: whether it is the code
// itself or something that describes it.
type role int

const (
	roleCode role = iota
	// roleTest is a test: Go's _test.go; Rust's tests/ and _test.rs;
	// Python's test_*.py and *_test.py; JavaScript's *.test.js, *.spec.ts
	// and __tests__/; Ruby's *_spec.rb; Java's *Test.java and src/test/;
	// any file under a tests/, test/ or spec/ directory.
	roleTest
	// roleChangelog is a changelog or release notes: CHANGELOG, CHANGES,
	// HISTORY, NEWS, RELEASES, RELEASE-NOTES (any case, with no extension
	// or a prose one),
	// and files under release-notes/ or changelog/ directories.
	roleChangelog
	// roleDoc is prose: Markdown, reStructuredText, AsciiDoc, plain text,
	// and what is not program source under doc/ or docs/ (Go's go/doc and
	// ripgrep's flags/doc/*.rs are code).
	roleDoc
)

var (
	changelogName = regexp.MustCompile(`^(?:change[-_ ]?log|changes|history|news|releases?|release[-_ ]?notes?)(?:\.(?:md|markdown|txt|rst|adoc|org|rdoc))?$`)
	testName      = regexp.MustCompile(`(?:_test\.(?:go|rs|py|rb|exs?|cc|cpp|c)|^test_.*\.py|\.(?:test|spec)\.[cm]?[jt]sx?|_spec\.rb|Tests?\.(?:java|kt|cs|scala|swift))$`)
	docExt        = map[string]bool{".md": true, ".markdown": true, ".rst": true, ".adoc": true, ".txt": true, ".org": true, ".rdoc": true}
)

// roleOf returns the role of the file at p, a slash-separated path
// relative to the project.
func roleOf(p string) role {
	dir, name := path.Split(p)
	lower := strings.ToLower(name)
	if changelogName.MatchString(lower) {
		return roleChangelog
	}
	if testName.MatchString(name) {
		return roleTest
	}
	dirs := strings.Split(strings.ToLower(strings.TrimSuffix(dir, "/")), "/")
	for _, d := range dirs {
		switch d {
		case "tests", "test", "spec", "specs", "__tests__", "testing":
			return roleTest
		case "changelog", "changelogs", "release-notes", "release_notes", "releasenotes":
			return roleChangelog
		}
	}
	if docExt[path.Ext(lower)] {
		return roleDoc
	}
	if chunk.Language(p, nil) != "" {
		return roleCode
	}
	for _, d := range dirs {
		if d == "doc" || d == "docs" || d == "documentation" {
			return roleDoc
		}
	}
	return roleCode
}

var (
	// askTest finds a query about tests: "the test for ...", "failing
	// tests", a test's name (TestReadSetCookies, test_parse) or a test
	// file's (cookie_test.go).
	askTest = regexp.MustCompile(`(?i)\b(?:tests?|testing|unit ?tests?|specs?|fixtures?|benchmarks?)\b|\bTest[A-Z_]\w*|\btest_\w+|\w+_test\.\w+|\w+\.(?:test|spec)\.\w+`)
	// askChangelog finds a query about a project's history of releases.
	askChangelog = regexp.MustCompile(`(?i)\b(?:change ?logs?|release notes?|news|changes file|what'?s new|releases?|version history)\b`)
	// askDoc finds a query about documentation.
	askDoc = regexp.MustCompile(`(?i)\b(?:docs?|documentation|documented|readme|guide|faq|manual|man ?page|tutorial)\b`)
)

// distractorStage lowers the chunks of files that describe the code
// rather than being it, by a prior per role (Options.TestPrior,
// ChangelogPrior, DocPrior): a changelog paraphrases the commits that
// made the code, a test repeats its names, and both match a question
// about the code as well as the code does. A query that asks for them
// (see askTest, askChangelog, askDoc) leaves their role alone.
type distractorStage struct {
	priors map[role]float64
}

func (distractorStage) name() string { return StageDistractor }

func (s distractorStage) enabled() bool {
	for _, p := range s.priors {
		if p != 1 {
			return true
		}
	}
	return false
}

func (s distractorStage) rescore(_ context.Context, p *pass) {
	var asked map[role]bool    // read from the query at the first file
	roles := map[string]role{} // a file's chunks are many among the hits
	for i := range p.hits {
		o := p.hits[i].Occurrence
		if o.Type != store.CodeFile || len(o.Files) == 0 {
			continue
		}
		r, ok := roles[o.Files[0]]
		if !ok {
			r = roleOf(o.Files[0])
			roles[o.Files[0]] = r
		}
		prior, ok := s.priors[r]
		if !ok || prior == 1 {
			continue
		}
		if asked == nil {
			asked = map[role]bool{
				roleTest:      askTest.MatchString(p.text),
				roleChangelog: askChangelog.MatchString(p.text),
				roleDoc:       askDoc.MatchString(p.text),
			}
		}
		if !asked[r] {
			p.hits[i].scale(prior, StageDistractor)
		}
	}
}
