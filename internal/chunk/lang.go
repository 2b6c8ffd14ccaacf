package chunk

import (
	"bytes"
	"path"
	"strings"
)

// Languages known to Code. Other files are split as plain text.
const (
	Go         = "go"
	Python     = "python"
	JavaScript = "javascript"
	TypeScript = "typescript"
	Rust       = "rust"
	Java       = "java"
	Kotlin     = "kotlin"
	CSharp     = "csharp"
	C          = "c"
	CPP        = "cpp"
	Ruby       = "ruby"
	Shell      = "shell"
	Markdown   = "markdown"
	PlainText  = "text"
)

var extLanguages = map[string]string{
	".go": Go,
	".py": Python, ".pyi": Python,
	".js": JavaScript, ".mjs": JavaScript, ".cjs": JavaScript, ".jsx": JavaScript,
	".ts": TypeScript, ".tsx": TypeScript, ".mts": TypeScript, ".cts": TypeScript,
	".rs":   Rust,
	".java": Java,
	".kt":   Kotlin, ".kts": Kotlin,
	".cs": CSharp,
	".c":  C, ".h": C,
	".cc": CPP, ".cpp": CPP, ".cxx": CPP, ".hpp": CPP, ".hh": CPP, ".hxx": CPP,
	".rb": Ruby, ".rake": Ruby, ".gemspec": Ruby,
	".sh": Shell, ".bash": Shell, ".zsh": Shell, ".ksh": Shell,
	".md": Markdown, ".markdown": Markdown, ".mdx": Markdown,
	// Known, split as text.
	".json": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".xml": "xml", ".html": "html", ".htm": "html",
	".css": "css", ".scss": "css", ".sql": "sql", ".proto": "proto", ".txt": PlainText, ".rst": "rst",
	".s": "assembly", ".swift": "swift", ".php": "php", ".scala": "scala", ".lua": "lua", ".tf": "terraform",
	".vue": "vue", ".svelte": "svelte", ".dart": "dart", ".ex": "elixir", ".exs": "elixir", ".hs": "haskell",
	".ml": "ocaml", ".clj": "clojure", ".r": "r", ".jl": "julia", ".zig": "zig", ".nim": "nim", ".pl": "perl",
	".mod": "go.mod", ".sum": "go.sum", ".ini": "ini", ".cfg": "ini", ".conf": "config", ".csv": "csv",
}

var nameLanguages = map[string]string{
	"makefile": "make", "gnumakefile": "make", "dockerfile": "dockerfile", "containerfile": "dockerfile",
	"gemfile": Ruby, "rakefile": Ruby, "vagrantfile": Ruby, "go.mod": "go.mod", "go.work": "go.mod",
	"cmakelists.txt": "cmake", "justfile": "just", "build": "starlark", "build.bazel": "starlark",
	"readme": Markdown, "license": PlainText, "copying": PlainText, "authors": PlainText,
}

// Language returns the language of the file at p (slash-separated), from
// its name, or for a script without an extension from the #! line at the
// start of head. It returns "" for an unknown language.
func Language(p string, head []byte) string {
	base := strings.ToLower(path.Base(p))
	if l, ok := nameLanguages[base]; ok {
		return l
	}
	if l, ok := extLanguages[path.Ext(base)]; ok {
		return l
	}
	if strings.HasPrefix(base, "dockerfile") {
		return "dockerfile"
	}
	if bytes.HasPrefix(head, []byte("#!")) {
		line, _, _ := bytes.Cut(head, []byte("\n"))
		switch {
		case bytes.Contains(line, []byte("python")):
			return Python
		case bytes.Contains(line, []byte("node")) || bytes.Contains(line, []byte("deno")) || bytes.Contains(line, []byte("bun")):
			return JavaScript
		case bytes.Contains(line, []byte("ruby")):
			return Ruby
		case bytes.Contains(line, []byte("sh")): // sh, bash, zsh, dash, ksh
			return Shell
		}
	}
	return ""
}
