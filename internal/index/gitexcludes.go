package index

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/gcfg"
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
// are not, since their conditions are git's to judge.
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
// stands. A missing file, or one that is not a regular file, sets nothing.
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
	err = gcfg.ReadWithCallback(bytes.NewReader(data), func(section, sub, key, v string, blank bool) error {
		switch {
		case key == "":
			return nil
		case strings.EqualFold(section, "core") && sub == "" && strings.EqualFold(key, "excludesFile"):
			if blank {
				return fmt.Errorf("core.excludesFile has no value")
			}
			*value, *set = v, true
		case strings.EqualFold(section, "include") && sub == "" && strings.EqualFold(key, "path") && !blank && v != "":
			if depth >= maxIncludeDepth {
				return fmt.Errorf("more than %d nested [include] files (does one include itself?)", maxIncludeDepth)
			}
			return readExcludesFile(expandGitPath(v, dir, home), home, depth+1, value, set)
		}
		return nil
	})
	var nested *gitConfigError
	if errors.As(err, &nested) {
		return err // from an included file, which it names
	}
	if err != nil {
		return &gitConfigError{path: path, err: err}
	}
	return nil
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
	case p == "~" && home != "":
		return home
	case strings.HasPrefix(p, "~/") && home != "":
		return filepath.Join(home, p[2:])
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
