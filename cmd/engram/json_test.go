package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// dataMaps hold data keyed by names that are not field names (reasons,
// metadata keys, boost names): their keys are not checked.
var dataMaps = map[string]bool{"skipped": true, "ignored": true, "metadata": true, "boosts": true, "by_op": true}

// TestCLI_JSON: every --json output names its fields in snake_case and
// prints empty lists as [], not null.
func TestCLI_JSON(t *testing.T) {
	e := newEnv(t)
	if err := os.WriteFile(filepath.Join(e.project, "retry.go"), []byte("package upload\n\n// Retry retries with backoff.\nfunc Retry() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	check := func(args ...string) {
		t.Helper()
		out := e.ok("", args...)
		lines := []string{out}
		if args[0] == "events" {
			lines = strings.Split(strings.TrimSpace(out), "\n")
		}
		for _, l := range lines {
			var v any
			if err := json.Unmarshal([]byte(l), &v); err != nil {
				t.Fatalf("engram %s: %v in %q", strings.Join(args, " "), err, l)
			}
			var walk func(path string, v any)
			walk = func(path string, v any) {
				switch v := v.(type) {
				case nil:
					t.Errorf("engram %s: %s is null", strings.Join(args, " "), path)
				case map[string]any:
					for k, x := range v {
						if !snakeCase.MatchString(k) && !dataMaps[path[strings.LastIndexByte(path, '.')+1:]] {
							t.Errorf("engram %s: key %s.%s is not snake_case", strings.Join(args, " "), path, k)
						}
						walk(path+"."+k, x)
					}
				case []any:
					for _, x := range v {
						walk(path+"[]", x)
					}
				}
			}
			walk("$", v)
		}
	}
	check("index", "--yes", "--no-embed", "--json")
	check("search", "nothing matches quokka", "--json")
	check("search", "Retry backoff", "--json")
	check("prefetch", "nothing matches quokka", "--budget", "500", "--json")
	check("files", "--json")
	check("files", "retry.go", "--versions", "--json")
	check("show", "retry.go", "--json")
	check("stats", "--json")
	check("models", "--json")
	check("version", "--json")
	check("agents", "--json")
	check("agents", "register", "--session", "s1", "--json")
	check("agents", "register", "--session", "s1", "--id", "k1", "--json")
	check("agents", "key", "k1", "--json")
	check("migrate", "--check", "--json")
	check("pattern", "add", "wrap errors with %w", "--category", "error.handling", "--session", "s1", "--json")
	check("failure", "add", "--approach", "raw SQL", "--reason", "injection", "--resolution", "parameters", "--outcome", "success", "--session", "s1", "--json")
	check("pattern", "list", "--json")
	check("failure", "list", "--json")
	check("agents", "--json")
	check("events", "--json")
	check("briefing", "--session", "s1", "--tier", "full", "--json")
	check("session", "show", "--session", "s1", "--json")
	check("arch", "what patterns do we have for error handling?", "--json")
	turns := filepath.Join(e.project, "turns.jsonl")
	var b strings.Builder
	for i := range 8 {
		b.WriteString(anthropicTurn(i))
	}
	if err := os.WriteFile(turns, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	check("window", "list", "--json")
	check("window", "open", "--session", "s1", "--agent", "claude", "--limit", "3000", "--json")
	check("window", "append", "--session", "s1", "--agent", "claude", "--format", "anthropic", "--file", turns, "--json")
	check("window", "status", "--session", "s1", "--agent", "claude", "--json")
	check("window", "list", "--json")
	check("window", "context", "--session", "s1", "--agent", "claude", "--format", "anthropic", "--json")
	check("window", "replay", turns, "--format", "anthropic", "--budget", "2000", "--json")
}
