package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/bench"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/postgres"
	"github.com/engramhq/engram/internal/store/sqlite"
)

func (a *app) benchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure engram, each figure beside a baseline measured in the same run",
		Long: `Measure engram, each figure beside a baseline measured in the same run.
Most benchmarks use a synthetic corpus of agent sessions (deterministic,
with realistic message sizes and word frequencies); trajectories, lossless,
assemble, compaction and import read real data from the shared bench folder
instead. Stores are created under --dir (default: a new temporary
directory, removed afterwards); the project's own store is not touched.
BENCHMARKS.md records the figures and the commands.`,
	}
	cmd.AddCommand(a.benchIngestCmd(), a.benchSearchCmd(), a.benchIndexCmd(), a.benchHybridCmd(), a.benchArchiveCmd(), a.benchToolsCmd(), a.benchServeCmd(), a.benchShedCmd(), a.benchTrajectoriesCmd(), a.benchLosslessCmd(), a.benchAssembleCmd(), a.benchHooksCmd(), a.benchImportCmd(), a.benchCompactionCmd(), a.benchProxyCmd())
	return cmd
}

// benchDir returns the directory for bench stores and a cleanup function.
func benchDir(dir string) (string, func(), error) {
	if dir != "" {
		return dir, func() {}, claimDir(dir)
	}
	d, err := os.MkdirTemp("", "engram-bench-")
	return d, func() { _ = os.RemoveAll(d) }, err
}

// atLeast returns a PreRunE that refuses, as a usage error, a flag of
// the command under its least value: an int flag's, or a duration's in
// nanoseconds (1: any time above zero). A benchmark of -5 messages or a
// batch of 0 would crash or never end.
func atLeast(least map[string]int64) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		var bad []string
		for _, name := range slices.Sorted(maps.Keys(least)) {
			f := cmd.Flags().Lookup(name)
			if f == nil {
				panic("atLeast: no flag --" + name) // ours: the command's tests catch it
			}
			var v int64
			switch f.Value.Type() {
			case "int":
				n, _ := cmd.Flags().GetInt(name)
				v = int64(n)
			case "duration":
				d, _ := cmd.Flags().GetDuration(name)
				v = int64(d)
			default:
				panic("atLeast: --" + name + " is a " + f.Value.Type())
			}
			if v >= least[name] {
				continue
			}
			switch {
			case f.Value.Type() == "duration":
				bad = append(bad, fmt.Sprintf("--%s %s: want a time above zero", name, f.Value))
			default:
				bad = append(bad, fmt.Sprintf("--%s %s: want %d or more", name, f.Value, least[name]))
			}
		}
		if len(bad) > 0 {
			return usagef("%s", strings.Join(bad, "; "))
		}
		return nil
	}
}

// scratchMark marks a directory engram made for a run's stores or files,
// which a later run may empty.
const scratchMark = ".engram-scratch"

// claimDir makes dir a benchmark's --dir: new, empty, or one an earlier
// run claimed (it holds scratchMark). A run writes and replaces its stores
// there (engram.db among them): a directory holding anything else (a
// project, the data directory of real stores) is refused.
func claimDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, scratchMark)); err == nil {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		return fmt.Errorf("--dir %s holds files an earlier run did not make (%s, ...): give a new or empty directory; a benchmark writes and replaces its stores there", dir, entries[0].Name())
	}
	return os.WriteFile(filepath.Join(dir, scratchMark), []byte("made by engram for a benchmark's stores; emptied by the next run\n"), 0o644)
}

// scratchDir returns parent/name emptied for a run: made with a mark, or
// emptied if it holds the mark of an earlier run. Anything else there (a
// user's --dir holding a folder of that name, the corpus itself) is
// refused, never removed. A name that is not one plain path element
// (".", "/") is "corpus".
func scratchDir(parent, name string) (string, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) {
		name = "corpus"
	}
	dir := filepath.Join(parent, name)
	switch _, err := os.Lstat(dir); {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return "", err
	default:
		if _, err := os.Stat(filepath.Join(dir, scratchMark)); err != nil {
			return "", fmt.Errorf("%s exists and is not a directory an earlier run made (it has no %s): choose another --dir; engram removes only what it made", dir, scratchMark)
		}
		if err := os.RemoveAll(dir); err != nil {
			return "", err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, scratchMark), []byte("made by engram for a benchmark's stores; emptied by the next run\n"), 0o644)
}

func (a *app) benchIngestCmd() *cobra.Command {
	var (
		messages, batch int
		dir, pgURL      string
		seed            uint64
	)
	cmd := &cobra.Command{
		Use:     "ingest",
		PreRunE: atLeast(map[string]int64{"messages": 1, "batch": 1}),
		Short:   "Ingest throughput of engram add against plain FTS5 inserts",
		Long: `Generate --messages chat messages and tool events, encode them as the JSON
Lines that engram add reads, and time what engram add does with them:
reading and checking them, then counting, chunking and storing them in
batches of --batch into a new store, each batch prepared while the one
before commits. The baseline, in the
same run, inserts the same contents in the same batches into a bare FTS5 table
with the same driver and durability settings.

With --postgres (or ENGRAM_BENCH_POSTGRES), engram add then stores the same
JSON Lines in the same batches in a new PostgreSQL database
(engram_bench_ingest, dropped after), in the same run.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			ctx := cmd.Context()
			d, cleanup, err := benchDir(dir)
			if err != nil {
				return err
			}
			defer cleanup()
			corpus := bench.NewCorpus(seed)
			var jsonl bytes.Buffer
			enc := json.NewEncoder(&jsonl)
			contents := make([]string, messages)
			var contentBytes int64
			for i := range messages {
				m := corpus.Next()
				contents[i] = m.Content
				contentBytes += int64(len(m.Content))
				if err := enc.Encode(map[string]string{"session": m.Session, "agent": m.Agent, "type": string(m.Type), "content": m.Content}); err != nil {
					return err
				}
			}
			fmt.Fprintf(a.stdout, "corpus: %d messages, %s of content (mean %d bytes), %s of JSON Lines; batches of %d; %d CPUs\n",
				messages, humanBytes(contentBytes), contentBytes/int64(max(1, messages)), humanBytes(int64(jsonl.Len())), batch, runtime.GOMAXPROCS(0))

			// Baseline first, so neither run warms the other's cache.
			base, err := sqlite.OpenFTSBaseline(ctx, filepath.Join(d, "baseline.db"))
			if err != nil {
				return err
			}
			start := time.Now()
			for from := 0; from < messages; from += batch {
				if err := base.Insert(ctx, contents[from:min(from+batch, messages)]); err != nil {
					return errors.Join(err, base.Close())
				}
			}
			baseTime := time.Since(start)
			if err := base.Close(); err != nil {
				return err
			}

			st, err := sqlite.Open(ctx, filepath.Join(d, "engram.db"), sqlite.Options{Logger: a.log})
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, st.Close()) }()
			sq, err := a.ingestRun(ctx, st, jsonl.Bytes(), batch)
			if err != nil {
				return err
			}
			runs := []ingestRun{sq}
			names := []string{"engram add (read JSON Lines + store)"}
			if admin := a.benchPostgres(pgURL); admin != "" {
				pst, drop, err := a.pgScratch(ctx, admin, "engram_bench_ingest")
				if err != nil {
					return err
				}
				defer func() { err = errors.Join(err, drop()) }()
				pg, err := a.ingestRun(ctx, pst, jsonl.Bytes(), batch)
				if err != nil {
					return fmt.Errorf("PostgreSQL: %w", err)
				}
				runs = append(runs, pg)
				names = append(names, "engram add, PostgreSQL")
			}

			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(w, "\tentries/s\tchunks/s\tMB/s\ttime\t")
			row := func(name string, d time.Duration, chunks int64) {
				cps := "-"
				if chunks > 0 {
					cps = fmt.Sprintf("%.0f", float64(chunks)/d.Seconds())
				}
				fmt.Fprintf(w, "%s\t%.0f\t%s\t%.1f\t%v\t\n", name, float64(messages)/d.Seconds(), cps, float64(contentBytes)/1e6/d.Seconds(), d.Round(time.Millisecond))
			}
			row("plain FTS5 INSERT (baseline)", baseTime, 0)
			for i, r := range runs {
				row(names[i], r.took, r.stats.Chunks)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "engram/baseline time: %.2fx; JSON Lines reading and checking took %v of engram's %v; %d chunks, %s tokens, store %s\n",
				sq.took.Seconds()/baseTime.Seconds(), sq.parse.Round(time.Millisecond), sq.took.Round(time.Millisecond),
				sq.stats.Chunks, commas(sq.stats.Tokens), humanBytes(sq.stats.SizeBytes))
			if len(runs) > 1 {
				pg := runs[1]
				fmt.Fprintf(a.stdout, "PostgreSQL/SQLite time: %.2fx; JSON Lines reading and checking took %v of %v; %d chunks, %s tokens, database %s\n",
					pg.took.Seconds()/sq.took.Seconds(), pg.parse.Round(time.Millisecond), pg.took.Round(time.Millisecond),
					pg.stats.Chunks, commas(pg.stats.Tokens), humanBytes(pg.stats.SizeBytes))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&messages, "messages", 100000, "messages to ingest")
	f.IntVar(&batch, "batch", 1000, "records per transaction")
	f.StringVar(&dir, "dir", "", "directory for the stores (default: a temporary one, removed after)")
	f.Uint64Var(&seed, "seed", 1, "corpus seed")
	registerPostgres(cmd, &pgURL)
	return cmd
}

// ingestRun is what engram add did with the bench's JSON Lines on one
// backend.
type ingestRun struct {
	took, parse time.Duration
	stats       store.Stats
}

// ingestRun reads jsonl as engram add does and stores it in st in batches
// of batch records.
func (a *app) ingestRun(ctx context.Context, st store.Store, jsonl []byte, batch int) (r ingestRun, err error) {
	eng, err := engine.New(st, engine.Options{Encoding: a.cfg.Tokens.Encoding, Logger: a.log})
	if err != nil {
		return r, err
	}
	start := time.Now()
	lines, err := eng.ReadJSONL(bytes.NewReader(jsonl), engine.Record{})
	if err != nil {
		return r, err
	}
	r.parse = time.Since(start)
	recs := make([]engine.Record, len(lines))
	for i, l := range lines {
		recs[i] = l.Record
	}
	if err := eng.AddAll(ctx, recs, batch, func(int, []engine.AddResult) error { return nil }); err != nil {
		return r, err
	}
	r.took = time.Since(start)
	r.stats, err = st.Stats(ctx)
	return r, err
}

func (a *app) benchSearchCmd() *cobra.Command {
	var (
		sf      storeFlags
		queries int
		limit   int
	)
	cmd := &cobra.Command{
		Use:     "search",
		PreRunE: atLeast(map[string]int64{"queries": 1, "limit": 1, "chunks": 1}),
		Short:   "Lexical search latency for rare, medium and very common words",
		Long: `Build (or, with --reuse, reopen) a store of at least --chunks chunks from the
synthetic corpus, pick query words by how many chunks hold them (rare: at most
0.01%; medium: 0.1% to 1%; very common: at least 10%; mixed: four words, one
rare, one medium, two very common), and time each query through engram's
search and through the plain FTS5 query (all words OR-ed, ranked by BM25 over
every match) on the same index, alternating. Each query set runs twice:
the first pass meets every word for the first time, the second repeats it.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			ctx := cmd.Context()
			st, _, stats, closeStore, err := a.openBenchStore(ctx, sf)
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, closeStore()) }()
			n := stats.Chunks
			seed := sf.seed
			fmt.Fprintf(a.stdout, "store: %s chunks, %s entries, %s; %d queries per band, limit %d\n",
				commas(n), commas(stats.Entries), humanBytes(stats.SizeBytes), queries, limit)
			bands := []struct {
				name   string
				lo, hi int64
			}{
				{"rare", 1, max(1, n/10000)},
				{"medium", n / 1000, n / 100},
				{"very common", n / 10, n},
			}
			words := map[string][]string{}
			for _, b := range bands {
				ws, err := st.TermsByFrequency(ctx, b.lo, b.hi, 5000)
				if err != nil {
					return err
				}
				if len(ws) == 0 {
					return fmt.Errorf("no words held by %d to %d chunks: the store is too small", b.lo, b.hi)
				}
				words[b.name] = ws
			}
			rng := rand.New(rand.NewPCG(seed, 99))
			pick := func(band string) string { ws := words[band]; return ws[rng.IntN(len(ws))] }
			sets := []struct {
				name string
				qs   []string
			}{}
			for _, b := range bands {
				var qs []string
				for range queries {
					qs = append(qs, pick(b.name))
				}
				sets = append(sets, struct {
					name string
					qs   []string
				}{b.name, qs})
			}
			var mixed []string
			for range queries {
				mixed = append(mixed, strings.Join([]string{pick("very common"), pick("rare"), pick("very common"), pick("medium")}, " "))
			}
			sets = append(sets, struct {
				name string
				qs   []string
			}{"mixed (4 words)", mixed})

			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(w, "\tengram, words new\t\t\tengram, words seen\t\t\tplain FTS5\t\t\t")
			fmt.Fprintln(w, "words\tp50\tp95\tp99\tp50\tp95\tp99\tp50\tp95\tp99\t")
			for _, set := range sets {
				// Pass 0 meets each word for the first time (its frequency
				// is counted); pass 1 repeats the queries (frequencies
				// cached, pages warm). The plain query has no state: its
				// pass 1 is reported.
				var first, again, plain []time.Duration
				for pass := range 2 {
					for _, q := range set.qs {
						t0 := time.Now()
						if _, err := st.Search(ctx, store.Query{Text: q, Limit: limit}); err != nil {
							return err
						}
						t1 := time.Now()
						if _, err := st.SearchUnplanned(ctx, q, limit); err != nil {
							return err
						}
						t2 := time.Now()
						if pass == 0 {
							first = append(first, t1.Sub(t0))
						} else {
							again = append(again, t1.Sub(t0))
							plain = append(plain, t2.Sub(t1))
						}
					}
				}
				f, o, p := bench.Summarize(first), bench.Summarize(again), bench.Summarize(plain)
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", set.name,
					ms(f.P50), ms(f.P95), ms(f.P99), ms(o.P50), ms(o.P95), ms(o.P99), ms(p.P50), ms(p.P95), ms(p.P99))
			}
			fmt.Fprintln(w, "(milliseconds)")
			return w.Flush()
		},
	}
	sf.register(cmd)
	f := cmd.Flags()
	f.IntVar(&queries, "queries", 200, "queries per band")
	f.IntVar(&limit, "limit", 10, "hits per query")
	return cmd
}

// storeFlags choose the synthetic store of a bench command.
type storeFlags struct {
	chunks int
	dir    string
	reuse  bool
	seed   uint64
}

func (sf *storeFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVar(&sf.chunks, "chunks", 100000, "chunks the store must hold")
	f.StringVar(&sf.dir, "dir", "", "directory for the store (default: a temporary one, removed after)")
	f.BoolVar(&sf.reuse, "reuse", false, "reuse a store built by an earlier run with the same --dir and --chunks")
	f.Uint64Var(&sf.seed, "seed", 1, "corpus and query seed")
}

// openBenchStore builds or reopens the synthetic store the flags describe;
// closeStore closes it and removes a temporary directory.
func (a *app) openBenchStore(ctx context.Context, sf storeFlags) (st *sqlite.Store, built buildStats, stats store.Stats, closeStore func() error, err error) {
	d, cleanup, err := benchDir(sf.dir)
	if err != nil {
		return nil, built, stats, nil, err
	}
	path := filepath.Join(d, fmt.Sprintf("search-%d.db", sf.chunks))
	st, built, err = a.benchStore(ctx, path, sf.chunks, sf.seed, sf.reuse)
	if err != nil {
		cleanup()
		return nil, built, stats, nil, err
	}
	closeStore = func() error {
		err := st.Close()
		cleanup()
		return err
	}
	if stats, err = st.Stats(ctx); err != nil {
		return nil, built, stats, nil, errors.Join(err, closeStore())
	}
	return st, built, stats, closeStore, nil
}

// openBenchStorePG builds or reopens the PostgreSQL twin of the synthetic
// store the flags describe, in the database engram_bench_chunks_N (the
// seed appended when it is not 1) on the server of admin: filled from the
// same corpus in the same batches as the SQLite file. As the file, it is
// kept after the run when --dir is given and reused with --reuse.
func (a *app) openBenchStorePG(ctx context.Context, sf storeFlags, admin string) (st *postgres.Store, built buildStats, stats store.Stats, closeStore func() error, err error) {
	name := fmt.Sprintf("engram_bench_chunks_%d", sf.chunks)
	if sf.seed != 1 {
		name += fmt.Sprintf("_s%d", sf.seed)
	}
	st, closeStore, err = a.pgKept(ctx, admin, name, sf.reuse, sf.dir != "")
	if err != nil {
		return nil, built, stats, nil, err
	}
	if built, err = a.fillBenchStore(ctx, st, sf.chunks, sf.seed); err != nil {
		return nil, built, stats, nil, errors.Join(err, closeStore())
	}
	if stats, err = st.Stats(ctx); err != nil {
		return nil, built, stats, nil, errors.Join(err, closeStore())
	}
	return st, built, stats, closeStore, nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

// removeStore removes a bench's store file left by an earlier run, with
// its WAL and shared-memory files.
func removeStore(path string) error {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// benchStore opens the store at path, filling it from the corpus until it
// holds at least chunks chunks; built is how many it added, and how long
// that took.
func (a *app) benchStore(ctx context.Context, path string, chunks int, seed uint64, reuse bool) (st *sqlite.Store, built buildStats, err error) {
	if !reuse {
		if err := removeStore(path); err != nil {
			return nil, built, err
		}
	}
	st, err = sqlite.Open(ctx, path, sqlite.Options{Logger: a.log, Search: a.searchOptions()})
	if err != nil {
		return nil, built, err
	}
	if built, err = a.fillBenchStore(ctx, st, chunks, seed); err != nil {
		return nil, built, errors.Join(err, st.Close())
	}
	return st, built, nil
}

// fillBenchStore fills st from the corpus until it holds at least chunks
// chunks, continuing the corpus where the store left off; built is how
// many it added, and how long that took. Either backend is filled with
// the same records in the same batches.
func (a *app) fillBenchStore(ctx context.Context, st store.Store, chunks int, seed uint64) (built buildStats, err error) {
	eng, err := engine.New(st, engine.Options{Encoding: a.cfg.Tokens.Encoding, Logger: a.log})
	if err != nil {
		return built, err
	}
	stats, err := st.Stats(ctx)
	if err != nil {
		return built, err
	}
	if stats.Chunks >= int64(chunks) {
		return built, nil
	}
	corpus := bench.NewCorpus(seed)
	for range stats.Entries { // continue the corpus where the store left off
		corpus.Next()
	}
	start, have, stats0 := time.Now(), stats.Chunks, stats.Chunks
	progress := newProgress(a.stderr, "building store", int64(chunks))
	const batch = 2000
	for have < int64(chunks) {
		recs := make([]engine.Record, batch)
		for i := range recs {
			m := corpus.Next()
			recs[i] = engine.Record{Session: m.Session, Agent: m.Agent, Type: m.Type, Content: []byte(m.Content)}
		}
		if _, err := eng.Add(ctx, recs); err != nil {
			return built, err
		}
		if stats, err = st.Stats(ctx); err != nil {
			return built, err
		}
		have = stats.Chunks
		progress.update(have)
	}
	built = buildStats{Chunks: have - stats0, Took: time.Since(start)}
	progress.done(fmt.Sprintf("%s chunks in %v", commas(have), built.Took.Round(time.Second)))
	return built, nil
}

// buildStats is what benchStore added to a store.
type buildStats struct {
	Chunks int64
	Took   time.Duration
}

// progress reports long work on standard error: a line rewritten in place
// on a terminal, a line every few seconds otherwise.
type progress struct {
	w        io.Writer
	what     string
	total    int64
	start    time.Time
	last     time.Time
	terminal bool
}

func newProgress(w io.Writer, what string, total int64) *progress {
	f, ok := w.(*os.File)
	return &progress{w: w, what: what, total: total, start: time.Now(), terminal: ok && isTerminal(f)}
}

func (p *progress) update(n int64) {
	every := 5 * time.Second
	if p.terminal {
		every = 200 * time.Millisecond
	}
	if time.Since(p.last) < every {
		return
	}
	p.last = time.Now()
	elapsed := time.Since(p.start)
	rate := float64(n) / elapsed.Seconds()
	line := fmt.Sprintf("%s: %s/%s (%.0f/s)", p.what, commas(n), commas(p.total), rate)
	if n > 0 && n < p.total {
		eta := time.Duration(float64(p.total-n) / rate * float64(time.Second))
		line = fmt.Sprintf("%s: %s/%s (%.0f/s, ETA %v)", p.what, commas(n), commas(p.total), rate, eta.Round(time.Second))
	}
	if p.terminal {
		fmt.Fprintf(p.w, "\r%s\033[K", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
}

func (p *progress) done(summary string) {
	if p.terminal {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, "%s: %s\n", p.what, summary)
}

// scratchStore opens a new store named name under dir (default: a new
// temporary directory) and an engine over it without an embedder; done
// closes the store and removes a temporary directory.
func scratchStore(ctx context.Context, dir, name string) (st *sqlite.Store, eng *engine.Engine, done func(), err error) {
	d, cleanup, err := benchDir(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	st, err = sqlite.Open(ctx, filepath.Join(d, name), sqlite.Options{})
	if err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	done = func() {
		_ = st.Close()
		cleanup()
	}
	eng, err = engine.New(st, engine.Options{Embed: engine.EmbedOptions{Provider: "none"}})
	if err != nil {
		done()
		return nil, nil, nil, err
	}
	return st, eng, done, nil
}
