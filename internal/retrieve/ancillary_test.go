package retrieve

import (
	"testing"

	"github.com/engramhq/engram/internal/store"
)

func TestAncillary(t *testing.T) {
	for _, tc := range []struct {
		path string
		want bool
	}{
		{"vendor/golang.org/x/net/http2/frame.go", true},
		{"cmd/vendor/golang.org/x/tools/go/analysis/analysis.go", true},
		{"third_party/abseil/strings.cc", true},
		{"web/node_modules/react/index.js", true},
		{"internal/types/testdata/check/expr0.go", true},
		{"tests/fixtures/config.toml", true},
		{"src/__snapshots__/app.test.js.snap", true},
		// The go tool ignores Go files and directories beginning with _ or .
		{"simd/archsimd/_gen/unify/unify.go", true},
		{"runtime/_mkmalloc/mkmalloc.go", true},
		{"pkg/_scratch.go", true},
		// Elsewhere a leading underscore means something else.
		{"pkg/__init__.py", false},
		{"src/_private.py", false},
		{"net/http/server.go", false},
		{"vendors/list.go", false},
		{"internal/testdatabase/db.go", false},
		// A file named like such a directory is not in one.
		{"internal/fixtures", false},
	} {
		o := store.Occurrence{Type: store.CodeFile, Files: []string{tc.path}}
		if got := ancillary(o); got != tc.want {
			t.Errorf("%s: ancillary %v, want %v", tc.path, got, tc.want)
		}
	}
	if ancillary(store.Occurrence{Type: store.UserPrompt, Files: []string{"vendor/x.go"}}) {
		t.Error("a message that names a vendored file is not itself vendored code")
	}
	for q, want := range map[string]bool{
		"bump the vendored x/net":         true,
		"update third-party licenses":     true,
		"regenerate the testdata goldens": true,
		"add a fixture for empty input":   true,
		"update Jest snapshots":           true,
		"fix the frame header check":      false,
		"parse latest data":               false,
	} {
		if got := ancillaryRE.MatchString(q); got != want {
			t.Errorf("%q: names ancillary code %v, want %v", q, got, want)
		}
	}
}
