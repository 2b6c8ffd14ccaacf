package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/api"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
)

func (a *app) showCmd() *cobra.Command {
	var (
		jsonOut bool
		version int
	)
	cmd := &cobra.Command{
		Use:   "show ID | PATH[:START[-END]]",
		Short: "Print a stored entry or an indexed file, byte for byte",
		Long: `Print stored content exactly as it was stored: the current version of the
indexed file PATH (with --version N, version N), or the entry whose ID is ID
or starts with ID (at least 4 hex digits). A line range :START-END (or :LINE)
prints only those lines, 1-based and inclusive.

With --json, print the entry with its occurrences and chunks instead; content
that is not valid UTF-8 is then given base64-encoded as content_base64.`,
		Example: `  engram show internal/store/store.go:40-80
  engram show 3fa8c2d1
  engram show cmd/main.go --version 2`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("show needs one entry ID or file path")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			target, from, to, err := splitRange(args[0])
			if err != nil {
				return err
			}
			if _, err := api.VersionRange.CheckAs("--version", version); err != nil {
				return &usageError{err}
			}
			eng, err := a.engine(ctx, true)
			if err != nil {
				return err
			}
			target = a.projectPath(target)
			id, err := eng.Resolve(ctx, target, version)
			var de *engine.DeletedError
			if errors.Is(err, store.ErrNotFound) && from == 0 {
				if i := strings.LastIndexByte(args[0], ':'); i >= 0 && looksLikeRange(args[0][i+1:]) {
					// Not a path with a colon in it: a range that did not parse.
					return usagef("line range %q: want START-END or LINE, with 1 <= START <= END", args[0][i+1:])
				}
			}
			if errors.As(err, &de) {
				return fmt.Errorf("%w: engram show %s --version %d", err, de.Path, de.LastVersion)
			} else if err != nil {
				return err
			}
			ent, err := eng.Entry(ctx, id)
			if err != nil {
				return err
			}
			content := ent.Content
			if from > 0 {
				if content, err = engine.LineRange(content, from, to); err != nil {
					return fmt.Errorf("%s: %w", target, err)
				}
			}
			if !jsonOut {
				if ent.Redacted {
					fmt.Fprintf(a.stderr, "note: entry %s was redacted (engram audit): its content is not what its ID hashes\n", ent.ID[:12])
				}
				_, err := a.stdout.Write(content)
				return err
			}
			occ, err := eng.Store().Occurrences(ctx, ent.ID)
			if err != nil {
				return err
			}
			chunks, err := eng.Store().Chunks(ctx, ent.ID)
			if err != nil {
				return err
			}
			out := entryJSON{ID: ent.ID, Size: len(ent.Content), Tokens: ent.TokenCount, Redacted: ent.Redacted}
			if utf8.Valid(content) {
				out.Content = string(content)
			} else {
				out.ContentBase64 = base64.StdEncoding.EncodeToString(content)
			}
			for _, o := range occ {
				out.Occurrences = append(out.Occurrences, toOccJSON(o))
			}
			for _, c := range chunks {
				out.Chunks = append(out.Chunks, chunkJSON{Ordinal: c.Ordinal, Start: c.Start, End: c.End,
					StartLine: c.StartLine, EndLine: c.EndLine, Tokens: c.TokenCount, Symbols: c.Symbols})
			}
			return writeJSON(a.stdout, out)
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the entry, its occurrences and chunks as JSON")
	cmd.Flags().IntVar(&version, "version", 0, "with a file path: print this version (see engram files PATH --versions)")
	return cmd
}

// rangeLike matches what was meant as a line range, though it is not one
// (3-, -3, 0-, a number too large).
var rangeLike = regexp.MustCompile(`^-?[0-9]*-?[0-9]*$`)

// looksLikeRange reports whether s was meant as a line range: rangeLike,
// with a digit.
func looksLikeRange(s string) bool {
	return rangeLike.MatchString(s) && strings.ContainsAny(s, "0123456789")
}

// projectPath is a file path as the store names it: relative to the
// project, slash-separated and clean. An absolute path inside the project
// is made relative to it; anything else (an entry ID) is left alone.
func (a *app) projectPath(target string) string {
	if filepath.IsAbs(target) {
		for _, root := range []string{a.cfg.Project, evalSymlinks(a.cfg.Project)} {
			for _, t := range []string{target, evalSymlinks(target)} {
				if rel, err := filepath.Rel(root, t); err == nil && rel != "." && !strings.HasPrefix(rel, "..") {
					return filepath.ToSlash(rel)
				}
			}
		}
		return target
	}
	if strings.ContainsRune(target, '/') || strings.HasPrefix(target, ".") {
		if c := path.Clean(filepath.ToSlash(target)); c != "." && !strings.HasPrefix(c, "../") {
			return c
		}
	}
	return target
}

// evalSymlinks is p with its symlinks resolved, or p.
func evalSymlinks(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// splitRange splits PATH:START-END (or PATH:LINE) into the path and the
// range; without a range, from and to are 0.
func splitRange(s string) (target string, from, to int, err error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return s, 0, 0, nil
	}
	r := s[i+1:]
	lo, hi, isRange := strings.Cut(r, "-")
	from, err1 := strconv.Atoi(lo)
	to = from
	var err2 error
	if isRange {
		to, err2 = strconv.Atoi(hi)
	}
	if err1 != nil || err2 != nil {
		return s, 0, 0, nil // not a range: a path with a colon
	}
	if from < 1 || to < from {
		return "", 0, 0, usagef("line range %q: want START-END or LINE, with 1 <= START <= END", r)
	}
	return s[:i], from, to, nil
}

type entryJSON struct {
	ID            string      `json:"id"`
	Size          int         `json:"size"`
	Tokens        int         `json:"tokens"`
	Content       string      `json:"content,omitempty"`
	ContentBase64 string      `json:"content_base64,omitempty"`
	Occurrences   []occJSON   `json:"occurrences"`
	Chunks        []chunkJSON `json:"chunks"`
	// Redacted says an operator redacted it (engram redact): the content
	// is no longer what the ID is the SHA-256 of.
	Redacted bool `json:"redacted,omitempty"`
}

type occJSON struct {
	Seq       int64          `json:"seq"`
	Type      string         `json:"type"`
	Session   string         `json:"session,omitempty"`
	Agent     string         `json:"agent,omitempty"`
	AgentType string         `json:"agent_type,omitempty"`
	Turn      int            `json:"turn,omitempty"`
	Time      string         `json:"time"`
	MsgID     string         `json:"msg_id,omitempty"`
	Parent    string         `json:"parent,omitempty"`
	Files     []string       `json:"files,omitempty"`
	Keywords  []string       `json:"keywords,omitempty"`
	Entities  []string       `json:"entities,omitempty"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}

func toOccJSON(o store.Occurrence) occJSON {
	return occJSON{Seq: o.Seq, Type: string(o.Type), Session: o.SessionID, Agent: o.AgentID, AgentType: o.AgentType,
		Turn: o.Turn, Time: o.Time.Format(time.RFC3339Nano), MsgID: o.MsgID, Parent: o.ParentID,
		Files: o.Files, Keywords: o.Keywords, Entities: o.Entities, Metadata: o.Metadata}
}

type chunkJSON struct {
	Ordinal   int      `json:"ordinal"`
	Start     int      `json:"start"`
	End       int      `json:"end"`
	StartLine int      `json:"start_line"`
	EndLine   int      `json:"end_line"`
	Tokens    int      `json:"tokens"`
	Symbols   []string `json:"symbols,omitempty"`
}
