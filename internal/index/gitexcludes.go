package index

import (
	"cmp"
	"os"
	"path/filepath"
	"strings"
)

// maxIncludeDepth bounds [include] chains, as git's own limit does, so that
// a config that includes itself ends.
const maxIncludeDepth = 10

// globalExcludesFile returns the path of the user's global ignore file, as
// git finds it for a work tree whose shared git directory is gitDir:
// core.excludesFile from the system, global and repository configs, the
// last one set winning, or else $XDG_CONFIG_HOME/git/ignore
// (~/.config/git/ignore). "" means there is none: no home directory, or
// core.excludesFile set to nothing.
//
// The configs are read where git reads them: /etc/gitconfig (or
// $GIT_CONFIG_SYSTEM; none with $GIT_CONFIG_NOSYSTEM), then
// $XDG_CONFIG_HOME/git/config and ~/.gitconfig (or $GIT_CONFIG_GLOBAL),
// then gitDir/config. [include] paths are followed; [includeIf] sections
// are not, since their conditions are git's to judge. A config is read
// leniently (parseGitConfig): only one that cannot be read at all is an
// error.
func globalExcludesFile(root, gitDir string) (string, error) {
	home, _ := os.UserHomeDir()
	xdg := os.Getenv("XDG_CONFIG_HOME")
	if xdg == "" && home != "" {
		xdg = filepath.Join(home, ".config")
	}
	var configs []string
	if !gitBool(os.Getenv("GIT_CONFIG_NOSYSTEM")) {
		configs = append(configs, envOr("GIT_CONFIG_SYSTEM", "/etc/gitconfig"))
	}
	if g, ok := os.LookupEnv("GIT_CONFIG_GLOBAL"); ok {
		configs = append(configs, g)
	} else {
		if xdg != "" {
			configs = append(configs, filepath.Join(xdg, "git", "config"))
		}
		if home != "" {
			configs = append(configs, filepath.Join(home, ".gitconfig"))
		}
	}
	configs = append(configs, filepath.Join(gitDir, "config"))

	var value string
	set := false
	for _, c := range configs {
		if c == "" || c == os.DevNull {
			continue
		}
		if err := readExcludesFile(c, home, 0, &value, &set); err != nil {
			return "", err
		}
	}
	if !set {
		if xdg == "" {
			return "", nil
		}
		return filepath.Join(xdg, "git", "ignore"), nil
	}
	return expandGitPath(value, root, home), nil
}

// readExcludesFile reads the git config file at path, setting *value (and
// *set) at each core.excludesFile, and reading each [include] path where it
// stands (up to maxIncludeDepth deep). A missing file, or one that is not
// a regular file, sets nothing.
func readExcludesFile(path, home string, depth int, value *string, set *bool) error {
	info, err := os.Stat(path)
	if os.IsNotExist(err) || err == nil && !info.Mode().IsRegular() {
		return nil
	}
	if err != nil {
		return &gitConfigError{path: path, err: err}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return &gitConfigError{path: path, err: err}
	}
	dir := filepath.Dir(path)
	var ferr error
	parseGitConfig(data, func(section, sub, key, v string, hasValue bool) bool {
		switch {
		case section == "core" && sub == "" && key == "excludesfile" && hasValue:
			*value, *set = v, true
		case section == "include" && sub == "" && key == "path" && hasValue && v != "" && depth < maxIncludeDepth:
			p := expandGitPath(v, dir, home)
			if p == "" {
				return true // ~user, or no home: git refuses it
			}
			ferr = readExcludesFile(p, home, depth+1, value, set)
			return ferr == nil
		}
		return true
	})
	return ferr
}

// parseGitConfig calls fn with each variable of a git config, in order:
// its section and key lower-cased, its subsection, its value as git reads
// it (quotes and escapes undone, comments and outer blanks left out, a
// line ending in a backslash continued) and whether it has one ("key"
// alone has none), until fn returns false. It is lenient where git is
// strict: a line it cannot read is passed over, since a config git
// refuses makes git fail, and the user knows; engram only wants two of
// its variables.
func parseGitConfig(data []byte, fn func(section, sub, key, value string, hasValue bool) bool) {
	text := strings.TrimPrefix(string(data), "\ufeff")
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	section, sub := "", ""
	for i := 0; i < len(lines); i++ {
		line := strings.TrimLeft(lines[i], " \t")
		if strings.HasPrefix(line, "[") {
			end := strings.IndexByte(line, ']')
			if end < 0 {
				section, sub = "", "" // unreadable: what follows is in no section engram reads
				continue
			}
			section, sub = parseSectionHeader(line[1:end])
			line = strings.TrimLeft(line[end+1:], " \t") // a variable may follow on the line
		}
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		n := 0
		for n < len(line) && (isAlnum(line[n]) || line[n] == '-') {
			n++
		}
		if n == 0 {
			continue
		}
		key := strings.ToLower(line[:n])
		rest := strings.TrimLeft(line[n:], " \t")
		if rest == "" || rest[0] == '#' || rest[0] == ';' {
			if !fn(section, sub, key, "", false) {
				return
			}
			continue
		}
		if rest[0] != '=' {
			continue
		}
		var v strings.Builder
		// started: something of the value came (a quote opens it too),
		// after which blanks outside quotes are kept if more follows.
		raw, quoted, pending, started := rest[1:], false, "", false
		for {
			cont := false
			for k := 0; k < len(raw); k++ {
				c := raw[k]
				switch {
				case c == '\\' && k+1 < len(raw):
					k++
					v.WriteString(pending)
					pending, started = "", true
					switch raw[k] {
					case 'n':
						v.WriteByte('\n')
					case 't':
						v.WriteByte('\t')
					case 'b':
						v.WriteByte('\b')
					default:
						v.WriteByte(raw[k])
					}
				case c == '\\':
					cont = true // a backslash ends the line: it goes on
				case c == '"':
					v.WriteString(pending)
					pending, started = "", true
					quoted = !quoted
				case !quoted && (c == '#' || c == ';'):
					k = len(raw)
				case !quoted && (c == ' ' || c == '\t'):
					if started {
						pending += string(c) // kept only if something follows
					}
				default:
					v.WriteString(pending)
					pending, started = "", true
					v.WriteByte(c)
				}
			}
			if !cont || i+1 >= len(lines) {
				break
			}
			i++
			raw = lines[i]
		}
		if !fn(section, sub, key, v.String(), true) {
			return
		}
	}
}

// parseSectionHeader reads what is between a section header's brackets:
// `core`, `includeIf "gitdir:~/work/"` (a subsection, kept as written) or
// the old `branch.main` (lower-cased). A subsection given empty (`core ""`,
// `core.`) is one still, as git reads it: emptySub names it.
func parseSectionHeader(h string) (section, sub string) {
	h = strings.TrimSpace(h)
	if i := strings.IndexAny(h, " \t"); i >= 0 {
		q := strings.TrimSpace(h[i:])
		q = strings.TrimSuffix(strings.TrimPrefix(q, `"`), `"`)
		q = strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(q)
		return strings.ToLower(h[:i]), cmp.Or(q, emptySub)
	}
	if i := strings.IndexByte(h, '.'); i >= 0 {
		return strings.ToLower(h[:i]), cmp.Or(strings.ToLower(h[i+1:]), emptySub)
	}
	return strings.ToLower(h), ""
}

// emptySub stands for a subsection given empty, which is not none.
const emptySub = "\x00"

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// gitConfigError is a git config that cannot be read, naming it.
type gitConfigError struct {
	path string
	err  error
}

func (e *gitConfigError) Error() string { return "git config " + e.path + ": " + e.err.Error() }
func (e *gitConfigError) Unwrap() error { return e.err }

// expandGitPath expands a path from a git config as git does: a leading
// ~/ is the home directory, and a relative path is relative to dir.
func expandGitPath(p, dir, home string) string {
	switch {
	case p == "":
		return ""
	case p == "~" || strings.HasPrefix(p, "~/"):
		if home == "" {
			return "" // git refuses it
		}
		return filepath.Join(home, p[1:])
	case strings.HasPrefix(p, "~"):
		return "" // ~user: not looked up
	case filepath.IsAbs(p):
		return p
	}
	return filepath.Join(dir, p)
}

// gitBool reports whether s is one of git's true values.
func gitBool(s string) bool {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}
