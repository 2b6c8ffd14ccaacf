package retrieve

import (
	"context"
	"regexp"
	"strings"
)

var (
	identRE = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*`)
	pathRE  = regexp.MustCompile(`[A-Za-z0-9_.\-]*(?:/[A-Za-z0-9_.\-]+)+/?|[A-Za-z0-9_\-]+\.[A-Za-z][A-Za-z0-9]{0,5}`)
)

// queryNames returns the identifiers a query names (camelCase, snake_case
// or qualified names: ordinary words are not symbols) and the paths it
// names (with a slash, or a file name with an extension).
func queryNames(text string) (symbols, paths []string) {
	for _, m := range identRE.FindAllString(text, -1) {
		rest := m[1:]
		if strings.ContainsAny(m, "_.") || strings.ToLower(rest) != rest {
			symbols = append(symbols, m)
		}
	}
	for _, m := range pathRE.FindAllString(text, -1) {
		m = strings.Trim(m, "./")
		if m != "" {
			paths = append(paths, m)
		}
	}
	return symbols, paths
}

// matchSymbol reports whether a chunk declares a named symbol: exactly, or
// as the method or field part of a qualified name.
func matchSymbol(declared, named []string) bool {
	for _, d := range declared {
		for _, n := range named {
			if d == n || strings.HasSuffix(d, "."+n) || strings.HasSuffix(n, "."+d) {
				return true
			}
		}
	}
	return false
}

// matchPath reports whether a file is one the query names: the same path,
// a path ending in it at a slash, or under a named directory.
func matchPath(files, named []string) bool {
	for _, f := range files {
		for _, n := range named {
			if f == n || strings.HasSuffix(f, "/"+n) || strings.HasPrefix(f, n+"/") || strings.Contains(f, "/"+n+"/") {
				return true
			}
		}
	}
	return false
}

// symbolStage raises the chunks that declare a symbol the query names
// (Options.SymbolBoost).
type symbolStage struct{ boost float64 }

func (symbolStage) name() string    { return StageSymbol }
func (s symbolStage) enabled() bool { return s.boost > 0 }

func (s symbolStage) rescore(_ context.Context, p *pass) {
	symbols, _ := p.names()
	for i := range p.hits {
		if matchSymbol(p.hits[i].Chunk.Symbols, symbols) {
			p.hits[i].scale(1+s.boost, StageSymbol)
		}
	}
}

// pathStage raises the chunks of a file whose path the query names
// (Options.PathBoost).
type pathStage struct{ boost float64 }

func (pathStage) name() string    { return StagePath }
func (s pathStage) enabled() bool { return s.boost > 0 }

func (s pathStage) rescore(_ context.Context, p *pass) {
	_, paths := p.names()
	for i := range p.hits {
		if matchPath(p.hits[i].Occurrence.Files, paths) {
			p.hits[i].scale(1+s.boost, StagePath)
		}
	}
}
