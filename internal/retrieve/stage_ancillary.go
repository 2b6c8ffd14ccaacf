package retrieve

import (
	"context"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/engramhq/engram/internal/store"
)

// ancillaryDirs are the directories that hold code aside from a project's
// own by convention: copies of other projects' code (Go's vendor,
// third_party in Chromium and Google, node_modules) and test fixtures
// (Go's and Rust's testdata, fixtures, Jest's __fixtures__ and
// __snapshots__).
var ancillaryDirs = []string{"vendor", "third_party", "node_modules", "testdata", "fixtures", "__fixtures__", "__snapshots__"}

// ancillaryRE matches a query about ancillary code.
var ancillaryRE = regexp.MustCompile(`(?i)\b(vendor|third[_ -]party|node_modules|test ?data|fixtures?\b|__(fixtures|snapshots)__|snapshots?\b|golden)`)

// ancillary reports whether an occurrence is of an indexed file aside from
// the project's own code: under one of ancillaryDirs, or a Go file that
// the go tool ignores, whose name or a directory's begins with "_" or "."
// (generators kept beside a package, such as _gen/, and the like).
func ancillary(o store.Occurrence) bool {
	if o.Type != store.CodeFile || len(o.Files) == 0 {
		return false
	}
	dir, name := path.Split(o.Files[0])
	goFile := strings.HasSuffix(name, ".go")
	ignored := func(seg string) bool { return goFile && (strings.HasPrefix(seg, "_") || strings.HasPrefix(seg, ".")) }
	if ignored(name) {
		return true
	}
	for seg := range strings.SplitSeq(strings.TrimSuffix(dir, "/"), "/") {
		if slices.Contains(ancillaryDirs, seg) || ignored(seg) {
			return true
		}
	}
	return false
}

// ancillaryStage lowers the chunks of ancillary files (see ancillary) by
// a prior (Options.AncillaryPrior), unless the query names such code.
type ancillaryStage struct{ prior float64 }

func (ancillaryStage) name() string    { return StageAncillary }
func (s ancillaryStage) enabled() bool { return s.prior != 1 }

func (s ancillaryStage) rescore(_ context.Context, p *pass) {
	if ancillaryRE.MatchString(p.text) {
		return
	}
	for i := range p.hits {
		if ancillary(p.hits[i].Occurrence) {
			p.hits[i].scale(s.prior, StageAncillary)
		}
	}
}
