package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/terms"
)

func (a *app) searchCmd() *cobra.Command {
	var (
		q       store.Query
		types   []string
		turns   string
		since   string
		until   string
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "search QUERY...",
		Short: "Find stored content by words, identifiers and paths",
		Long: `Search everything stored for the words of QUERY, best match first.

Identifiers match whole and by their parts: parseHTTPRequest, parse_http_request
and ParseHTTPRequest find each other and the words parse, http and request.
Paths match by their parts. Punctuation and operators have no meaning: a query
is words, ranked by BM25.

Each hit shows its score, its entry ID (prefix), content type, and where it
was seen (session and turn, or file and lines); 'engram show ID' prints the
whole entry.`,
		Example: `  engram search retry backoff
  engram search parseHTTPRequest --type tool_result,agent_response
  engram search "migration failed" --session s1 --turns 10-20 --json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("search needs a query")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			q.Text = strings.Join(args, " ")
			var err error
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
			if q.Limit < 0 {
				return usagef("--limit must not be negative")
			}
			eng, err := a.engine(cmd.Context(), true)
			if err != nil {
				return err
			}
			hits, err := eng.Search(cmd.Context(), q)
			if err != nil {
				return err
			}
			if jsonOut {
				out := make([]hitJSON, len(hits))
				for i, h := range hits {
					out[i] = toHitJSON(h)
				}
				return writeJSON(a.stdout, out)
			}
			if len(hits) == 0 {
				fmt.Fprintf(a.stderr, "no matches for %q\n", q.Text)
				return nil
			}
			printHits(a.stdout, hits, q.Text)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVarP(&q.Limit, "limit", "n", store.DefaultLimit, "most hits to show")
	f.StringVar(&q.Filter.SessionID, "session", "", "only this session")
	f.StringVar(&q.Filter.AgentID, "agent", "", "only this agent")
	f.StringVar(&q.Filter.AgentType, "agent-type", "", "only agents of this type")
	f.StringSliceVar(&types, "type", nil, "only these content types (comma-separated or repeated)")
	f.StringVar(&turns, "turns", "", "only these turns: N, FROM-TO, FROM- or -TO")
	f.StringVar(&since, "since", "", "only content seen since: RFC 3339 time, date (2026-11-21) or age (90m, 12h, 7d)")
	f.StringVar(&until, "until", "", "only content seen until: as --since")
	f.BoolVar(&q.Filter.History, "history", false, "also search old versions of files and deleted files")
	f.BoolVar(&jsonOut, "json", false, "print hits as JSON")
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
func where(h store.Hit) string {
	c, o := h.Chunk, h.Occurrence
	lines := fmt.Sprintf("%d-%d", c.StartLine, c.EndLine)
	if c.StartLine == c.EndLine {
		lines = strconv.Itoa(c.StartLine)
	}
	if len(o.Files) > 0 && o.Type == store.CodeFile {
		return o.Files[0] + ":" + lines
	}
	var parts []string
	if o.SessionID != "" {
		parts = append(parts, "session "+o.SessionID)
		if o.Turn > 0 {
			parts = append(parts, "turn "+strconv.Itoa(o.Turn))
		}
	}
	if o.AgentID != "" {
		parts = append(parts, "agent "+o.AgentID)
	}
	if c.Ordinal > 0 || c.EndLine > c.StartLine {
		parts = append(parts, "lines "+lines)
	}
	if len(o.Files) > 0 {
		parts = append(parts, o.Files[0])
	}
	return strings.Join(parts, " · ")
}

func printHits(w io.Writer, hits []store.Hit, query string) {
	words := map[string]bool{}
	for _, g := range terms.Query(query) {
		words[g.Whole] = true
		for _, p := range g.Parts {
			words[p] = true
		}
	}
	for i, h := range hits {
		fmt.Fprintf(w, "%2d. %6.2f  %s  %-16s %s\n", i+1, h.Score, h.Chunk.EntryID[:12], h.Occurrence.Type, where(h))
		for _, l := range excerpt(h.Chunk.Text, words, 3, 110) {
			fmt.Fprintf(w, "      %s\n", l)
		}
	}
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

// hitJSON is a hit in --json output: the chunk, and the occurrence where
// it was seen.
type hitJSON struct {
	Score       float64 `json:"score"`
	EntryID     string  `json:"entry_id"`
	Chunk       int     `json:"chunk"`
	StartLine   int     `json:"start_line"`
	EndLine     int     `json:"end_line"`
	Tokens      int     `json:"tokens"`
	EntryTokens int     `json:"entry_tokens"`
	Text        string  `json:"text"`
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
