package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/bench"
	"github.com/engramhq/engram/internal/config"
	"github.com/engramhq/engram/internal/embed/lsa"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/eval"
	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store"
)

func (a *app) evalCmd() *cobra.Command {
	var (
		r         evalRun
		benchPath string
		sets      []string
		dir       string
		jsonOut   bool
		byKind    bool
		modes     []string
		pgURL     string
		keep      bool
	)
	cmd := &cobra.Command{
		Use:   "eval",
		Short: "Score retrieval on the benchmark sets or your own: recall@k, MRR, nDCG@10, latency",
		Long: `Run the benchmark sets of the shared bench folder end to end, or your own set:
load each set's corpus into a new store under --dir, ask every question, and
score the ranked results against the relevant items (recall@5/10/20, MRR,
nDCG@10, latency p50/p95/p99), as the bench README prescribes:

  gocommits    Go commit subjects against the whole of $(go env GOROOT)/src
               (tests, testdata and docs included), relevant: the non-test
               files each commit changed; --non-test for the set's original
               corpus, the non-test .go files alone
  ripgrep      ripgrep commit subjects against the whole ripgrep repository
               (extracted from the set's archive), relevant: the source files
               changed
  locomo       LoCoMo questions (categories 1-4) against their conversation's
               turns, evidence turns
  longmemeval  LongMemEval questions (no abstentions) against all 940 sessions
               pooled, evidence turns
  mixed        the ripgrep repository and LongMemEval's sessions in one store,
               as a project's store holds code and sessions; both sets'
               questions asked of it, scored as parts mixed/ripgrep and
               mixed/longmemeval, a turn counting against a code question
               and a file against a conversation question (no economy)

Your own repository: --queries FILE --corpus DIR, where each line of FILE is
{"id": "...", "query": "...", "relevant": ["path/in/DIR.go", ...]} (the
gocommits and ripgrep shape; a "prefix" field is never searched). Code sets
are indexed as engram index indexes a repository (its ignore files, skip
rules and chunking) and file rankings are scored on distinct files: a
file's first chunk places it, its other chunks count for nothing.

Conversations are stored as agents' sessions are (engram add): each turn as
a user prompt or an assistant response of the agent "claude", in order,
with its text alone. Each store is embedded with the configured embedder
(embed.provider; the corpus model is trained on the set's own corpus)
before the questions, and every question is asked in each --mode: lexical
only, vector only, hybrid (fused as retrieve.fusion says;
hybrid:FUSION:LEXICAL:VECTOR tries other fusions), and bm25, a plain BM25
over whole files or turns (k1 1.2, b 0.75, identifiers split, path words
counted three times, stop words dropped on conversations): the baseline,
built in memory from the same corpus. With a re-ranker configured
([rerank]), mode rerank is hybrid re-ranked by it, and is among the
default modes. Latency is measured per question, in this process, with the
stores warm.

Two checks of the ranking follow the scores. "limit moves top 10": the
share of questions whose first ten distinct items change when 25 results
are asked for instead of 200 (compared over the shorter list), with the
MRR at 25 and the latency of a search for 10 hits, what an agent asks by
default (the scores' latency is of searches for 200 or more); and on code
sets "test/doc first": the share of questions whose
first file is a test, doc or changelog (Go _test.go, testdata/, Rust
tests/ and _test.rs, CHANGELOG*, RELEASE*, NEWS*, .md, .txt, doc
directories).

On the conversation sets, --economy measures pre-fetch: the block engram
injects with each question, capped at each budget, built as configured
("default") and packed with the best hits to the budget, no floor
("packed"), against the tokens of the whole conversation: how much of the
evidence each gets in how many tokens, and the share of questions whose
block carries any. The default policy is also asked questions whose answer
is not in the store, and should inject nothing: each LoCoMo question asked
of the next conversation, and every other LongMemEval question asked of a
store of the pool without its answer sessions; "false injection" is the
share of those that got a block. --confidence measures what pre-fetch's confidence
means on each set: of the candidates pre-fetch considers for a question, how
many in each confidence range hold a relevant item. Both use pre-fetch as
configured, the re-ranker included.

--off leaves out search stages (retrieve.off), to measure what each gains
or costs: run once without and once per stage.

--postgres runs the sets on PostgreSQL instead of SQLite: each store is
a database of its own, made for the run (engram_eval_SET_STORE_RANDOM) on
the server of the URL, whose user may create databases (its password, if
any, from ENGRAM_STORE_PASSWORD, PGPASSWORD or ~/.pgpass as for a store),
and dropped after it unless --keep-stores. $ENGRAM_EVAL_POSTGRES is its
default. The output names the backend the sets ran on.

--bench-dir defaults to $ENGRAM_BENCH_DIR, else ../shared/bench from the
project. A benchmark set whose data is missing is reported and skipped
(and a run that scores nothing at all fails). Bad
input (a queries file or corpus that is missing, empty or malformed, a
relevant file that is not in the corpus) is an error naming the file and
line, before anything is scored.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			ctx := cmd.Context()
			if len(modes) == 0 || slices.Contains(modes, "") {
				return usagef("--mode: name the modes to score (%s), none empty", "lexical, vector, hybrid, rerank, bm25")
			}
			if cmd.Flags().Changed("set") && (len(sets) == 0 || slices.ContainsFunc(sets, func(s string) bool { return !slices.Contains(eval.SetNames(), s) })) {
				return usagef("--set %s: the sets are %s", strings.Join(sets, ","), strings.Join(eval.SetNames(), ", "))
			}
			for _, n := range r.economy {
				if n < 0 {
					return usagef("--economy %d: a budget is tokens, 0 for none", n)
				}
			}
			if r.queries != "" {
				for _, name := range []string{"non-test", "goroot"} {
					if cmd.Flags().Changed(name) {
						return usagef("--%s is gocommits'; with --queries and --corpus, your set is the one scored", name)
					}
				}
			}
			for _, m := range modes {
				em, err := parseEvalMode(m)
				if err != nil {
					return usagef("--mode: %v", err)
				}
				r.modes = append(r.modes, em)
			}
			if !cmd.Flags().Changed("mode") && a.reranker() != nil {
				r.modes = append(r.modes, evalMode{name: "rerank", mode: retrieve.ModeHybrid, rerank: true})
			}
			if err := retrieve.CheckStages(r.off); err != nil {
				return usagef("--off: %v", err)
			}
			if (r.queries == "") != (r.corpus == "") {
				return usagef("--queries and --corpus go together: a queries file and the directory it searches")
			}
			if r.queries != "" && cmd.Flags().Changed("set") {
				return usagef("--set names benchmark sets; with --queries and --corpus, your set is the one scored")
			}
			benchPath = a.benchSets(benchPath)
			if len(sets) == 0 {
				sets = eval.SetNames()
			}
			// Every set is loaded, and so checked, before any is scored:
			// bad input stops the run before a score is printed.
			loaded, err := a.loadEvalSets(ctx, r, benchPath, sets)
			defer func() {
				for _, s := range loaded {
					err = errors.Join(err, s.Close())
				}
			}()
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("postgres") {
				pgURL = a.getenv(evalPostgresEnv)
			}
			if pgURL != "" && !config.IsPostgresURL(pgURL) {
				return usagef("--postgres: %q is not a postgres:// URL", config.RedactStore(pgURL))
			}
			if r.stores, err = newEvalStores(a, pgURL, keep); err != nil {
				return err
			}
			d, cleanup, err := benchDir(dir)
			if err != nil {
				return err
			}
			if keep && dir == "" && pgURL == "" {
				fmt.Fprintf(a.stderr, "stores kept in %s\n", d)
			} else {
				defer cleanup()
			}
			backend := r.stores.backend()
			fmt.Fprintf(a.stderr, "backend: %s\n", backend)
			all := evalResults{Backend: backend, Results: []evalRow{}, Economy: []economyRow{}, Confidence: []confidenceRow{}}
			for _, set := range loaded {
				sd, err := scratchDir(d, set.Name)
				if err != nil {
					return err
				}
				res, err := a.evalSet(ctx, set, sd, r)
				if err != nil {
					return fmt.Errorf("%s: %w", set.Name, err)
				}
				all.Results = append(all.Results, res.Results...)
				all.Economy = append(all.Economy, res.Economy...)
				all.Confidence = append(all.Confidence, res.Confidence...)
			}
			if len(all.Results) == 0 {
				// Every mode skipped (no embedder, a corpus too small to
				// train one): an empty table is not a result.
				return errors.New("nothing was scored: every set and mode asked for was skipped (the lines above say why)")
			}
			if jsonOut {
				return writeJSON(a.stdout, all)
			}
			fmt.Fprintf(a.stdout, "backend: %s\n\n", backend)
			printEval(a, all.Results, byKind)
			printChecks(a, all.Results)
			printEconomy(a, all.Economy)
			printConfidence(a, all.Confidence)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&benchPath, "bench-dir", "", "the bench folder (default $ENGRAM_BENCH_DIR, else ../shared/bench)")
	f.StringVar(&r.goroot, "goroot", "", "the Go tree gocommits searches (default: go env GOROOT)")
	f.BoolVar(&r.nonTest, "non-test", false, "gocommits over the non-test .go files only (the set's original corpus, copied to a temporary directory), not the whole tree")
	f.StringSliceVar(&sets, "set", nil, "benchmark sets to run (default all: "+strings.Join(eval.SetNames(), ", ")+")")
	f.StringVar(&r.queries, "queries", "", "your own set: a JSON Lines file of queries with their relevant files (needs --corpus)")
	f.StringVar(&r.corpus, "corpus", "", "your own set: the repository the --queries are asked of, indexed whole")
	f.StringVar(&dir, "dir", "", "directory for the stores (default: a temporary one, removed after)")
	f.StringVar(&pgURL, "postgres", "", "run the sets on PostgreSQL: the URL of a user who may create databases, each store a database of its own (default $"+evalPostgresEnv+")")
	f.BoolVar(&keep, "keep-stores", false, "keep the stores after the run: the temporary directory, or the PostgreSQL databases")
	f.BoolVar(&jsonOut, "json", false, "print the results as JSON")
	f.BoolVar(&byKind, "by-kind", false, "also print recall@10 by question kind")
	f.StringSliceVar(&modes, "mode", []string{"lexical", "vector", "hybrid", "bm25"}, "retrieval modes to score: lexical, vector, hybrid, hybrid:FUSION:LEXICAL:VECTOR, rerank, bm25 (the baseline)")
	f.IntSliceVar(&r.economy, "economy", []int{1000, 2000, 4000}, "pre-fetch budgets (tokens) to measure on conversation sets; 0 for none")
	f.BoolVar(&r.confidence, "confidence", true, "measure how often pre-fetch candidates of each confidence are relevant")
	f.StringSliceVar(&r.off, "off", nil, "search stages to leave out, to measure what each gains or costs: "+strings.Join(retrieve.Stages(), ", "))
	f.StringVar(&r.dump, "dump", "", "write each question's top 10 with the relevant items to files with this prefix")
	_ = f.MarkHidden("dump")
	return cmd
}

// evalRun is what engram eval was asked to do.
type evalRun struct {
	modes []evalMode
	// goroot is the Go tree of gocommits; nonTest limits it to non-test
	// .go files.
	goroot  string
	nonTest bool
	// queries and corpus are the user's own set.
	queries, corpus string
	dump            string
	economy         []int
	confidence      bool
	// off names search stages left out (retrieve.Options.Off).
	off []string
	// stores makes the stores, in the backend the run is on.
	stores *evalStores
}

// loadEvalSets loads the user's set, or the named benchmark sets (a
// benchmark set whose data is missing is skipped with a message). On an
// error it returns the sets loaded so far, for the caller to close.
func (a *app) loadEvalSets(ctx context.Context, r evalRun, benchPath string, names []string) ([]*eval.Set, error) {
	if r.queries != "" {
		abs, err := filepath.Abs(r.corpus)
		if err != nil {
			return nil, err
		}
		set, err := eval.LoadCode(filepath.Base(abs), r.queries, abs)
		if err != nil {
			return nil, err
		}
		return []*eval.Set{set}, nil
	}
	var sets []*eval.Set
	for _, name := range names {
		root := r.goroot
		if name == eval.GoCommits && root == "" {
			out, err := exec.CommandContext(ctx, "go", "env", "GOROOT").Output()
			if err != nil {
				fmt.Fprintf(a.stderr, "%s: skipped: no --goroot and no go command (%v)\n", name, err)
				continue
			}
			root = strings.TrimSpace(string(out))
		}
		set, err := eval.Load(name, benchPath, root)
		if errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(a.stderr, "%s: skipped: data not found under %s (set --bench-dir or ENGRAM_BENCH_DIR): %v\n", name, benchPath, err)
			continue
		}
		if err != nil {
			return sets, err
		}
		sets = append(sets, set)
		if name == eval.GoCommits && r.nonTest {
			set.Name += "-nontest"
			if err := set.Narrow(eval.NonTestGo); err != nil {
				return sets, err
			}
		}
	}
	return sets, nil
}

// evalDeadline bounds a search in engram eval; latency is reported, not
// enforced.
const evalDeadline = time.Minute

// Hits asked of engram per question. Scoring asks for evalHits and, when
// they hold fewer than evalDistinct distinct items (a few files split into
// many chunks), again for twice as many, up to evalMaxHits (retrieve's
// bound). The limit check compares the first ten items of evalHits hits
// with those of evalFewHits.
const (
	evalHits     = 200
	evalFewHits  = 25
	evalMaxHits  = 1000
	evalDistinct = 20 // the deepest recall cut-off, eval.Ks
	evalTop      = 10
)

// evalRow is one set scored by one retrieval mode.
type evalRow struct {
	Set       string             `json:"set"`
	Mode      string             `json:"mode"`
	Questions int                `json:"questions"`
	Items     int                `json:"items"`
	Recall5   float64            `json:"recall_at_5"`
	Recall10  float64            `json:"recall_at_10"`
	Recall20  float64            `json:"recall_at_20"`
	MRR       float64            `json:"mrr"`
	NDCG10    float64            `json:"ndcg_at_10"`
	P50ms     float64            `json:"p50_ms"`
	P95ms     float64            `json:"p95_ms"`
	P99ms     float64            `json:"p99_ms"`
	ByKind    map[string]float64 `json:"recall_at_10_by_kind,omitempty"`
	IngestSec float64            `json:"ingest_seconds"`
	EmbedSec  float64            `json:"embed_seconds"`
	Model     string             `json:"model,omitempty"`
	// DistractorFirst is, on a code set, the share of questions whose
	// first file is a test, doc or changelog (eval.Classify).
	DistractorFirst *float64 `json:"test_doc_first,omitempty"`
	// LimitMoved is the share of questions whose first ten distinct items
	// differ between evalFewHits and evalHits hits asked for, MRRFew the
	// MRR of the evalFewHits answers (engram's modes only).
	LimitMoved *float64 `json:"limit_moves_top10,omitempty"`
	MRRFew     *float64 `json:"mrr_at_25_hits,omitempty"`
	// P50ms10 and P95ms10 are the latency of a search for 10 hits, the
	// default an agent gets (engram's modes only).
	P50ms10 *float64 `json:"p50_ms_at_10_hits,omitempty"`
	P95ms10 *float64 `json:"p95_ms_at_10_hits,omitempty"`
}

// evalMode is a retrieval mode, with a fusion of its own for tuning:
// hybrid:rrf:0.5:0.5 is RRF with lexical and vector weights 0.5.
type evalMode struct {
	name   string
	mode   retrieve.Mode
	fusion *retrieve.FuseOptions
	// rerank has the configured re-ranker order the hybrid hits.
	rerank bool
	// bm25 is the plain BM25 baseline, not engram.
	bm25 bool
}

func parseEvalMode(s string) (evalMode, error) {
	switch s {
	case "rerank":
		return evalMode{name: s, mode: retrieve.ModeHybrid, rerank: true}, nil
	case "bm25":
		return evalMode{name: s, bm25: true}, nil
	}
	parts := strings.Split(s, ":")
	m, err := retrieve.ParseMode(parts[0])
	if err != nil || len(parts) == 1 {
		return evalMode{name: s, mode: m}, err
	}
	if m != retrieve.ModeHybrid || len(parts) != 4 {
		return evalMode{}, fmt.Errorf("%q: want hybrid:FUSION:LEXICAL_WEIGHT:VECTOR_WEIGHT", s)
	}
	f, err := retrieve.ParseFusion(parts[1])
	if err != nil {
		return evalMode{}, err
	}
	lw, err1 := strconv.ParseFloat(parts[2], 64)
	vw, err2 := strconv.ParseFloat(parts[3], 64)
	finite := func(w float64) bool { return !math.IsNaN(w) && !math.IsInf(w, 0) && w >= 0 }
	if err1 != nil || err2 != nil || !finite(lw) || !finite(vw) {
		return evalMode{}, fmt.Errorf("%q: the weights must be numbers, 0 or more", s)
	}
	return evalMode{name: s, mode: m, fusion: &retrieve.FuseOptions{Method: f, LexicalWeight: lw, VectorWeight: vw}}, nil
}

// positive returns the positive numbers of ns.
func positive(ns []int) []int {
	var out []int
	for _, n := range ns {
		if n > 0 {
			out = append(out, n)
		}
	}
	return out
}

// evalResults are what engram eval measures on the sets.
type evalResults struct {
	// Backend is the store backend the sets ran on: sqlite or postgres.
	Backend    string          `json:"backend"`
	Results    []evalRow       `json:"results"`
	Economy    []economyRow    `json:"economy"`
	Confidence []confidenceRow `json:"confidence"`
}

// evalCorpus is one store of a set, loaded: a code set's repository, or a
// conversation set's corpus of turns.
type evalCorpus struct {
	eng *engine.Engine
	// shared maps a turn's entry ID to the turns with its content.
	shared map[string][]string
	// files are the paths a code set's store holds as current.
	files []string
}

// evalSet loads a set's corpora into stores under dir (a scratchDir) and
// scores each retrieval mode.
func (a *app) evalSet(ctx context.Context, set *eval.Set, dir string, r evalRun) (out evalResults, err error) {
	corpora := map[string]*evalCorpus{}
	var closers []func() error
	defer func() {
		for _, c := range closers {
			err = errors.Join(err, c())
		}
	}()
	start := time.Now()
	items := 0
	names := make([]string, 0, len(set.Corpora))
	for name := range set.Corpora {
		names = append(names, name)
	}
	if set.Code {
		names = []string{eval.Repo}
	}
	sort.Strings(names)
	for _, name := range names {
		st, closeStore, err := r.stores.open(ctx, dir, set.Name, name)
		if err != nil {
			return out, err
		}
		closers = append(closers, closeStore)
		opts := a.engineOptions()
		opts.KeepSecrets = true // the sets are public data: store them as they are
		// Quality is measured on complete answers: a search that hits the
		// deadline (on a loaded machine) would score a degraded result.
		opts.Retrieve.Deadline = evalDeadline
		opts.Retrieve.Off = append(opts.Retrieve.Off, r.off...)
		eng, err := engine.New(st, opts)
		if err != nil {
			return out, err
		}
		c := &evalCorpus{eng: eng}
		if set.Code {
			if c.files, err = a.indexCodeSet(ctx, eng, set); err != nil {
				return out, err
			}
			items += len(c.files)
		}
		// A mixed set's repository holds sessions too (eval.Mix).
		if turns := set.Corpora[name]; len(turns) > 0 {
			if c.shared, err = ingest(ctx, eng, turns); err != nil {
				return out, fmt.Errorf("load %s: %w", name, err)
			}
			items += len(turns)
		}
		corpora[name] = c
	}
	ingestTime := time.Since(start)
	fmt.Fprintf(a.stderr, "%s: %d items in %d corpora loaded in %v; %d questions\n", set.Name, items, len(names),
		ingestTime.Round(time.Millisecond), len(set.Questions))

	start = time.Now()
	model, tooSmall := "", false
	var chunks int64
	for _, name := range names {
		eng := corpora[name].eng
		// Progress, for embedders that take minutes (a remote one, or the
		// corpus model on a large set): a bar on a terminal, a line every
		// 10 s otherwise.
		p := newEmbedProgress(a.stderr)
		p.label, p.every = set.Name, 10*time.Second
		if len(names) > 1 {
			p.label += " " + name
		}
		rep, err := eng.Embed(ctx, p.update)
		p.finish()
		if err != nil {
			return out, fmt.Errorf("embed %s: %w", name, err)
		}
		if model == "" {
			model = rep.Model
		}
		tooSmall = tooSmall || rep.TooSmall
		chunks += rep.Embedded
		// Load the vectors now: the latency measured is a warm process's.
		h, err := eng.Hybrid(ctx)
		if err != nil {
			return out, err
		}
		if err := h.Warm(ctx); err != nil {
			return out, err
		}
	}
	embedTime := time.Since(start)
	if model != "" {
		fmt.Fprintf(a.stderr, "%s: %s chunks embedded in %v (%.0f chunks/s) with %s\n", set.Name, commas(chunks),
			embedTime.Round(time.Millisecond), float64(chunks)/embedTime.Seconds(), model)
	}

	engines := map[string]*engine.Engine{}
	shared := map[string]map[string][]string{}
	for name, c := range corpora {
		engines[name], shared[name] = c.eng, c.shared
	}
	// A mixed set's parts are scored each on its own, over the one store.
	parts := set.Parts()
	for _, mode := range r.modes {
		switch {
		case mode.mode != retrieve.ModeLexical && !mode.bm25 && model == "" && tooSmall:
			fmt.Fprintf(a.stderr, "%s: mode %s skipped: the corpus is too small to train the corpus model on (it needs %d chunks)\n", set.Name, mode.name, lsa.MinDocs)
			continue
		case mode.mode != retrieve.ModeLexical && !mode.bm25 && model == "":
			fmt.Fprintf(a.stderr, "%s: mode %s skipped: no embedder (embed.provider %s)\n", set.Name, mode.name, a.cfg.Embed.Provider)
			continue
		case mode.rerank && a.reranker() == nil:
			fmt.Fprintf(a.stderr, "%s: mode %s skipped: no re-ranker (rerank.provider %s)\n", set.Name, mode.name, a.cfg.Rerank.Provider)
			continue
		}
		for _, part := range parts {
			var row evalRow
			var err error
			if mode.bm25 {
				row, err = a.evalBM25(ctx, part, corpora)
			} else {
				row, err = a.evalMode(ctx, part, corpora, mode, r.dump)
			}
			if err != nil {
				return out, err
			}
			row.Items, row.IngestSec, row.EmbedSec = items, ingestTime.Seconds(), embedTime.Seconds()
			if !mode.bm25 {
				row.Model = model
			}
			out.Results = append(out.Results, row)
		}
	}
	economy := positive(r.economy)
	if set.Mixed() && len(economy) > 0 {
		// Its negatives would be stores of sessions without the code.
		fmt.Fprintf(a.stderr, "%s: pre-fetch economy not measured on a mixed set\n", set.Name)
		economy = nil
	}
	econStart := time.Now()
	if out.Economy, err = a.evalEconomy(ctx, set, engines, shared, economy, filepath.Join(dir, "negatives"), r); err != nil {
		return out, fmt.Errorf("economy: %w", err)
	}
	if len(out.Economy) > 0 {
		fmt.Fprintf(a.stderr, "%s: pre-fetch economy at %s tokens in %v\n", set.Name, joinInts(economy), time.Since(econStart).Round(time.Millisecond))
	}
	if r.confidence {
		for _, part := range parts {
			rows, err := a.evalConfidence(ctx, part, engines, shared)
			if err != nil {
				return out, fmt.Errorf("confidence: %w", err)
			}
			out.Confidence = append(out.Confidence, rows...)
		}
	}
	return out, nil
}

// evalMode scores one of engram's retrieval modes on a set, then checks
// how its first ten items depend on the number of hits asked for.
func (a *app) evalMode(ctx context.Context, set *eval.Set, corpora map[string]*evalCorpus, mode evalMode, dump string) (evalRow, error) {
	searchers := map[string]*retrieve.Hybrid{}
	for name, c := range corpora {
		h, err := c.eng.Hybrid(ctx)
		if err != nil {
			return evalRow{}, err
		}
		if mode.fusion != nil {
			opts := a.engineOptions().Retrieve
			opts.Fusion = *mode.fusion
			opts.Deadline = evalDeadline
			h = retrieve.NewHybrid(c.eng.Store(), h.Embedder(), opts)
			if err := h.Warm(ctx); err != nil {
				return evalRow{}, err
			}
		}
		searchers[name] = h
	}
	// search returns the first k distinct items of limit hits.
	search := func(ctx context.Context, q eval.Question, limit, k int) (items []string, full bool, err error) {
		res, err := searchers[q.Corpus].Search(ctx, retrieve.Query{Text: q.Text, Limit: limit, Mode: mode.mode, NoRerank: !mode.rerank, Now: q.Time})
		if err != nil {
			return nil, false, err
		}
		if res.Degraded {
			return nil, false, fmt.Errorf("question %s: search degraded: %v", q.ID, res.Faults)
		}
		hits := make([]store.Hit, len(res.Hits))
		for i, h := range res.Hits {
			hits[i] = h.Hit
		}
		return itemsOf(hits, corpora[q.Corpus].shared, k), len(hits) == limit, nil
	}
	rec := newDump(set, dump != "")
	top := map[string][]string{} // question -> first ten items of evalHits hits
	retr := func(ctx context.Context, q eval.Question, k int) ([]string, error) {
		for limit := evalHits; ; limit = min(2*limit, evalMaxHits) {
			got, full, err := search(ctx, q, limit, k)
			if err != nil {
				return nil, err
			}
			if limit == evalHits {
				top[q.ID] = got[:min(evalTop, len(got))]
			}
			if len(got) >= min(k, evalDistinct) || !full || limit == evalMaxHits {
				rec.add(q, got)
				return got, nil
			}
		}
	}
	modeStart := time.Now()
	m, err := eval.Run(ctx, set, retr)
	if err != nil {
		return evalRow{}, err
	}
	fmt.Fprintf(a.stderr, "%s: %s: %d questions in %v, recall@10 %.3f\n", set.Name, mode.name, m.Questions,
		time.Since(modeStart).Round(time.Millisecond), m.Recall[10])
	if err := rec.write(fmt.Sprintf("%s.%s.%s.json", dump, strings.ReplaceAll(set.Name, "/", "-"), mode.name)); err != nil {
		return evalRow{}, err
	}
	// The limit check: the same questions, evalFewHits hits each; and the
	// latency of the search an agent makes, retrieve.DefaultLimit hits.
	moved, mrr := 0, 0.0
	var agentLatency []time.Duration
	for _, q := range set.Questions {
		start := time.Now()
		if _, _, err := search(ctx, q, retrieve.DefaultLimit, evalTop); err != nil {
			return evalRow{}, err
		}
		agentLatency = append(agentLatency, time.Since(start))
		few, _, err := search(ctx, q, evalFewHits, eval.Depth)
		if err != nil {
			return evalRow{}, err
		}
		if !eval.SameRanking(top[q.ID], few, evalTop) {
			moved++
		}
		mrr += reciprocalRank(few, q.Relevant)
	}
	row := rowOf(set, mode.name, m)
	if n := float64(len(set.Questions)); n > 0 {
		row.LimitMoved, row.MRRFew = ptr(float64(moved)/n), ptr(mrr/n)
		l := bench.Summarize(agentLatency)
		row.P50ms10, row.P95ms10 = ptr(msf(l.P50)), ptr(msf(l.P95))
	}
	return row, nil
}

// rowOf makes the row of a mode's metrics.
func rowOf(set *eval.Set, mode string, m eval.Metrics) evalRow {
	row := evalRow{Set: set.Name, Mode: mode, Questions: m.Questions,
		Recall5: m.Recall[5], Recall10: m.Recall[10], Recall20: m.Recall[20], MRR: m.MRR, NDCG10: m.NDCG10,
		P50ms: msf(m.Latency.P50), P95ms: msf(m.Latency.P95), P99ms: msf(m.Latency.P99), ByKind: m.ByKind}
	if set.Code {
		row.DistractorFirst = ptr(m.DistractorFirst)
	}
	return row
}

// reciprocalRank is 1/rank of the first relevant item of got, 0 if none.
func reciprocalRank(got, relevant []string) float64 {
	for i, id := range got {
		if slices.Contains(relevant, id) {
			return 1 / float64(i+1)
		}
	}
	return 0
}

func ptr[T any](v T) *T { return &v }

// evalDump records each question's answers, for looking into failures.
type evalDump struct {
	on   bool
	text map[string]string // corpus/item -> text
	rows []map[string]any
}

func newDump(set *eval.Set, on bool) *evalDump {
	d := &evalDump{on: on}
	if !on {
		return d
	}
	d.text = map[string]string{}
	for c, items := range set.Corpora {
		for _, it := range items {
			d.text[c+"/"+it.ID] = it.Text
		}
	}
	return d
}

func (d *evalDump) add(q eval.Question, got []string) {
	if !d.on {
		return
	}
	show := func(ids []string) []string {
		out := make([]string, len(ids))
		for i, id := range ids {
			t := d.text[q.Corpus+"/"+id]
			if r := []rune(t); len(r) > 300 {
				t = string(r[:300])
			}
			out[i] = id + " " + t
		}
		return out
	}
	top := got[:min(10, len(got))]
	d.rows = append(d.rows, map[string]any{"id": q.ID, "kind": q.Kind, "question": q.Text,
		"relevant": show(q.Relevant), "top": show(top), "ranked": got})
}

func (d *evalDump) write(path string) error {
	if !d.on {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(writeJSON(f, d.rows), f.Close())
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// evalAgent is the agent a conversation set's sessions are stored as: a
// real agent's name, as hooks and engram add store sessions, never a
// speaker's.
const evalAgent = "claude"

// ingest stores a conversation corpus as an agent's sessions are stored
// (engram add): each turn a user prompt or an assistant response of
// evalAgent, in order, its turn numbered by the store. It returns the
// items of each entry: turns with the same content are one entry, stored
// once (LongMemEval's pool repeats sessions).
func ingest(ctx context.Context, eng *engine.Engine, items []eval.Item) (shared map[string][]string, err error) {
	shared = map[string][]string{}
	recs := make([]engine.Record, 0, len(items))
	for _, it := range items {
		typ := store.UserPrompt
		if it.Role == "assistant" {
			typ = store.AgentResponse
		}
		recs = append(recs, engine.Record{Session: it.Session, Agent: evalAgent, Type: typ, Content: []byte(it.Text),
			Time: it.Time, MsgID: it.ID})
	}
	err = eng.AddAll(ctx, recs, 2000, func(first int, res []engine.AddResult) error {
		for i, r := range res {
			shared[r.ID] = append(shared[r.ID], recs[first+i].MsgID)
		}
		return nil
	})
	return shared, err
}

// itemsOf turns hits into distinct items, best first: a file's path for
// a hit in a file, a turn's ID for a hit in a turn (a mixed set's store
// holds both). A turn's hit is also a hit for every other turn with the
// same content (shared: entry ID to items), as a search over turns stored
// separately would rank them together.
func itemsOf(hits []store.Hit, shared map[string][]string, k int) []string {
	var out []string
	seen := map[string]bool{}
	add := func(id string) {
		if id != "" && !seen[id] && len(out) < k {
			seen[id] = true
			out = append(out, id)
		}
	}
	for _, h := range hits {
		if len(h.Occurrence.Files) > 0 {
			add(h.Occurrence.Files[0])
		} else {
			add(h.Occurrence.MsgID)
			for _, id := range shared[h.Chunk.EntryID] {
				add(id)
			}
		}
		if len(out) == k {
			break
		}
	}
	return out
}

func printEval(a *app, rows []evalRow, byKind bool) {
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "set\tmode\tquestions\tR@5\tR@10\tR@20\tMRR\tnDCG@10\tp50 ms\tp95 ms\tp99 ms\t")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.2f\t%.2f\t%.2f\t\n", r.Set, r.Mode, r.Questions,
			r.Recall5, r.Recall10, r.Recall20, r.MRR, r.NDCG10, r.P50ms, r.P95ms, r.P99ms)
	}
	_ = w.Flush()
	if !byKind {
		return
	}
	for _, r := range rows {
		kinds := make([]string, 0, len(r.ByKind))
		for k := range r.ByKind {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		var parts []string
		for _, k := range kinds {
			parts = append(parts, fmt.Sprintf("%s %.3f", k, r.ByKind[k]))
		}
		fmt.Fprintf(a.stdout, "%s %s R@10 by kind: %s\n", r.Set, r.Mode, strings.Join(parts, ", "))
	}
}
