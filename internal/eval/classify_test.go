package eval

import "testing"

func TestClassify(t *testing.T) {
	for p, want := range map[string]Class{
		"net/http/cookie.go":                  ClassCode,
		"net/http/cookie_test.go":             ClassTest,
		"net/http/testdata/file":              ClassTest,
		"cmd/go/testdata/script/mod_get.txt":  ClassTest,
		"crates/ignore/src/walk.rs":           ClassCode,
		"crates/ignore/tests/gitignore.rs":    ClassTest,
		"tests/data/sherlock.txt":             ClassTest,
		"crates/searcher/src/lines_test.rs":   ClassTest,
		"CHANGELOG.md":                        ClassChangelog,
		"RELEASE-CHECKLIST.md":                ClassChangelog,
		"docs/NEWS":                           ClassChangelog,
		"release-notes.txt":                   ClassChangelog,
		"README.md":                           ClassDoc,
		"GUIDE.md":                            ClassDoc,
		"cmd/go/alldocs.txt":                  ClassDoc,
		"doc/rg.1.txt.tpl":                    ClassDoc,
		"docs/usage.html":                     ClassDoc,
		"go/doc/reader.go":                    ClassCode, // a Go package named doc
		"crates/core/flags/doc/help.rs":       ClassCode,
		"crates/core/flags/doc/template.rg.1": ClassDoc,
		"Cargo.toml":                          ClassCode,
		"contest/main.go":                     ClassCode, // not a tests directory
		"latest_tests.go":                     ClassCode,
	} {
		if got := Classify(p); got != want {
			t.Errorf("Classify(%q) = %s, want %s", p, got, want)
		}
	}
	if ClassCode.Distractor() || !ClassTest.Distractor() || !ClassDoc.Distractor() || !ClassChangelog.Distractor() {
		t.Error("Distractor: only code is not one")
	}
}
