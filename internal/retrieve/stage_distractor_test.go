package retrieve

import "testing"

func TestRoleOf(t *testing.T) {
	for p, want := range map[string]role{
		"net/http/cookie.go":               roleCode,
		"net/http/cookie_test.go":          roleTest,
		"crates/core/flags/defs.rs":        roleCode,
		"tests/regression.rs":              roleTest,
		"crates/ignore/tests/gitignore.rs": roleTest,
		"src/parser_test.rs":               roleTest,
		"pkg/test_parse.py":                roleTest,
		"web/app.spec.ts":                  roleTest,
		"web/__tests__/app.js":             roleTest,
		"lib/user_spec.rb":                 roleTest,
		"src/test/java/FooTest.java":       roleTest,
		"src/main/java/Foo.java":           roleCode,
		"CHANGELOG.md":                     roleChangelog,
		"Changes":                          roleChangelog,
		"NEWS":                             roleChangelog,
		"docs/release-notes/v2.rst":        roleChangelog,
		"RELEASE_NOTES.md":                 roleChangelog,
		"GUIDE.md":                         roleDoc,
		"docs/manual/intro":                roleDoc, "src/go/doc/comment.go": roleCode,
		"README":                               roleCode, // no extension: can't tell
		"internal/testutil/fake.go":            roleCode,
		"crates/searcher/src/testutil.rs":      roleCode,
		"crates/core/flags/doc/template.rs":    roleCode,
		"src/contest/score.go":                 roleCode,
		"cmd/release/main.go":                  roleCode,
		"internal/history/history.go":          roleCode,
		"src/net/http/testdata/file":           roleCode, // testdata: the ancillary stage's
		"src/cmd/go/testdata/script/build.txt": roleDoc,
	} {
		if got := roleOf(p); got != want {
			t.Errorf("roleOf(%q) = %d, want %d", p, got, want)
		}
	}
}

func TestAsked(t *testing.T) {
	for q, want := range map[string][3]bool{ // test, changelog, doc
		"how do I set a timeout on an HTTP client request": {},
		"the test for readSetCookies":                      {true, false, false},
		"TestReadSetCookies fails":                         {true, false, false},
		"cookie_test.go":                                   {true, false, false},
		"add a changelog entry for the fix":                {false, true, false},
		"release notes for 14.0":                           {false, true, false},
		"document the --json flag in the guide":            {false, false, true},
		"latest contest results":                           {},
		"protest the attestation":                          {},
	} {
		got := [3]bool{askTest.MatchString(q), askChangelog.MatchString(q), askDoc.MatchString(q)}
		if got != want {
			t.Errorf("%q: asks %v, want %v", q, got, want)
		}
	}
}
