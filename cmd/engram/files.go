package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/store"
)

func (a *app) filesCmd() *cobra.Command {
	var (
		all      bool
		states   []string
		versions bool
		jsonOut  bool
	)
	cmd := &cobra.Command{
		Use:   "files [PREFIX]",
		Short: "List indexed files with their state",
		Long: `List the files of the project's index under PREFIX (a directory such as
internal/ or a path): current files with their size, tokens, chunks, version
and language, and skipped files with the reason. Deleted files are listed
with --all or --state deleted. With --versions and a path, list that file's
versions.`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			prefix := ""
			if len(args) == 1 {
				prefix = strings.TrimPrefix(args[0], "./")
			}
			eng, err := a.engine(ctx, true)
			if err != nil {
				return err
			}
			if versions {
				if prefix == "" {
					return usagef("--versions needs a file path")
				}
				vs, err := eng.Store().FileVersions(ctx, prefix)
				if err != nil {
					return err
				}
				if jsonOut {
					return writeJSON(a.stdout, vs)
				}
				w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "VERSION\tENTRY\tSIZE\tMODIFIED\tINDEXED")
				for _, v := range vs {
					fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\n", v.Version, v.EntryID[:12], humanBytes(v.Size),
						timeString(v.ModTime), timeString(v.IndexedAt))
				}
				return w.Flush()
			}
			filter := store.FileFilter{Prefix: prefix}
			switch {
			case len(states) > 0:
				for _, s := range states {
					st := store.FileState(s)
					if st != store.FileCurrent && st != store.FileDeleted && st != store.FileSkipped {
						return usagef("--state %q: want current, skipped or deleted", s)
					}
					filter.States = append(filter.States, st)
				}
			case !all:
				filter.States = []store.FileState{store.FileCurrent, store.FileSkipped}
			}
			files, err := eng.Store().Files(ctx, filter)
			if err != nil {
				return err
			}
			if jsonOut {
				out := make([]fileJSON, len(files))
				for i, f := range files {
					out[i] = toFileJSON(f)
				}
				return writeJSON(a.stdout, out)
			}
			if len(files) == 0 {
				if prefix != "" || len(states) > 0 {
					fmt.Fprintln(a.stderr, "no files match")
				} else {
					fmt.Fprintln(a.stderr, "no files: index the project with engram index")
				}
				return nil
			}
			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "STATE\tSIZE\tTOKENS\tCHUNKS\tVER\tLANG\tPATH\tNOTE")
			for _, f := range files {
				tokens, chunks, ver := "-", "-", "-"
				if f.State != store.FileSkipped {
					tokens, chunks, ver = commas(int64(f.TokenCount)), fmt.Sprint(f.Chunks), fmt.Sprint(f.Version)
				}
				lang := f.Language
				if lang == "" {
					lang = "-"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", f.State, humanBytes(f.Size), tokens, chunks, ver, lang, shownPath(f.Path), f.Reason)
			}
			return w.Flush()
		},
	}
	f := cmd.Flags()
	f.BoolVar(&all, "all", false, "include deleted files")
	f.StringSliceVar(&states, "state", nil, "only files in these states: current, skipped, deleted")
	f.BoolVar(&versions, "versions", false, "list the versions of the file PREFIX names")
	f.BoolVar(&jsonOut, "json", false, "print as JSON")
	return cmd
}

func timeString(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}

type fileJSON struct {
	Path      string `json:"path"`
	State     string `json:"state"`
	Reason    string `json:"reason,omitempty"`
	EntryID   string `json:"entry_id,omitempty"`
	Size      int64  `json:"size"`
	ModTime   string `json:"mtime,omitempty"`
	Hash      string `json:"hash,omitempty"`
	Language  string `json:"language,omitempty"`
	Version   int    `json:"version"`
	Tokens    int    `json:"tokens"`
	Chunks    int    `json:"chunks"`
	IndexedAt string `json:"indexed_at"`
}

func toFileJSON(f store.File) fileJSON {
	out := fileJSON{Path: f.Path, State: string(f.State), Reason: f.Reason, EntryID: f.EntryID, Size: f.Size,
		Hash: f.Hash, Language: f.Language, Version: f.Version, Tokens: f.TokenCount, Chunks: f.Chunks,
		IndexedAt: f.IndexedAt.Format(time.RFC3339Nano)}
	if !f.ModTime.IsZero() {
		out.ModTime = f.ModTime.Format(time.RFC3339Nano)
	}
	return out
}

// shownPath is a path as a terminal may print it: as it is, or quoted
// with Go's escapes when it holds a control character (a newline would
// break the table, an escape sequence would reach the terminal) or is not
// UTF-8.
func shownPath(p string) string {
	if utf8.ValidString(p) && !strings.ContainsFunc(p, unicode.IsControl) {
		return p
	}
	return strconv.Quote(p)
}
