package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func envOf(m map[string]string) Env { return func(k string) string { return m[k] } }

func TestLoad_Defaults(t *testing.T) {
	home := t.TempDir()
	repo := filepath.Join(t.TempDir(), "my repo")
	sub := filepath.Join(repo, "pkg", "x")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(repo, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := Load(sub, envOf(map[string]string{"HOME": home}), Flags{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Project != repo {
		t.Errorf("Project = %s, want the git root %s", c.Project, repo)
	}
	want := filepath.Join(home, ".local", "share", "engram", "projects", ProjectKey(repo), "engram.db")
	if c.Store.Path != want {
		t.Errorf("Store.Path = %s, want %s", c.Store.Path, want)
	}
	if !strings.HasPrefix(ProjectKey(repo), "my_repo-") {
		t.Errorf("ProjectKey = %s", ProjectKey(repo))
	}
	if c.Tokens.Encoding != "o200k_base" || c.Ingest.MaxContentBytes != 32<<20 || c.LogLevel != "warn" {
		t.Errorf("defaults = %+v", c)
	}
}

func TestLoad_Precedence(t *testing.T) {
	home, proj, xdg := t.TempDir(), t.TempDir(), t.TempDir()
	write := func(path, s string) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(xdg, "engram", "config.toml"), `
log_level = "info"
[tokens]
encoding = "cl100k_base"
[ingest]
batch_size = 50
[[models]]
name = "my-local-model"
context_window = 32768
`)
	write(filepath.Join(proj, ProjectFile), "[ingest]\nbatch_size = 70\n")
	env := map[string]string{"HOME": home, "XDG_CONFIG_HOME": xdg, "XDG_DATA_HOME": filepath.Join(home, "d"), "ENGRAM_LOG_LEVEL": "error"}
	c, err := Load(proj, envOf(env), Flags{Store: "rel.db"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Tokens.Encoding != "cl100k_base" || c.Ingest.BatchSize != 70 || c.LogLevel != "error" {
		t.Errorf("precedence: %+v", c)
	}
	if abs, _ := filepath.Abs("rel.db"); c.Store.Path != abs {
		t.Errorf("Store.Path = %s, want %s", c.Store.Path, abs)
	}
	cat, _ := c.Catalog()
	if m, ok := cat.Lookup("my-local-model"); !ok || m.ContextWindow != 32768 {
		t.Errorf("model override: %+v %v", m, ok)
	}
	if len(c.Sources) != 3 {
		t.Errorf("Sources = %v", c.Sources)
	}
	// ENGRAM_DATA_DIR beats XDG_DATA_HOME.
	env["ENGRAM_DATA_DIR"] = filepath.Join(home, "elsewhere")
	c, err = Load(proj, envOf(env), Flags{})
	if err != nil || !strings.HasPrefix(c.Store.Path, env["ENGRAM_DATA_DIR"]) {
		t.Errorf("ENGRAM_DATA_DIR: %s, %v", c.Store.Path, err)
	}
}

func TestLoad_Errors(t *testing.T) {
	home, proj := t.TempDir(), t.TempDir()
	bad := filepath.Join(proj, "bad.toml")
	write := func(s string) {
		if err := os.WriteFile(bad, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("log_lvl = \"info\"\n[tokens]\nencoding = \"gpt2\"\n")
	_, err := Load(proj, envOf(map[string]string{"HOME": home}), Flags{ConfigFile: bad})
	if err == nil || !strings.Contains(err.Error(), "unknown keys: log_lvl") {
		t.Errorf("unknown key: %v", err)
	}
	write("log_level = \"loud\"\n[tokens]\nencoding = \"gpt2\"\n[ingest]\nbatch_size = -1\n[index]\nworkers = 100000000\n")
	_, err = Load(proj, envOf(map[string]string{"HOME": home}), Flags{ConfigFile: bad})
	for _, want := range []string{"log_level", "tokens.encoding", "ingest.batch_size", "index.workers"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("invalid values: %v, want it to mention %s", err, want)
		}
	}
	// A negative value is named by its key.
	write("[search]\nwindow = -5\n[retrieve]\ndeadline = \"-1s\"\n[serve]\nmax_queue = -1\n")
	_, err = Load(proj, envOf(map[string]string{"HOME": home}), Flags{ConfigFile: bad})
	for _, want := range []string{"search.window: must not be negative", "retrieve.deadline: must not be negative", "serve.max_queue: must not be negative"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("negative values: %v, want %q", err, want)
		}
	}
	// Types are said in TOML's words, not Go's.
	for _, c := range []struct{ toml, want string }{
		{"[index]\nexclude = \"x\"\n", "index.exclude\"): want a list, not a string"},
		{"[index]\ngenerated = 1\n", "want true or false, not a whole number"},
		{"[retrieve]\ndeadline = \"soon\"\n", `want a duration such as "2s" or "500ms", not "soon"`},
	} {
		write(c.toml)
		_, err = Load(proj, envOf(map[string]string{"HOME": home}), Flags{ConfigFile: bad})
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "destination") {
			t.Errorf("%q: %v, want it to say %q", c.toml, err, c.want)
		}
	}
	_, err = Load(proj, envOf(map[string]string{"HOME": home}), Flags{ConfigFile: filepath.Join(proj, "missing.toml")})
	if err == nil {
		t.Error("an explicit config file that does not exist was accepted")
	}
	_, err = Load(proj, envOf(map[string]string{"HOME": home}), Flags{Project: filepath.Join(proj, "nope")})
	if err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("missing project: %v", err)
	}
	_, err = Load(proj, envOf(map[string]string{"HOME": home, "ENGRAM_MAX_CONTENT_BYTES": "1MB"}), Flags{})
	if err == nil || !strings.Contains(err.Error(), "ENGRAM_MAX_CONTENT_BYTES") {
		t.Errorf("bad env number: %v", err)
	}
	// A store URL mistyped is not a file of one's own, and the error
	// does not show its password.
	for _, store := range []string{"postgres:/127.0.0.1:15432/api", "POSTGRES://u@h/db", "mysql://u@h/db",
		"Postgres://u:secret@h/db", "postgres:/u:secret@h/db?sslpassword=secret"} {
		_, err = Load(proj, envOf(map[string]string{"HOME": home, "ENGRAM_STORE": store}), Flags{})
		if err == nil || !strings.Contains(err.Error(), "looks like a URL") || strings.Contains(err.Error(), "secret") {
			t.Errorf("store %q: %v", store, err)
		}
	}
}

// A keyword/value connection string, as libpq takes it, is a PostgreSQL
// store, not a file named so (which the SQLite backend would create, its
// name showing the password in every message).
func TestLoad_StoreConnectionString(t *testing.T) {
	home, proj := t.TempDir(), t.TempDir()
	for store, pg := range map[string]bool{
		"host=db user=engram dbname=api":                 true,
		"host=db user=engram password=secret dbname=api": true,
		"  dbname = 'my api'  host=/var/run/postgresql":  true,
		"search_path=engram user=engram":                 true,
		"notes=1.db":                                     false,
		"./host=db":                                      false,
	} {
		c, err := Load(proj, envOf(map[string]string{"HOME": home, "ENGRAM_STORE": store}), Flags{})
		if err != nil {
			t.Errorf("store %q: %v", store, err)
			continue
		}
		if c.Store.Postgres() != pg || pg && c.Store.Path != strings.TrimSpace(store) {
			t.Errorf("store %q: path %q, PostgreSQL %t; want PostgreSQL %t", store, c.Store.Path, c.Store.Postgres(), pg)
		}
	}
}

func TestRedactStore(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:secret@h:5432/db":                    "postgres://u:xxxxx@h:5432/db",
		"Postgres://u:sec@ret@h/db":                        "Postgres://u:xxxxx@h/db",
		"postgres://u@h/db?sslmode=require&password=s&x=1": "postgres://u@h/db?sslmode=require&password=xxxxx&x=1",
		"postgres://u@h/db?SSLPassword=s":                  "postgres://u@h/db?SSLPassword=xxxxx",
		"host=h password=secret dbname=db":                 "host=h password=xxxxx dbname=db",
		"host=h password = 'a \\' secret' dbname=db":       "host=h password = xxxxx dbname=db",
		"/home/me/engram.db":                               "/home/me/engram.db",
	} {
		if got := RedactStore(in); got != want {
			t.Errorf("RedactStore(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLoad_EmbedRetrievePrefetch(t *testing.T) {
	home, proj := t.TempDir(), t.TempDir()
	file := filepath.Join(home, "c.toml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`[embed]
provider = "ollama"
model = "nomic-embed-text"
timeout = "5s"
corpus_dim = 256
[retrieve]
fusion = "weighted"
deadline = "150ms"
relevance_floor = 0.25
[prefetch]
budget_share = 0.2
max_excerpts = 4
`)
	c, err := Load(proj, envOf(map[string]string{"HOME": home}), Flags{ConfigFile: file})
	if err != nil {
		t.Fatal(err)
	}
	if c.Embed.Provider != "ollama" || c.Embed.Timeout.Duration != 5*time.Second || c.Embed.CorpusDim != 256 ||
		c.Retrieve.Fusion != "weighted" || c.Retrieve.Deadline.Duration != 150*time.Millisecond || c.Retrieve.RelevanceFloor != 0.25 ||
		c.Prefetch.BudgetShare != 0.2 || c.Prefetch.MaxExcerpts != 4 || c.Embed.APIKeyEnv != "OPENAI_API_KEY" {
		t.Errorf("loaded %+v %+v %+v", c.Embed, c.Retrieve, c.Prefetch)
	}
	// The environment picks the provider.
	c, err = Load(proj, envOf(map[string]string{"HOME": home, "ENGRAM_EMBED_PROVIDER": "none"}), Flags{ConfigFile: file})
	if err != nil || c.Embed.Provider != "none" {
		t.Errorf("ENGRAM_EMBED_PROVIDER: %q, %v", c.Embed.Provider, err)
	}
	write(`[embed]
provider = "word2vec"
[retrieve]
fusion = "borda"
relevance_floor = 1.5
[prefetch]
excerpt_threshold = 1.5
`)
	_, err = Load(proj, envOf(map[string]string{"HOME": home}), Flags{ConfigFile: file})
	for _, want := range []string{"embed.provider", "retrieve.fusion", "retrieve.relevance_floor", "prefetch.excerpt_threshold"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("invalid values: %v, want it to mention %s", err, want)
		}
	}
	for body, want := range map[string]string{
		"[embed]\nprovider = \"openai\"\n":    "embed.model",
		"[embed]\nprovider = \"model2vec\"\n": "embed.path",
		"[embed]\ntimeout = \"soon\"\n":       "timeout",
		"[embed]\ncorpus_growth = 0.5\n":      "embed.corpus_growth",
	} {
		write(body)
		if _, err := Load(proj, envOf(map[string]string{"HOME": home}), Flags{ConfigFile: file}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want it to mention %s", body, err, want)
		}
	}
}
