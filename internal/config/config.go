// Package config builds engram's one validated Config from, in rising
// precedence: built-in defaults, the user's config file, the project's
// .engram.toml, ENGRAM_* environment variables and command-line flags.
// Only cmd/engram calls Load; packages take plain values from the Config.
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/engramhq/engram/internal/retrieve"

	"github.com/BurntSushi/toml"

	"github.com/engramhq/engram/internal/chunk"
	"github.com/engramhq/engram/internal/tokens"
)

// ProjectFile is the name of a project's own config file, at its root.
const ProjectFile = ".engram.toml"

// Defaults.
const (
	DefaultMaxContentBytes = 32 << 20
	DefaultBatchSize       = 1000
	DefaultLogLevel        = "warn"
	DefaultMaxFileBytes    = 1 << 20
	DefaultEmbedProvider   = "corpus"
)

// EmbedProviders are the values of embed.provider.
var EmbedProviders = []string{"corpus", "model2vec", "ollama", "openai", "none"}

// Config is engram's configuration. Load returns it validated.
type Config struct {
	// Project is the project root: the git work tree holding the working
	// directory, or the working directory itself.
	Project string `toml:"-"`
	// DataDir holds engram's stores, one directory per project.
	DataDir string `toml:"data_dir"`
	// LogLevel is debug, info, warn or error.
	LogLevel string   `toml:"log_level"`
	Store    Store    `toml:"store"`
	Tokens   Tokens   `toml:"tokens"`
	Ingest   Ingest   `toml:"ingest"`
	Index    Index    `toml:"index"`
	Search   Search   `toml:"search"`
	Embed    Embed    `toml:"embed"`
	Retrieve Retrieve `toml:"retrieve"`
	Rerank   Rerank   `toml:"rerank"`
	Prefetch Prefetch `toml:"prefetch"`
	LLM      LLM      `toml:"llm"`
	Serve    Serve    `toml:"serve"`
	// MCP configures the MCP server (engram mcp, and engram serve's /mcp).
	MCP MCP `toml:"mcp"`
	// Retention bounds what the store keeps (retention.go).
	Retention Retention `toml:"retention"`
	// Window configures agents' context windows.
	Window Window `toml:"window"`
	// Assemble configures the assembly of turns' contexts.
	Assemble Assemble `toml:"assemble"`
	// Hooks configures what harness hooks inject and replace.
	Hooks Hooks `toml:"hooks"`
	// Models override and extend the built-in model catalog.
	Models []tokens.Model `toml:"models"`
	// Sources lists the files and variables the config was read from, for
	// display.
	Sources []string `toml:"-"`
}

// Assemble configures the assembly of turns' contexts over windows.
type Assemble struct {
	// Summarizer makes the rolling summaries of long histories: "auto"
	// (the [llm] model when one is configured, else extractive),
	// "extractive" (quoted from the messages, no model) or "model" (the
	// [llm] model; an error without one).
	Summarizer string `toml:"summarizer"`
	// SummaryTimeout bounds the model's work on one window's summaries
	// (default 60s); past it, the chunks are quoted, and that is reported.
	SummaryTimeout Duration `toml:"summary_timeout"`
}

// Hooks configures the harness hooks (engram hook): zero values keep
// the defaults of package hook.
type Hooks struct {
	// Briefing is the briefing SessionStart injects: none, micro,
	// standard (default) or full.
	Briefing string `toml:"briefing"`
	// PrefetchBudget bounds UserPromptSubmit's pre-fetch block in tokens
	// (default 1,500); -1 turns the pre-fetch off.
	PrefetchBudget int `toml:"prefetch_budget"`
	// MaxToolTokens is the size of a tool's result over which the model
	// gets its head, its tail and a [CTX-REF] instead (default 8,000); -1
	// never replaces.
	MaxToolTokens int `toml:"max_tool_tokens"`
	// KeepTokens is what a replaced result keeps (default 1,000).
	KeepTokens int `toml:"keep_tokens"`
}

// Briefings are the values of hooks.briefing.
var Briefings = []string{"none", "micro", "standard", "full"}

// Summarizers are the values of assemble.summarizer.
var Summarizers = []string{"auto", "extractive", "model"}

// Window configures context windows: the defaults of their limits and
// references, and policies by agent role that replace or add to seed
// 000's table. Zero values keep engram's defaults.
type Window struct {
	// Output is the tokens kept for the model's response (default 8192,
	// or the model's most output if less).
	Output int `toml:"output"`
	// Safety is the share of the context window kept as a safety buffer
	// (default 0.02); Margin the share kept free for a model whose
	// tokenizer engram only approximates (default 0.10).
	Safety float64 `toml:"safety"`
	Margin float64 `toml:"margin"`
	// MaxRefTokens caps what one reference stands for (default 8000).
	MaxRefTokens int `toml:"max_ref_tokens"`
	// Roles are policies by role name.
	Roles map[string]WindowRole `toml:"roles"`
}

// WindowRole is the policy of a role's windows. A role named here
// replaces the built-in one whole: give every field you want.
type WindowRole struct {
	// Strategy is recency, topic_cluster or task_completion.
	Strategy string `toml:"strategy"`
	// Evict is the share at which the window evicts, Target the share it
	// evicts down to: shares of the room the budget leaves above what the
	// window never evicts (its system prompt, pinned messages).
	Evict  float64 `toml:"evict"`
	Target float64 `toml:"target"`
	// KeepTurns is how many of the latest turns always stay.
	KeepTurns int `toml:"keep_turns"`
	// Checkpoints are shares at which a checkpoint is due.
	Checkpoints []float64 `toml:"checkpoints"`
	// Handoff is the share at which the agent is due to hand off to a new
	// instance (pipeline roles: 0.75), at or below Evict; zero never.
	Handoff float64 `toml:"handoff"`
	// Preserve are content types never evicted (user_prompt, ...).
	Preserve     []string `toml:"preserve"`
	MaxRefTokens int      `toml:"max_ref_tokens"`
}

// Store configures where the store lives.
type Store struct {
	// Path is the SQLite file, or a PostgreSQL database's URL
	// (postgres://user@host:port/database) or keyword/value connection
	// string (host=db user=engram dbname=api), without a password: see
	// internal/store/postgres. Empty means
	// DataDir/projects/<name>-<hash>/engram.db.
	Path string `toml:"path"`
}

// Postgres reports whether the store is a PostgreSQL database.
func (s Store) Postgres() bool { return IsPostgres(s.Path) }

// IsPostgresURL reports whether a store's location is a PostgreSQL URL
// rather than a file.
func IsPostgresURL(path string) bool {
	return strings.HasPrefix(path, "postgres://") || strings.HasPrefix(path, "postgresql://")
}

// IsPostgres reports whether a store's location is a PostgreSQL
// database rather than a file: a URL, or a connection string of libpq's
// keyword/value form (host=db user=engram dbname=api), which begins with
// a keyword and names where the database is.
func IsPostgres(path string) bool {
	return IsPostgresURL(path) || connFirst.MatchString(path) && connPlace.MatchString(path)
}

var (
	// connFirst begins a keyword/value connection string; connPlace is a
	// keyword of libpq's that says where the database is, or as whom.
	connFirst = regexp.MustCompile(`^\s*[A-Za-z_]+\s*=`)
	connPlace = regexp.MustCompile(`(?:^|\s)(?:host|hostaddr|port|dbname|user|password|passfile|service|sslmode)\s*=`)
)

// RedactStore is a store's location as a message may show it: a
// password in it (a URL's user's, a parameter's, a keyword/value
// string's password or sslpassword) replaced.
func RedactStore(path string) string {
	path = userPassword.ReplaceAllString(path, "${1}:xxxxx@")
	return passwordValue.ReplaceAllString(path, "${1}xxxxx")
}

var (
	// userPassword is a URL's user's password, in any scheme, however
	// many slashes follow it, up to the last @ (a password may hold one).
	userPassword = regexp.MustCompile(`^(\s*[A-Za-z][A-Za-z0-9+.-]*:/*[^:@/\s]*):\S*@`)
	// passwordValue is the value of a parameter or keyword whose name
	// ends in password, quoted or not.
	passwordValue = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s&]*)`)
)

// nearURL reports whether a store's location that is not a PostgreSQL
// URL was meant for one: a scheme of any case, a postgres: with one slash,
// spaces around it.
func nearURL(path string) bool {
	t := strings.ToLower(strings.TrimSpace(path))
	return strings.Contains(t, "://") || strings.HasPrefix(t, "postgres:") || strings.HasPrefix(t, "postgresql:")
}

// StateDir is the directory of the project's local files beside its
// store (the daemon's log and socket, hook state): the SQLite file's
// directory, or for a store in PostgreSQL the directory the file would
// have had.
func (c Config) StateDir() string {
	if c.Store.Postgres() || c.Store.Path == "" {
		return filepath.Join(c.DataDir, "projects", ProjectKey(c.Project))
	}
	return filepath.Dir(c.Store.Path)
}

// Tokens configures token counting.
type Tokens struct {
	// Encoding counts tokens: o200k_base or cl100k_base.
	Encoding string `toml:"encoding"`
}

// Ingest configures what engram add and the engine accept.
type Ingest struct {
	// MaxContentBytes bounds one record's content.
	MaxContentBytes int64 `toml:"max_content_bytes"`
	// BatchSize is how many records engram add writes per transaction.
	BatchSize int `toml:"batch_size"`
	// ChunkTokens bounds a chunk's tokens.
	ChunkTokens int `toml:"chunk_tokens"`
	// KeepSecrets stores content as given instead of redacting tokens of
	// known formats and private keys.
	KeepSecrets bool `toml:"keep_secrets"`
}

// Index configures engram index and engram watch; flags override it.
type Index struct {
	// Exclude holds gitignore-style patterns to leave out, relative to
	// the project root.
	Exclude []string `toml:"exclude"`
	// MaxFileBytes skips larger files.
	MaxFileBytes int64 `toml:"max_file_bytes"`
	// Workers read files in parallel; zero means one per core; at most
	// MaxWorkers.
	Workers int `toml:"workers"`
	// Generated indexes generated files too (left out by default).
	Generated bool `toml:"generated"`
}

// Search tunes lexical search; zero values take the store's defaults.
type Search struct {
	MaxPostings   int     `toml:"max_postings"`
	Window        int     `toml:"window"`
	MetaWeight    float64 `toml:"meta_weight"`
	ContextWeight float64 `toml:"context_weight"`
	// MmapSize is how many bytes of the store each reader maps into
	// memory; negative turns mapping off.
	MmapSize int64 `toml:"mmap_size"`
}

// Embed chooses the embedder of semantic search.
type Embed struct {
	// Provider is corpus (the default: a model trained on the store,
	// offline), model2vec (a local pretrained model), ollama, openai (any
	// OpenAI-compatible endpoint) or none (lexical search only).
	Provider string `toml:"provider"`
	// Model names a remote provider's model.
	Model string `toml:"model"`
	// URL is a remote provider's base URL; empty means its default.
	URL string `toml:"url"`
	// APIKeyEnv names the environment variable that holds the API key of
	// an OpenAI-compatible provider: keys stay out of files.
	APIKeyEnv string `toml:"api_key_env"`
	// Path is the directory of a Model2Vec model.
	Path string `toml:"path"`
	// Dimensions asks an OpenAI-compatible provider for vectors of this
	// size; zero takes the model's.
	Dimensions int `toml:"dimensions"`
	// BatchSize, Concurrency, Timeout and Retries tune remote providers.
	BatchSize   int      `toml:"batch_size"`
	Concurrency int      `toml:"concurrency"`
	Timeout     Duration `toml:"timeout"`
	Retries     int      `toml:"retries"`
	// CorpusDim is the dimension of corpus-trained vectors; CorpusGrowth
	// retrains the corpus model when the store has grown this many times.
	CorpusDim    int     `toml:"corpus_dim"`
	CorpusGrowth float64 `toml:"corpus_growth"`
}

// Retrieve tunes hybrid search; zero values take the defaults.
type Retrieve struct {
	// Fusion is rrf or weighted.
	Fusion        string   `toml:"fusion"`
	RRFK          float64  `toml:"rrf_k"`
	VectorWeight  float64  `toml:"vector_weight"`
	LexicalWeight float64  `toml:"lexical_weight"`
	Deadline      Duration `toml:"deadline"`
	// Depth is how many candidates each backend gives a search, whatever
	// its limit (default 50).
	Depth       int     `toml:"depth"`
	SymbolBoost float64 `toml:"symbol_boost"`
	PathBoost   float64 `toml:"path_boost"`
	// SpeakerPrior multiplies the score of the other speaker's messages
	// when a question is about what the user or the agent said; 1 is off.
	SpeakerPrior float64 `toml:"speaker_prior"`
	// AncillaryPrior multiplies the score of chunks of files aside from
	// the project's own code (vendored copies, test fixtures, Go files the
	// go tool ignores); 1 is off.
	AncillaryPrior float64 `toml:"ancillary_prior"`
	// TestPrior, ChangelogPrior and DocPrior multiply the score of chunks
	// of tests, changelogs and release notes, and documentation, unless
	// the query asks for them; 1 is off.
	TestPrior      float64 `toml:"test_prior"`
	ChangelogPrior float64 `toml:"changelog_prior"`
	DocPrior       float64 `toml:"doc_prior"`
	// Off names search stages to leave out (engram eval --off lists them).
	Off []string `toml:"off"`
	// SentenceBoost adds this times the share of the query's words that a
	// hit's best sentence (or line of code) holds; negative is off.
	SentenceBoost float64 `toml:"sentence_boost"`
	// FileEvidence raises a file's best chunk by this share of the scores
	// of its other chunks among the best 100 candidates; negative is off.
	FileEvidence float64 `toml:"file_evidence"`
	// FileCoverage adds to each chunk of a file this times the share of
	// the query's words the whole file holds, as a share of the best
	// score; negative is off.
	FileCoverage float64 `toml:"file_coverage"`
	// TimeBoost raises hits from the time a query points back to ("a week
	// ago", "last Tuesday"), also searched on its own; negative is off.
	TimeBoost float64 `toml:"time_boost"`
	// RelevanceFloor is the least share of a query's words, each weighted
	// by its rarity, that the best hit of a history search or the best
	// record of a recall must hold, or they answer nothing found;
	// negative is off.
	RelevanceFloor float64 `toml:"relevance_floor"`
}

// Rerank configures an optional re-ranker: a model served over HTTP that
// reads the query with each of hybrid search's best hits and re-orders
// them.
type Rerank struct {
	// Provider is none (the default), cohere (any Cohere-compatible
	// /rerank: Cohere, Jina, vLLM, llama.cpp's server, Infinity, LocalAI)
	// or tei (Hugging Face text-embeddings-inference).
	Provider string `toml:"provider"`
	// Model names the model; cohere needs one.
	Model string `toml:"model"`
	// URL is the server's base URL, before /rerank: such as
	// https://api.cohere.com/v2, https://api.jina.ai/v1 or
	// http://localhost:8080.
	URL string `toml:"url"`
	// APIKeyEnv names the environment variable holding the API key; empty
	// sends none.
	APIKeyEnv string `toml:"api_key_env"`
	// Depth is how many of the best hits are re-ranked (default 50).
	Depth int `toml:"depth"`
	// Timeout is the most a search waits for the re-ranker (default 5s).
	Timeout Duration `toml:"timeout"`
}

// RerankProviders are the values of rerank.provider.
var RerankProviders = []string{"none", "cohere", "tei"}

// LLM configures an optional chat model, which engram uses where it does
// better than rules (today: classifying questions to the archivalist).
type LLM struct {
	// Provider is none (the default) or openai: any OpenAI-compatible
	// /chat/completions endpoint with tool calls (OpenAI, Ollama at
	// http://localhost:11434/v1, vLLM, llama.cpp, LM Studio, gateways).
	Provider string `toml:"provider"`
	Model    string `toml:"model"`
	// URL is the API's base URL; empty means https://api.openai.com/v1.
	URL string `toml:"url"`
	// APIKeyEnv names the environment variable holding the API key.
	APIKeyEnv string   `toml:"api_key_env"`
	Timeout   Duration `toml:"timeout"`
}

// Serve configures engram serve's defences; zero values take the
// defaults.
type Serve struct {
	// AllowedHosts are host names (or addresses) requests may send in their
	// Host header besides localhost, 127.0.0.1, ::1 and the address served;
	// "*" allows any (behind a proxy that checks it).
	AllowedHosts []string `toml:"allowed_hosts"`
	// AllowedOrigins are the browser origins (https://host:port) allowed
	// besides the server's own; "*" allows any.
	AllowedOrigins []string `toml:"allowed_origins"`
	// TrustLoopback lets requests from loopback without a token in as the
	// operator. Off by default: every web page the user opens can reach
	// loopback.
	TrustLoopback bool `toml:"trust_loopback"`
	// MaxInFlight bounds the requests served at once (default 4 per core);
	// MaxQueue how many more wait for a slot (default 32 times that), each
	// at most QueueWait (default 2s); beyond, 503 with Retry-After.
	MaxInFlight int      `toml:"max_inflight"`
	MaxQueue    int      `toml:"max_queue"`
	QueueWait   Duration `toml:"queue_wait"`
	// MCPIdle closes MCP sessions idle this long (default 30m);
	// MaxMCPSessions bounds those open at once (default 256).
	MCPIdle        Duration `toml:"mcp_idle"`
	MaxMCPSessions int      `toml:"max_mcp_sessions"`
}

// MCP configures engram's MCP server.
type MCP struct {
	// Structured sends each tool result's data as structured content
	// beside its text. Off by default: Claude Code and Codex show the
	// model the structured content when there is any, JSON at about twice
	// the text's tokens.
	Structured bool `toml:"structured"`
}

// LLMProviders are the values of llm.provider.
var LLMProviders = []string{"none", "openai"}

// Prefetch tunes the pre-fetch block; zero values take the seed's priors.
type Prefetch struct {
	BudgetShare         float64 `toml:"budget_share"`
	ExcerptThreshold    float64 `toml:"excerpt_threshold"`
	ConfidenceThreshold float64 `toml:"confidence_threshold"`
	MaxExcerpts         int     `toml:"max_excerpts"`
	MaxHints            int     `toml:"max_hints"`
	MaxExcerptLines     int     `toml:"max_excerpt_lines"`
	MinSignal           float64 `toml:"min_signal"`
	// MinCoverage is the relevance floor: the least share of the query's
	// words a hit must hold to be injected.
	MinCoverage float64 `toml:"min_coverage"`
}

// Duration is a time.Duration written as a string in TOML ("250ms").
type Duration struct{ time.Duration }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Defaults returns the built-in configuration, before any file, variable or
// flag. DataDir depends on the environment, so Load fills it.
func Defaults() Config {
	return Config{
		LogLevel: DefaultLogLevel,
		Tokens:   Tokens{Encoding: tokens.DefaultEncoding},
		Ingest: Ingest{
			MaxContentBytes: DefaultMaxContentBytes,
			BatchSize:       DefaultBatchSize,
			ChunkTokens:     chunk.DefaultMaxTokens,
		},
		Index:    Index{MaxFileBytes: DefaultMaxFileBytes},
		Embed:    Embed{Provider: DefaultEmbedProvider, APIKeyEnv: "OPENAI_API_KEY"},
		LLM:      LLM{Provider: "none", APIKeyEnv: "OPENAI_API_KEY"},
		Rerank:   Rerank{Provider: "none"},
		Assemble: Assemble{Summarizer: "auto"},
	}
}

// Flags are the command-line values that override everything else; empty
// fields override nothing.
type Flags struct {
	ConfigFile string
	Project    string
	DataDir    string
	Store      string
	LogLevel   string
}

// Env looks up an environment variable; os.Getenv in production.
type Env func(string) string

// Load builds the configuration for a command run in dir.
func Load(dir string, env Env, flags Flags) (Config, error) {
	c := Defaults()
	get := func(k string) string { return strings.TrimSpace(env(k)) }

	project := firstNonEmpty(flags.Project, get("ENGRAM_PROJECT"))
	var err error
	if project == "" {
		project = FindProject(dir)
	} else if project, err = filepath.Abs(project); err != nil {
		return c, fmt.Errorf("project %s: %w", project, err)
	}
	if fi, err := os.Stat(project); err != nil || !fi.IsDir() {
		return c, fmt.Errorf("project %s is not a directory", project)
	}
	c.Project = project

	userFile := firstNonEmpty(flags.ConfigFile, get("ENGRAM_CONFIG"))
	explicit := userFile != ""
	if !explicit {
		if base := configHome(env); base != "" {
			userFile = filepath.Join(base, "engram", "config.toml")
		}
	}
	if userFile != "" {
		if _, _, err := c.readFile(userFile, explicit); err != nil {
			return c, err
		}
	}
	// The project's file comes with the repository: the keys that need
	// the user's trust apply only once it is trusted (trust.go).
	projectFile := filepath.Join(project, ProjectFile)
	if data, md, err := c.readFile(projectFile, false); err != nil {
		return c, err
	} else if data != nil {
		// Read last of the files, its keys hold its own values in c.
		if err := checkTrust(env, projectFile, data, guardedKeys(md, c)); err != nil {
			return c, err
		}
	}

	for _, v := range []struct {
		name string
		dst  *string
	}{
		{"ENGRAM_DATA_DIR", &c.DataDir},
		{"ENGRAM_STORE", &c.Store.Path},
		{"ENGRAM_ENCODING", &c.Tokens.Encoding},
		{"ENGRAM_LOG_LEVEL", &c.LogLevel},
		{"ENGRAM_EMBED_PROVIDER", &c.Embed.Provider},
		{"ENGRAM_EMBED_MODEL", &c.Embed.Model},
		{"ENGRAM_EMBED_URL", &c.Embed.URL},
		{"ENGRAM_EMBED_PATH", &c.Embed.Path},
		{"ENGRAM_LLM_PROVIDER", &c.LLM.Provider},
		{"ENGRAM_LLM_MODEL", &c.LLM.Model},
		{"ENGRAM_LLM_URL", &c.LLM.URL},
		{"ENGRAM_RERANK_PROVIDER", &c.Rerank.Provider},
		{"ENGRAM_RERANK_MODEL", &c.Rerank.Model},
		{"ENGRAM_RERANK_URL", &c.Rerank.URL},
	} {
		if s := get(v.name); s != "" {
			*v.dst = s
			c.Sources = append(c.Sources, "$"+v.name)
		}
	}
	if s := get("ENGRAM_RETENTION_MAX_AGE"); s != "" {
		if c.Retention.MaxAge, err = ParseAge(s); err != nil {
			return c, fmt.Errorf("ENGRAM_RETENTION_MAX_AGE: %w", err)
		}
		c.Sources = append(c.Sources, "$ENGRAM_RETENTION_MAX_AGE")
	}
	for _, v := range []struct {
		name string
		dst  *Size
	}{{"ENGRAM_RETENTION_MAX_BYTES", &c.Retention.MaxBytes}, {"ENGRAM_RETENTION_DISK_CAP", &c.Retention.DiskCap}} {
		if s := get(v.name); s != "" {
			if *v.dst, err = ParseSize(s); err != nil {
				return c, fmt.Errorf("%s: %w", v.name, err)
			}
			c.Sources = append(c.Sources, "$"+v.name)
		}
	}
	if s := get("ENGRAM_MAX_CONTENT_BYTES"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return c, fmt.Errorf("ENGRAM_MAX_CONTENT_BYTES=%q: not a whole number of bytes", s)
		}
		c.Ingest.MaxContentBytes = n
		c.Sources = append(c.Sources, "$ENGRAM_MAX_CONTENT_BYTES")
	}
	for _, f := range []struct{ v, dst *string }{
		{&flags.DataDir, &c.DataDir}, {&flags.Store, &c.Store.Path}, {&flags.LogLevel, &c.LogLevel},
	} {
		if *f.v != "" {
			*f.dst = *f.v
		}
	}

	if c.DataDir == "" {
		c.DataDir = defaultDataDir(env)
	}
	if c.DataDir == "" {
		return c, errors.New("cannot find a data directory: set ENGRAM_DATA_DIR or HOME")
	}
	if c.DataDir, err = filepath.Abs(c.DataDir); err != nil {
		return c, err
	}
	if c.Store.Path == "" {
		c.Store.Path = filepath.Join(c.DataDir, "projects", ProjectKey(project), "engram.db")
	} else if IsPostgres(c.Store.Path) {
		// A URL or connection string, kept as given: its password, if
		// any, is refused when the store opens (it would show on command
		// lines and in config files).
	} else if nearURL(c.Store.Path) {
		// Taken for a file, it would be a store of one's own, where the
		// team's was meant.
		return c, fmt.Errorf("store %q looks like a URL but is not a postgres://user@host:port/database one: write it so (the scheme in lower case, no spaces around it)", RedactStore(c.Store.Path))
	} else if c.Store.Path, err = filepath.Abs(c.Store.Path); err != nil {
		return c, err
	}
	return c, c.Validate()
}

// readFile merges a TOML file into c and returns what it read, and its
// decoding. A missing optional file is skipped (nil data).
func (c *Config) readFile(path string, required bool) ([]byte, toml.MetaData, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && !required {
		return nil, toml.MetaData{}, nil
	}
	if err != nil {
		return nil, toml.MetaData{}, fmt.Errorf("read config: %w", err)
	}
	md, err := toml.Decode(string(data), c)
	if err != nil {
		return nil, toml.MetaData{}, fmt.Errorf("config %s: %s", path, plainTOMLError(err))
	}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		keys := make([]string, len(undecoded))
		for i, k := range undecoded {
			keys[i] = k.String()
		}
		return nil, toml.MetaData{}, fmt.Errorf("config %s: unknown keys: %s", path, strings.Join(keys, ", "))
	}
	c.Sources = append(c.Sources, path)
	return data, md, nil
}

// Validate reports every problem with c at once.
func (c Config) Validate() error {
	var errs []error
	if err := tokens.Known(c.Tokens.Encoding); err != nil {
		errs = append(errs, fmt.Errorf("tokens.encoding: %w", err))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log_level: %q is not debug, info, warn or error", c.LogLevel))
	}
	if c.Ingest.MaxContentBytes <= 0 {
		errs = append(errs, errors.New("ingest.max_content_bytes: must be positive"))
	}
	if c.Ingest.BatchSize <= 0 {
		errs = append(errs, errors.New("ingest.batch_size: must be positive"))
	}
	if c.Ingest.ChunkTokens < 16 {
		errs = append(errs, errors.New("ingest.chunk_tokens: must be at least 16"))
	}
	if c.Index.MaxFileBytes <= 0 {
		errs = append(errs, errors.New("index.max_file_bytes: must be positive"))
	}
	if c.Index.Workers < 0 || c.Index.Workers > MaxWorkers {
		errs = append(errs, fmt.Errorf("index.workers: must be 0 (one per core) to %d", MaxWorkers))
	}
	errs = append(errs, negatives("search", num{"max_postings", float64(c.Search.MaxPostings)}, num{"window", float64(c.Search.Window)},
		num{"meta_weight", c.Search.MetaWeight}, num{"context_weight", c.Search.ContextWeight})...)
	if !slices.Contains(LLMProviders, c.LLM.Provider) {
		errs = append(errs, fmt.Errorf("llm.provider: %q is not one of %s", c.LLM.Provider, strings.Join(LLMProviders, ", ")))
	} else if c.LLM.Provider != "none" && c.LLM.Model == "" {
		errs = append(errs, fmt.Errorf("llm.model: provider %s needs a model name", c.LLM.Provider))
	}
	if c.LLM.Timeout.Duration < 0 {
		errs = append(errs, errors.New("llm.timeout: must not be negative"))
	}
	switch {
	case !slices.Contains(Summarizers, c.Assemble.Summarizer):
		errs = append(errs, fmt.Errorf("assemble.summarizer: %q is not one of %s", c.Assemble.Summarizer, strings.Join(Summarizers, ", ")))
	case c.Assemble.Summarizer == "model" && c.LLM.Model == "":
		errs = append(errs, errors.New("assemble.summarizer: model needs a chat model ([llm] provider and model)"))
	}
	if h := c.Hooks; h.Briefing != "" && !slices.Contains(Briefings, h.Briefing) {
		errs = append(errs, fmt.Errorf("hooks.briefing: %q is not one of %s", h.Briefing, strings.Join(Briefings, ", ")))
	}
	if h := c.Hooks; h.PrefetchBudget < -1 || h.MaxToolTokens < -1 || h.KeepTokens < 0 {
		errs = append(errs, errors.New("hooks: prefetch_budget and max_tool_tokens take -1 (off) or a number of tokens, keep_tokens a number of tokens"))
	} else if h.KeepTokens > 0 && h.MaxToolTokens > 0 && h.KeepTokens >= h.MaxToolTokens {
		errs = append(errs, fmt.Errorf("hooks.keep_tokens (%d) must be under hooks.max_tool_tokens (%d)", h.KeepTokens, h.MaxToolTokens))
	}
	if c.Assemble.SummaryTimeout.Duration < 0 {
		errs = append(errs, errors.New("assemble.summary_timeout: must not be negative"))
	}
	switch r := c.Rerank; {
	case !slices.Contains(RerankProviders, r.Provider):
		errs = append(errs, fmt.Errorf("rerank.provider: %q is not one of %s", r.Provider, strings.Join(RerankProviders, ", ")))
	case r.Provider == "none":
	case !strings.HasPrefix(r.URL, "http://") && !strings.HasPrefix(r.URL, "https://"):
		errs = append(errs, fmt.Errorf("rerank.url: provider %s needs the server's http or https URL, not %q", r.Provider, r.URL))
	case r.Provider == "cohere" && r.Model == "":
		errs = append(errs, errors.New("rerank.model: provider cohere needs a model name"))
	}
	errs = append(errs, negatives("rerank", num{"depth", float64(c.Rerank.Depth)}, num{"timeout", float64(c.Rerank.Timeout.Duration)})...)
	if !slices.Contains(EmbedProviders, c.Embed.Provider) {
		errs = append(errs, fmt.Errorf("embed.provider: %q is not one of %s", c.Embed.Provider, strings.Join(EmbedProviders, ", ")))
	}
	switch c.Embed.Provider {
	case "ollama", "openai":
		if c.Embed.Model == "" {
			errs = append(errs, fmt.Errorf("embed.model: provider %s needs a model name", c.Embed.Provider))
		}
	case "model2vec":
		if c.Embed.Path == "" {
			errs = append(errs, errors.New("embed.path: provider model2vec needs the model's directory (see engram model)"))
		}
	}
	errs = append(errs, negatives("embed", num{"dimensions", float64(c.Embed.Dimensions)}, num{"batch_size", float64(c.Embed.BatchSize)},
		num{"concurrency", float64(c.Embed.Concurrency)}, num{"retries", float64(c.Embed.Retries)}, num{"timeout", float64(c.Embed.Timeout.Duration)},
		num{"corpus_dim", float64(c.Embed.CorpusDim)}, num{"corpus_growth", c.Embed.CorpusGrowth})...)
	if c.Embed.CorpusGrowth != 0 && c.Embed.CorpusGrowth <= 1 {
		errs = append(errs, errors.New("embed.corpus_growth: must be more than 1"))
	}
	switch c.Retrieve.Fusion {
	case "", "rrf", "weighted":
	default:
		errs = append(errs, fmt.Errorf("retrieve.fusion: %q is not rrf or weighted", c.Retrieve.Fusion))
	}
	errs = append(errs, negatives("retrieve", num{"rrf_k", c.Retrieve.RRFK}, num{"vector_weight", c.Retrieve.VectorWeight},
		num{"lexical_weight", c.Retrieve.LexicalWeight}, num{"deadline", float64(c.Retrieve.Deadline.Duration)}, num{"depth", float64(c.Retrieve.Depth)},
		num{"symbol_boost", c.Retrieve.SymbolBoost}, num{"path_boost", c.Retrieve.PathBoost})...)
	if c.Retrieve.SpeakerPrior < 0 || c.Retrieve.SpeakerPrior > 1 {
		errs = append(errs, errors.New("retrieve.speaker_prior: must be between 0 and 1 (1 is off)"))
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"ancillary_prior", c.Retrieve.AncillaryPrior}, {"test_prior", c.Retrieve.TestPrior},
		{"changelog_prior", c.Retrieve.ChangelogPrior}, {"doc_prior", c.Retrieve.DocPrior}} {
		if f.v < 0 || f.v > 1 {
			errs = append(errs, fmt.Errorf("retrieve.%s: must be between 0 and 1 (1 is off)", f.name))
		}
	}
	if err := retrieve.CheckStages(c.Retrieve.Off); err != nil {
		errs = append(errs, fmt.Errorf("retrieve.off: %w", err))
	}
	if c.Retrieve.RelevanceFloor > 1 {
		errs = append(errs, errors.New("retrieve.relevance_floor: must be at most 1 (negative is off)"))
	}
	p := c.Prefetch
	for _, f := range []struct {
		name string
		v    float64
	}{{"budget_share", p.BudgetShare}, {"excerpt_threshold", p.ExcerptThreshold},
		{"confidence_threshold", p.ConfidenceThreshold}, {"min_signal", p.MinSignal}, {"min_coverage", p.MinCoverage}} {
		if f.v < 0 || f.v > 1 {
			errs = append(errs, fmt.Errorf("prefetch.%s: %v is not between 0 and 1", f.name, f.v))
		}
	}
	sv := c.Serve
	errs = append(errs, negatives("serve", num{"max_inflight", float64(sv.MaxInFlight)}, num{"max_queue", float64(sv.MaxQueue)},
		num{"queue_wait", float64(sv.QueueWait.Duration)}, num{"mcp_idle", float64(sv.MCPIdle.Duration)}, num{"max_mcp_sessions", float64(sv.MaxMCPSessions)})...)
	for _, o := range c.Serve.AllowedOrigins {
		if o != "*" && !strings.HasPrefix(o, "http://") && !strings.HasPrefix(o, "https://") {
			errs = append(errs, fmt.Errorf("serve.allowed_origins: %q is not an origin such as https://app.example.com:8443", o))
		}
	}
	if p.MaxExcerptLines < 0 {
		errs = append(errs, errors.New("prefetch.max_excerpt_lines: must not be negative"))
	}
	errs = append(errs, c.Retention.validate()...)
	if _, err := c.Catalog(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Catalog returns the model catalog with the configured overrides.
func (c Config) Catalog() (*tokens.Catalog, error) { return tokens.NewCatalog(c.Models...) }

// FindProject returns the root of the git work tree holding dir (the
// nearest directory with a .git entry), or dir itself.
func FindProject(dir string) string {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return dir
	}
	for d := dir; ; {
		if _, err := os.Stat(filepath.Join(d, ".git")); err == nil {
			return d
		}
		parent := filepath.Dir(d)
		if parent == d {
			return dir
		}
		d = parent
	}
}

// ProjectKey names a project's directory under DataDir/projects: the root's
// base name, for people, and a hash of its full path, so that two checkouts
// named alike get two stores.
func ProjectKey(root string) string {
	sum := sha256.Sum256([]byte(root))
	name := strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' {
			return r
		}
		return '_'
	}, filepath.Base(root))
	if name == "" || name == "." || name == string(filepath.Separator) {
		name = "root"
	}
	return name + "-" + hex.EncodeToString(sum[:])[:12]
}

func configHome(env Env) string {
	if d := env("XDG_CONFIG_HOME"); d != "" {
		return d
	}
	if runtime.GOOS == "darwin" {
		if h := env("HOME"); h != "" {
			return filepath.Join(h, "Library", "Application Support")
		}
	}
	if h := env("HOME"); h != "" {
		return filepath.Join(h, ".config")
	}
	return ""
}

func defaultDataDir(env Env) string {
	if d := env("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "engram")
	}
	h := env("HOME")
	if h == "" {
		return ""
	}
	if runtime.GOOS == "darwin" {
		return filepath.Join(h, "Library", "Application Support", "engram")
	}
	return filepath.Join(h, ".local", "share", "engram")
}

func firstNonEmpty(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}

// MaxWorkers bounds index.workers: each worker holds a file of up to
// index.max_file_bytes and its chunks, so a mistyped count (100000000)
// would take the machine's memory rather than its cores.
const MaxWorkers = 256

var (
	tomlTypes    = regexp.MustCompile(`incompatible types: TOML value has type (\w+); destination has type (\w+)`)
	tomlDuration = regexp.MustCompile(`time: (?:invalid duration|missing unit in duration|unknown unit "[^"]*" in duration) (".*")`)
)

// plainTOMLError says what a value should have been in words, not in Go's
// types ("TOML value has type string; destination has type slice").
func plainTOMLError(err error) string {
	msg := err.Error()
	msg = tomlTypes.ReplaceAllStringFunc(msg, func(m string) string {
		sub := tomlTypes.FindStringSubmatch(m)
		return "want " + kindWords(sub[2]) + ", not " + kindWords(sub[1])
	})
	return tomlDuration.ReplaceAllString(msg, `want a duration such as "2s" or "500ms", not $1`)
}

// kindWords names a Go kind as a TOML value.
func kindWords(kind string) string {
	switch {
	case kind == "slice" || kind == "array":
		return "a list"
	case kind == "string":
		return "a string"
	case strings.HasPrefix(kind, "int") || strings.HasPrefix(kind, "uint"):
		return "a whole number"
	case strings.HasPrefix(kind, "float"):
		return "a decimal number"
	case kind == "bool" || kind == "boolean":
		return "true or false"
	case kind == "map" || kind == "struct":
		return "a table"
	}
	return kind
}

// num is a setting's key, within its section, and its value.
type num struct {
	key string
	v   float64
}

// negatives returns an error for each of a section's settings that is
// negative, naming it.
func negatives(section string, nums ...num) []error {
	var errs []error
	for _, n := range nums {
		if n.v < 0 {
			errs = append(errs, fmt.Errorf("%s.%s: must not be negative", section, n.key))
		}
	}
	return errs
}
