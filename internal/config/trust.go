package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/engramhq/engram/internal/atomicfile"
)

// A project's .engram.toml comes with the repository: whoever can push
// to it writes it, and a clone runs it. Most keys only tune engram, but
// some would let the file send the project's content, and the user's
// API keys, to a server of its choosing (a provider's url, api_key_env
// or a remote provider), move the store elsewhere (data_dir, a store
// path or a PostgreSQL URL), store secrets unredacted
// (ingest.keep_secrets) or open engram serve to other hosts and pages
// ([serve]'s allowed_hosts, allowed_origins, trust_loopback). Those
// apply from a project's file only once the user trusts that file as it
// is now (engram trust records its SHA-256 in the user's config
// directory); until then, and again after the file changes, loading the
// config fails with an UntrustedError naming them. Set in the user's
// own config file, a variable or a flag, they apply as ever.

// UntrustedError is Load's error when a project's file sets keys that
// need the user's trust and the user has not trusted the file as it is.
type UntrustedError struct {
	// File is the project's config file; Keys the keys that need trust.
	File string
	Keys []string
	// Changed is set when the user trusted the file before it changed.
	Changed bool
}

func (e *UntrustedError) Error() string {
	why := "you have not trusted it"
	if e.Changed {
		why = "it has changed since you trusted it"
	}
	return fmt.Sprintf("config %s sets %s, which can send this project's content or your keys elsewhere, move its store or weaken engram's defences, and %s: "+
		"read the file, then run 'engram trust' in %s to allow it as it is now (or set those keys in your own config file instead)",
		e.File, strings.Join(e.Keys, ", "), why, filepath.Dir(e.File))
}

// guardedKeys returns the keys of a project's file that need the user's
// trust: md is the file's decoding, and p holds the values it set (the
// keys md names are the file's own in p, whatever else p holds).
func guardedKeys(md toml.MetaData, p Config) []string {
	var keys []string
	for _, k := range md.Keys() {
		name := k.String()
		guarded := false
		switch name {
		case "data_dir", "store.path",
			"embed.url", "embed.api_key_env", "llm.url", "llm.api_key_env", "rerank.url", "rerank.api_key_env",
			"serve.allowed_hosts", "serve.allowed_origins":
			guarded = true
		case "ingest.keep_secrets":
			guarded = p.Ingest.KeepSecrets
		case "serve.trust_loopback":
			guarded = p.Serve.TrustLoopback
		case "embed.provider":
			// The others run on this machine.
			guarded = p.Embed.Provider == "ollama" || p.Embed.Provider == "openai"
		case "llm.provider":
			guarded = p.LLM.Provider != "" && p.LLM.Provider != "none"
		case "rerank.provider":
			guarded = p.Rerank.Provider != "" && p.Rerank.Provider != "none"
		}
		if guarded {
			keys = append(keys, name)
		}
	}
	return keys
}

// keysOf returns the keys of a project's config file, read as data,
// that apply only once the user trusts it.
func keysOf(path string, data []byte) ([]string, error) {
	var p Config
	md, err := toml.Decode(string(data), &p)
	if err != nil {
		return nil, fmt.Errorf("config %s: %s", path, plainTOMLError(err))
	}
	return guardedKeys(md, p), nil
}

// TrustFile returns the file where the trusted project files are
// recorded: trusted, beside the user's config file. Empty when there is
// no config directory (no HOME).
func TrustFile(env Env) string {
	base := configHome(env)
	if base == "" {
		return ""
	}
	return filepath.Join(base, "engram", "trusted")
}

// trustLines reads the trust file: a line per trusted file, its SHA-256
// in hex, a space, and its absolute path.
func trustLines(env Env) (map[string]string, error) {
	f := TrustFile(env)
	if f == "" {
		return nil, nil
	}
	data, err := os.ReadFile(f)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read trusted files: %w", err)
	}
	m := map[string]string{}
	for line := range strings.Lines(string(data)) {
		sum, path, ok := strings.Cut(strings.TrimRight(line, "\r\n"), " ")
		if ok && path != "" {
			m[path] = sum
		}
	}
	return m, nil
}

func digest(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// checkTrust returns an UntrustedError when data, a project's file at
// path, sets keys that need trust and the user has not trusted it as it
// is.
func checkTrust(env Env, path string, data []byte, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	lines, err := trustLines(env)
	if err != nil {
		return err
	}
	sum, known := lines[path]
	if known && sum == digest(data) {
		return nil
	}
	return &UntrustedError{File: path, Keys: keys, Changed: known}
}

// Trust records the project's config file at path, as it is now, as
// trusted (revoke false) or no longer (revoke true), and returns the
// keys it sets that needed the trust. The trust file is replaced whole
// (written beside and renamed), mode 0600.
func Trust(env Env, path string, revoke bool) ([]string, error) {
	f := TrustFile(env)
	if f == "" {
		return nil, errors.New("cannot find your config directory to record the trust in: set HOME or XDG_CONFIG_HOME")
	}
	path, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	lines, err := trustLines(env)
	if err != nil {
		return nil, err
	}
	if lines == nil {
		lines = map[string]string{}
	}
	var keys []string
	if revoke {
		if _, ok := lines[path]; !ok {
			return nil, fmt.Errorf("%s is not trusted", path)
		}
		delete(lines, path)
	} else {
		// The keys said are of the bytes trusted.
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		if keys, err = keysOf(path, data); err != nil {
			return nil, err
		}
		lines[path] = digest(data)
	}
	var b bytes.Buffer
	paths := make([]string, 0, len(lines))
	for p := range lines {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		fmt.Fprintf(&b, "%s %s\n", lines[p], p)
	}
	if err := atomicfile.Write(f, b.Bytes(), 0o600, 0o700); err != nil {
		return nil, err
	}
	return keys, nil
}
