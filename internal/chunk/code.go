package chunk

import (
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"strings"
)

// Code splits d, in language lang, into chunks that follow its
// declarations: a chunk holds whole declarations with the comments above
// them while they fit in MaxTokens, a declaration too long for one chunk is
// split by lines, and every chunk names the symbols it declares. Go is
// parsed with go/parser (falling back to line patterns for files that do
// not parse); Python, JavaScript, TypeScript, Rust, Java, Kotlin, C#, C,
// C++, Ruby and shell use line patterns; Markdown is split by headings.
// Other languages are split as Text.
func Code(d *Doc, lang string, opts Options) []Chunk {
	if d.Text == "" {
		return nil
	}
	d.index()
	var spans []span
	switch {
	case lang == Go:
		var ok bool
		if spans, ok = goSpans(d); !ok {
			spans = patternSpans(d, patterns[Go])
		}
	case lang == Markdown:
		spans = markdownSpans(d)
	case patterns[lang] != nil:
		spans = patternSpans(d, patterns[lang])
	default:
		return Text(d, opts)
	}
	if len(spans) == 0 {
		return Text(d, opts)
	}
	return d.pack(spans, opts.max())
}

// goSpans cuts a Go file at its top-level declarations, each with the
// comments and blank lines before it; the package clause and imports come
// first. It reports false if the file does not parse.
func goSpans(d *Doc) ([]span, bool) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", d.Text, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, false
	}
	tf := fset.File(f.Pos())
	line := func(p token.Pos) int { return tf.Line(p) - 1 }
	var spans []span
	next := 0 // first line not yet in a span
	add := func(last int, symbols []string) {
		if last >= next {
			spans = append(spans, span{first: next, last: last, symbols: symbols})
			next = last + 1
		}
	}
	preamble := line(f.Name.End())
	for _, decl := range f.Decls {
		if g, ok := decl.(*ast.GenDecl); ok && g.Tok == token.IMPORT {
			preamble = line(g.End())
		}
	}
	add(preamble, nil)
	for _, decl := range f.Decls {
		switch x := decl.(type) {
		case *ast.FuncDecl:
			add(line(x.End()), []string{funcName(x)})
		case *ast.GenDecl:
			if x.Tok != token.IMPORT {
				add(line(x.End()), genNames(x))
			}
		}
	}
	if last := d.lineCount() - 1; last >= next {
		if len(spans) > 0 { // trailing comments join the last declaration
			spans[len(spans)-1].last = last
		} else {
			add(last, nil)
		}
	}
	return spans, true
}

// funcName names a function, or a method as Type.Method.
func funcName(f *ast.FuncDecl) string {
	if f.Recv == nil || len(f.Recv.List) == 0 {
		return f.Name.Name
	}
	t := f.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
			continue
		case *ast.IndexExpr:
			t = x.X
			continue
		case *ast.IndexListExpr:
			t = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + f.Name.Name
		}
		return f.Name.Name
	}
}

// maxDeclNames bounds the names taken from one const, var or type block.
const maxDeclNames = 16

func genNames(g *ast.GenDecl) []string {
	var names []string
	for _, s := range g.Specs {
		switch x := s.(type) {
		case *ast.TypeSpec:
			names = append(names, x.Name.Name)
		case *ast.ValueSpec:
			for _, n := range x.Names {
				if n.Name != "_" {
					names = append(names, n.Name)
				}
			}
		}
		if len(names) >= maxDeclNames {
			return names[:maxDeclNames]
		}
	}
	return names
}

// langPatterns find declarations by their first line: each regexp's group
// named "name" is the symbol. comment and decorator say which lines above a
// declaration belong to it.
type langPatterns struct {
	decls   []*regexp.Regexp
	comment *regexp.Regexp
}

var (
	slashComment = regexp.MustCompile(`^\s*(//|/\*|\*|@)`)
	hashComment  = regexp.MustCompile(`^\s*(#|@)`)
)

// Declarations by their first line, kept to shallow indentation so that
// statements inside bodies are not taken for declarations.
var patterns = map[string]*langPatterns{
	Go: {decls: []*regexp.Regexp{
		regexp.MustCompile(`^func\s+(?:\([^)]*\)\s*)?(?P<name>\w+)`),
		regexp.MustCompile(`^(?:type|var|const)\s+(?P<name>\w+)`),
	}, comment: slashComment},
	Python: {decls: []*regexp.Regexp{
		regexp.MustCompile(`^(?: {0,8}|\t{0,2})(?:async\s+)?def\s+(?P<name>\w+)`),
		regexp.MustCompile(`^(?: {0,4}|\t?)class\s+(?P<name>\w+)`),
	}, comment: hashComment},
	JavaScript: {decls: jsDecls, comment: slashComment},
	TypeScript: {decls: append([]*regexp.Regexp{
		regexp.MustCompile(`^\s{0,4}(?:export\s+)?(?:declare\s+)?(?:interface|type|enum|namespace|module)\s+(?P<name>\w+)`),
	}, jsDecls...), comment: slashComment},
	Rust: {decls: []*regexp.Regexp{
		regexp.MustCompile(`^\s{0,4}(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?(?:const\s+)?(?:unsafe\s+)?(?:extern\s+"[^"]*"\s+)?fn\s+(?P<name>\w+)`),
		regexp.MustCompile(`^\s{0,4}(?:pub(?:\([^)]*\))?\s+)?(?:struct|enum|trait|union|type|mod|const|static)\s+(?P<name>\w+)`),
		regexp.MustCompile(`^\s{0,4}impl(?:<[^>]*>)?\s+(?:[\w:<>, ]+\s+for\s+)?(?P<name>\w+)`),
		regexp.MustCompile(`^macro_rules!\s*(?P<name>\w+)`),
	}, comment: regexp.MustCompile(`^\s*(//|/\*|\*|#\[)`)},
	Java: {decls: classAndMethodDecls, comment: slashComment},
	CSharp: {decls: append([]*regexp.Regexp{
		regexp.MustCompile(`^\s{0,4}(?:\w+\s+)*(?:struct|record|namespace)\s+(?P<name>\w+)`),
	}, classAndMethodDecls...), comment: regexp.MustCompile(`^\s*(//|/\*|\*|\[)`)},
	Kotlin: {decls: []*regexp.Regexp{
		regexp.MustCompile(`^\s{0,8}(?:(?:public|private|protected|internal|open|abstract|sealed|data|enum|inner|override|suspend|inline)\s+)*(?:class|interface|object|fun)\s+(?:<[^>]*>\s*)?(?:\w+\.)?(?P<name>\w+)`),
	}, comment: slashComment},
	C:   {decls: cDecls, comment: slashComment},
	CPP: {decls: cDecls, comment: slashComment},
	Ruby: {decls: []*regexp.Regexp{
		regexp.MustCompile(`^\s{0,6}(?:def|class|module)\s+(?:self\.)?(?P<name>[\w:]+[?!=]?)`),
	}, comment: regexp.MustCompile(`^\s*#`)},
	Shell: {decls: []*regexp.Regexp{
		regexp.MustCompile(`^\s{0,4}function\s+(?P<name>[\w:.-]+)`),
		regexp.MustCompile(`^\s{0,4}(?P<name>[\w:.-]+)\s*\(\)\s*(?:\{|$)`),
	}, comment: regexp.MustCompile(`^\s*#`)},
}

var jsDecls = []*regexp.Regexp{
	regexp.MustCompile(`^\s{0,4}(?:export\s+)?(?:default\s+)?(?:async\s+)?function\s*\*?\s*(?P<name>\w+)`),
	regexp.MustCompile(`^\s{0,4}(?:export\s+)?(?:default\s+)?(?:abstract\s+)?class\s+(?P<name>\w+)`),
	regexp.MustCompile(`^\s{0,4}(?:export\s+)?(?:const|let|var)\s+(?P<name>\w+)\s*(?::[^=]+)?=\s*(?:async\s+)?(?:function|\([^)]*\)\s*(?::[^=]+)?=>|\w+\s*=>)`),
	regexp.MustCompile(`^\s{2,4}(?:(?:public|private|protected|static|async|readonly|get|set|override)\s+)*(?P<name>[A-Za-z_$][\w$]*)\s*\([^)]*\)\s*(?::[^{]+)?\{\s*\}?\s*$`),
}

var classAndMethodDecls = []*regexp.Regexp{
	regexp.MustCompile(`^\s{0,4}(?:(?:public|private|protected|static|final|abstract|sealed|partial|internal|strictfp)\s+)*(?:class|interface|enum|record|@interface)\s+(?P<name>\w+)`),
	regexp.MustCompile(`^\s{0,8}(?:(?:public|private|protected|static|final|abstract|synchronized|native|override|virtual|async|internal|default)\s+)+[\w<>\[\],.? ]+\s+(?P<name>\w+)\s*\([^;]*$`),
}

var cDecls = []*regexp.Regexp{
	regexp.MustCompile(`^(?:typedef\s+)?(?:struct|union|enum|class|namespace)\s+(?P<name>\w+)`),
	regexp.MustCompile(`^#define\s+(?P<name>\w+)`),
	// A function definition: a type and a name at the left margin, an
	// argument list, and no semicolon (a prototype).
	regexp.MustCompile(`^(?:[A-Za-z_][\w:<>,*& ]*[\s*&]+)?(?P<name>[A-Za-z_~][\w:~]*)\s*\([^;]*$`),
}

// controlWords are never declaration names: a pattern that takes "if" or
// "for" for a method name has matched a statement.
var controlWords = map[string]bool{
	"if": true, "for": true, "while": true, "switch": true, "catch": true, "return": true, "else": true,
	"do": true, "try": true, "with": true, "elif": true, "unless": true, "until": true, "case": true,
	"sizeof": true, "defined": true,
}

// patternSpans cuts d at lines that match a declaration pattern, each
// declaration taking the comment lines right above it.
func patternSpans(d *Doc, lp *langPatterns) []span {
	type decl struct {
		line int
		name string
	}
	var decls []decl
	for i := 0; i < d.lineCount(); i++ {
		l := strings.TrimRight(d.line(i), "\r\n")
		for _, re := range lp.decls {
			m := re.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			name := m[re.SubexpIndex("name")]
			if controlWords[name] {
				continue
			}
			decls = append(decls, decl{i, name})
			break
		}
	}
	if len(decls) == 0 {
		return nil
	}
	var spans []span
	prev := 0
	for k, dc := range decls {
		start := dc.line
		for start > prev && lp.comment.MatchString(d.line(start-1)) {
			start--
		}
		if k == 0 {
			if start > 0 {
				spans = append(spans, span{first: 0, last: start - 1})
			}
		} else {
			spans[len(spans)-1].last = start - 1
		}
		spans = append(spans, span{first: start, symbols: []string{dc.name}})
		prev = dc.line + 1
	}
	spans[len(spans)-1].last = d.lineCount() - 1
	return spans
}

var heading = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.+?)\s*#*\s*$`)

// markdownSpans cuts a Markdown document at its headings (outside fenced
// code blocks); each section's symbol is its heading.
func markdownSpans(d *Doc) []span {
	var spans []span
	fence := ""
	for i := 0; i < d.lineCount(); i++ {
		l := strings.TrimRight(d.line(i), "\r\n")
		t := strings.TrimLeft(l, " ")
		if fence != "" {
			if strings.HasPrefix(t, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fence = t[:3]
			continue
		}
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if len(spans) > 0 {
			spans[len(spans)-1].last = i - 1
		} else if i > 0 {
			spans = append(spans, span{first: 0, last: i - 1})
		}
		spans = append(spans, span{first: i, symbols: []string{m[2]}})
	}
	if len(spans) == 0 {
		return nil
	}
	spans[len(spans)-1].last = d.lineCount() - 1
	return spans
}
