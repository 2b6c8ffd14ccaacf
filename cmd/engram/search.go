package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/api"
	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/terms"
)

func (a *app) searchCmd() *cobra.Command {
	var (
		q       retrieve.Query
		types   []string
		turns   string
		since   string
		until   string
		mode    string
		jsonOut bool
		files   bool
		spans   int
	)
	cmd := &cobra.Command{
		Use:   "search QUERY...",
		Short: "Find stored content by meaning, words, identifiers and paths",
		Long: `Search everything stored for QUERY, best match first, by two signals fused:
lexical (BM25 over words, identifiers and paths) and vector (semantic
similarity with the configured embedder; see 'engram embed status').

Identifiers match whole and by their parts: parseHTTPRequest, parse_http_request
and ParseHTTPRequest find each other and the words parse, http and request.
Paths match by their parts. Punctuation and operators have no meaning. A
symbol or a path named exactly in the query raises the code that declares or
holds it. A query that looks back in time ("yesterday", "two weeks ago",
"last Tuesday", "in the past month") also searches that span, and its best
match from then ranks level with the best overall; the span read is shown
("looked back to"). --since and --until take precedence.

Each hit shows its fused score, then each signal: the BM25 score, its rank and
the share of the query's words the chunk holds (lex), and the cosine
similarity and its rank (vec); then its entry ID (prefix), content type, and
where it was seen (session and turn, or file and lines). 'engram show ID'
prints the whole entry. If a backend fails, the other's results are shown and
the failure is reported.

--files ranks distinct places instead of chunks: each file once (or each
other record: a message, a tool result), with its best spans (--spans, 3) and
their lines, as many places as --limit asks for however many chunks that
takes. The MCP search tool answers this way.

With a re-ranker configured ([rerank] in the config), the best rerank.depth
(50) hybrid hits are ordered by its relevance (rr), from 0 to 1, times their
boosts and speaker prior; the fused score is then no longer in order.
--no-rerank shows the fused order. If the re-ranker fails or misses
rerank.timeout (5s), the fused order is shown and the failure is reported.`,
		Example: `  engram search retry backoff
  engram search how do we handle flaky network calls
  engram search parseHTTPRequest --type tool_result,agent_response
  engram search "migration failed" --session s1 --turns 10-20 --json
  engram search token refresh --path internal/auth --mode lexical
  engram search --files how do I set a timeout on an HTTP client request`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("search needs a query")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			q.Text = strings.Join(args, " ")
			var err error
			if q.Limit, err = api.LimitRange.Check(q.Limit); err != nil {
				return &usageError{err}
			}
			if q.Mode, err = retrieve.ParseMode(mode); err != nil {
				return usagef("--mode: %v", err)
			}
			if q.Filter.Types, err = parseTypes(types); err != nil {
				return err
			}
			if q.Filter.TurnFrom, q.Filter.TurnTo, err = parseTurns(turns); err != nil {
				return err
			}
			now := time.Now()
			if q.Filter.Since, err = parseWhen("since", since, now); err != nil {
				return err
			}
			if q.Filter.Until, err = parseWhen("until", until, now); err != nil {
				return err
			}
			if !q.Filter.Since.IsZero() && !q.Filter.Until.IsZero() && q.Filter.Until.Before(q.Filter.Since) {
				return usagef("--until %s is before --since %s: nothing can match", until, since)
			}
			if q.Limit < 0 {
				return usagef("--limit must not be negative")
			}
			eng, err := a.engine(cmd.Context(), true)
			if err != nil {
				return err
			}
			var places []retrieve.Place
			var res retrieve.Result
			if files {
				if spans, err = api.SpansRange.Check(spans); err != nil {
					return &usageError{err}
				}
				res, places, err = eng.RetrievePlaces(cmd.Context(), q, spans)
			} else {
				res, err = eng.Retrieve(cmd.Context(), q)
			}
			if err != nil {
				return err
			}
			if jsonOut {
				if files {
					return writeJSON(a.stdout, toPlacesJSON(res, places))
				}
				return writeJSON(a.stdout, toSearchJSON(res))
			}
			for _, f := range res.Faults {
				if strings.HasPrefix(f, "rerank: ") {
					fmt.Fprintf(a.stderr, "warning: %s; results are in fused order\n", f)
					continue
				}
				fmt.Fprintf(a.stderr, "warning: %s; results are from the other signal\n", f)
			}
			if res.Span != nil {
				fmt.Fprintf(a.stderr, "looked back to %s\n", res.Span)
			}
			// A picture's base64 in a snippet as a placeholder.
			ops, how := &api.Ops{Eng: eng}, func(id string) string { return "whole: engram show " + id }
			if err := ops.ShowHits(cmd.Context(), res.Hits, how); err != nil {
				return err
			}
			for _, p := range places {
				if err := ops.ShowHits(cmd.Context(), p.Hits, how); err != nil {
					return err
				}
			}
			if len(res.Hits) == 0 || files && len(places) == 0 {
				fmt.Fprintf(a.stderr, "no matches for %q\n", q.Text)
				// A search before the first index finds none of the
				// project's code: say so, or it reads as an answer.
				if _, err := eng.Store().Setting(cmd.Context(), consentKey); errors.Is(err, store.ErrNotFound) {
					fmt.Fprintf(a.stderr, "%s is not indexed yet, so its files are not searched: engram index indexes it\n", a.cfg.Project)
				}
				return nil
			}
			if files {
				printPlaces(a.stdout, res, places, q.Text)
				return nil
			}
			printHits(a.stdout, res, q.Text)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVarP(&q.Limit, "limit", "n", store.DefaultLimit, "most hits to show, 1-50")
	f.StringVar(&mode, "mode", "hybrid", "hybrid, lexical or vector")
	f.StringVar(&q.Filter.SessionID, "session", "", "only this session")
	f.StringVar(&q.Filter.AgentID, "agent", "", "only this agent")
	f.StringVar(&q.Filter.AgentType, "agent-type", "", "only agents of this type")
	f.StringSliceVar(&types, "type", nil, "only these content types (comma-separated or repeated)")
	f.StringSliceVar(&q.Filter.Paths, "path", nil, "only content about these files: a path, a directory or a glob (repeatable)")
	f.StringVar(&turns, "turns", "", "only these turns: N, FROM-TO, FROM- or -TO")
	f.StringVar(&since, "since", "", "only content seen since: RFC 3339 time, date (2026-11-21) or age (90m, 12h, 7d)")
	f.StringVar(&until, "until", "", "only content seen until: as --since")
	f.BoolVar(&q.Filter.History, "history", false, "also search old versions of files and deleted files")
	f.BoolVar(&q.NoRerank, "no-rerank", false, "do not re-rank with the configured re-ranker")
	f.BoolVar(&jsonOut, "json", false, "print the result as JSON")
	f.BoolVar(&files, "files", false, "rank distinct places (files, or other records) instead of chunks, each with its best spans")
	f.IntVar(&spans, "spans", api.SpansRange.Default, "with --files, the best spans shown per place, 1-5")
	return cmd
}

func parseTypes(v []string) ([]store.ContentType, error) {
	var out []store.ContentType
	for _, s := range v {
		t := store.ContentType(strings.TrimSpace(s))
		if !t.Valid() {
			var known []string
			for _, k := range store.ContentTypes() {
				known = append(known, string(k))
			}
			return nil, usagef("--type %q is not a content type (known: %s)", s, strings.Join(known, ", "))
		}
		out = append(out, t)
	}
	return out, nil
}

// parseTurns reads N, FROM-TO, FROM- or -TO.
func parseTurns(s string) (from, to int, err error) {
	if s == "" {
		return 0, 0, nil
	}
	bad := usagef("--turns %q: want N, FROM-TO, FROM- or -TO with turns from 1", s)
	num := func(p string) (int, bool) {
		if p == "" {
			return 0, true
		}
		n, err := strconv.Atoi(p)
		return n, err == nil && n >= 1
	}
	lo, hi, isRange := strings.Cut(s, "-")
	if !isRange {
		hi = lo
	}
	var ok1, ok2 bool
	from, ok1 = num(lo)
	to, ok2 = num(hi)
	if !ok1 || !ok2 || lo == "" && hi == "" || to != 0 && from > to {
		return 0, 0, bad
	}
	return from, to, nil
}

// parseWhen reads an RFC 3339 time, a date, or an age before now.
func parseWhen(flag, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.ParseInLocation(time.DateOnly, s, time.Local); err == nil {
		return t, nil
	}
	if n, ok := strings.CutSuffix(s, "d"); ok {
		if days, err := strconv.Atoi(n); err == nil && days >= 0 {
			return now.AddDate(0, 0, -days), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, usagef("--%s %q: want an RFC 3339 time, a date (2026-11-21) or an age (90m, 12h, 7d)", flag, s)
}

// where says where a hit was seen: file and lines, or session and turn.
func printHits(w io.Writer, res retrieve.Result, query string) {
	words := queryWords(query)
	for i, h := range res.Hits {
		fmt.Fprintf(w, "%2d. %s  %s  %-16s %s\n", i+1, signals(h, res), h.Chunk.EntryID[:12], h.Occurrence.Type, h.Provenance())
		for _, l := range excerpt(h.Chunk.Text, words, 3, 110) {
			fmt.Fprintf(w, "      %s\n", l)
		}
	}
}

// printPlaces prints the places of a search for them: each file (or
// other record) once, with its best spans.
func printPlaces(w io.Writer, res retrieve.Result, places []retrieve.Place, query string) {
	words := queryWords(query)
	for i, p := range places {
		best := p.Hits[0]
		where := p.Key
		if best.Occurrence.Type != store.CodeFile {
			where = best.Provenance()
		}
		fmt.Fprintf(w, "%2d. %.4f  %s  %-16s %s\n", i+1, p.Score, best.Chunk.EntryID[:12], best.Occurrence.Type, where)
		for j, h := range p.Hits {
			n := 1
			if j == 0 {
				n = 3
			}
			fmt.Fprintf(w, "    lines %d-%d  %s\n", h.Chunk.StartLine, h.Chunk.EndLine, signals(h, res))
			for _, l := range excerpt(h.Chunk.Text, words, n, 106) {
				fmt.Fprintf(w, "      %s\n", l)
			}
		}
	}
}

// placesJSON is engram search --files --json.
type placesJSON struct {
	searchJSON
	Places []placeJSON `json:"places"`
}

// placeJSON is one place: a file's path, or another record's entry ID, as
// key; its best hits as spans.
type placeJSON struct {
	Key   string    `json:"key"`
	Score float64   `json:"score"`
	Spans []hitJSON `json:"spans"`
}

func toPlacesJSON(res retrieve.Result, places []retrieve.Place) placesJSON {
	res.Hits = nil
	out := placesJSON{searchJSON: toSearchJSON(res), Places: make([]placeJSON, len(places))}
	for i, p := range places {
		out.Places[i] = placeJSON{Key: p.Key, Score: p.Score, Spans: toSearchJSON(retrieve.Result{Hits: p.Hits}).Hits}
	}
	return out
}

// queryWords are the terms of a query and their parts, for excerpts.
func queryWords(query string) map[string]bool {
	words := map[string]bool{}
	for _, g := range terms.Query(query) {
		words[g.Whole] = true
		for _, p := range g.Parts {
			words[p] = true
		}
	}
	return words
}

// signals renders a hit's fused score and what each backend said of it.
func signals(h retrieve.Hit, res retrieve.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%.4f", h.Score)
	if res.Lexical {
		if h.LexicalRank > 0 {
			fmt.Fprintf(&b, "  lex %6.2f #%-3d cov %.2f", h.Hit.Score, h.LexicalRank, h.Coverage)
		} else {
			fmt.Fprintf(&b, "  lex      - #-   cov %.2f", h.Coverage)
		}
	}
	if res.Vector {
		if h.VectorRank > 0 {
			fmt.Fprintf(&b, "  vec %.2f #%-3d", h.Vector, h.VectorRank)
		} else {
			fmt.Fprintf(&b, "  vec %.2f #-  ", h.Vector)
		}
	}
	if h.Reranked {
		fmt.Fprintf(&b, "  rr %.2f", h.Rerank)
	}
	if len(h.Boosts) > 0 {
		fmt.Fprintf(&b, " +%s", strings.Join(h.Boosts, "+"))
	}
	return b.String()
}

// excerpt returns up to n non-blank lines of text, preferring lines that
// hold query words and keeping their order, each cut to width runes, with
// control characters made visible.
func excerpt(text string, words map[string]bool, n, width int) []string {
	var lines []string
	var matching []int
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(strings.Map(func(r rune) rune {
			switch {
			case r == '\t':
				return ' '
			case r < 0x20 || r == 0x7f:
				return '·'
			}
			return r
		}, strings.ToValidUTF8(l, "\uFFFD")))
		if l == "" {
			continue
		}
		for _, t := range strings.Fields(terms.String(l)) {
			if words[t] {
				matching = append(matching, len(lines))
				break
			}
		}
		lines = append(lines, l)
	}
	pick := matching
	if len(pick) == 0 {
		for i := range lines {
			pick = append(pick, i)
		}
	}
	var out []string
	for _, i := range pick[:min(n, len(pick))] {
		l := lines[i]
		if r := []rune(l); len(r) > width {
			l = string(r[:width-1]) + "…"
		}
		out = append(out, l)
	}
	return out
}

// searchJSON is engram search --json: the hits, and which backends
// answered.
type searchJSON struct {
	Hits     []hitJSON `json:"hits"`
	Lexical  bool      `json:"lexical"`
	Vector   bool      `json:"vector"`
	Reranked bool      `json:"reranked"`
	Degraded bool      `json:"degraded"`
	Faults   []string  `json:"faults,omitempty"`
	// Span is the time the query pointed back to, if it did.
	Span *retrieve.Span `json:"span,omitempty"`
}

func toSearchJSON(res retrieve.Result) searchJSON {
	out := searchJSON{Hits: make([]hitJSON, len(res.Hits)), Lexical: res.Lexical, Vector: res.Vector,
		Reranked: res.Reranked, Degraded: res.Degraded, Faults: res.Faults, Span: res.Span}
	for i, h := range res.Hits {
		out.Hits[i] = toHitJSON(h.Hit)
		out.Hits[i].Score = h.Score
		out.Hits[i].Lexical = h.Hit.Score
		out.Hits[i].Coverage = h.Coverage
		out.Hits[i].Vector = h.Vector
		out.Hits[i].LexicalRank, out.Hits[i].VectorRank = h.LexicalRank, h.VectorRank
		out.Hits[i].Boosts = h.Boosts
		if h.Reranked {
			out.Hits[i].Rerank = &h.Rerank
		}
	}
	return out
}

// hitJSON is a hit in --json output: the chunk, and the occurrence where
// it was seen.
type hitJSON struct {
	Score float64 `json:"score"`
	// Lexical is the BM25 score, Coverage the share of the query's words
	// held, Vector the cosine; ranks are 1-based, 0 where a backend did not
	// return the chunk.
	Lexical     float64 `json:"lexical"`
	Coverage    float64 `json:"coverage"`
	Vector      float64 `json:"vector"`
	LexicalRank int     `json:"lexical_rank"`
	VectorRank  int     `json:"vector_rank"`
	// Rerank is the re-ranker's relevance, if one ordered the hit.
	Rerank      *float64 `json:"rerank,omitempty"`
	Boosts      []string `json:"boosts,omitempty"`
	EntryID     string   `json:"entry_id"`
	Chunk       int      `json:"chunk"`
	StartLine   int      `json:"start_line"`
	EndLine     int      `json:"end_line"`
	Tokens      int      `json:"tokens"`
	EntryTokens int      `json:"entry_tokens"`
	Text        string   `json:"text"`
	occJSON
}

func toHitJSON(h store.Hit) hitJSON {
	return hitJSON{
		Score: h.Score, EntryID: h.Chunk.EntryID, Chunk: h.Chunk.Ordinal,
		StartLine: h.Chunk.StartLine, EndLine: h.Chunk.EndLine, Tokens: h.Chunk.TokenCount,
		EntryTokens: h.EntryTokens, Text: strings.ToValidUTF8(h.Chunk.Text, "\uFFFD"),
		occJSON: toOccJSON(h.Occurrence),
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
