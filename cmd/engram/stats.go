package main

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
)

func (a *app) statsCmd() *cobra.Command {
	var jsonOut, check bool
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Show what the project's store holds; --check verifies it",
		Long: `Show what the project's store holds: entries, chunks, sessions, files, and
where it is. --check instead verifies the store (SQLite's integrity check and
that of its full-text indexes), reads every page, and exits 1 naming any
damage: after a crash or a full disk, say.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			eng, err := a.engine(cmd.Context(), true)
			if errors.Is(err, errNoStore) && !jsonOut {
				fmt.Fprintf(a.stdout, "project  %s\nstore    %s (not created yet)\n", a.cfg.Project, a.cfg.Store.Path)
				return nil
			}
			if err != nil {
				return err
			}
			if check {
				if err := a.st.IntegrityCheck(cmd.Context()); err != nil {
					return fmt.Errorf("store %s: %w", a.cfg.Store.Path, err)
				}
				if jsonOut {
					return writeJSON(a.stdout, map[string]any{"store": a.cfg.Store.Path, "ok": true})
				}
				fmt.Fprintf(a.stdout, "store %s: ok\n", a.cfg.Store.Path)
				return nil
			}
			st, err := eng.Stats(cmd.Context())
			if err != nil {
				return err
			}
			disk, err := eng.Disk(cmd.Context(), a.cfg.Retention.DiskCap.Bytes)
			if err != nil {
				return err
			}
			if w := disk.Warning(); w != "" {
				fmt.Fprintln(a.stderr, "warning: "+w)
			}
			if jsonOut {
				out := toStatsJSON(a.cfg.Project, eng.EncodingName(), st)
				out.Disk = &disk
				return writeJSON(a.stdout, out)
			}
			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "project\t%s\n", a.cfg.Project)
			fmt.Fprintf(w, "store\t%s (%s, schema %d)\n", st.Location, humanBytes(st.SizeBytes), st.SchemaVersion)
			fmt.Fprintf(w, "disk\t%s\n", diskLine(disk))
			fmt.Fprintf(w, "entries\t%s (%s of content, %s tokens, %s)\n", commas(st.Entries), humanBytes(st.ContentBytes), commas(st.Tokens), eng.EncodingName())
			fmt.Fprintf(w, "occurrences\t%s\n", commas(st.Occurrences))
			fmt.Fprintf(w, "chunks\t%s\n", commas(st.Chunks))
			fmt.Fprintf(w, "sessions\t%s, agents %s\n", commas(st.Sessions), commas(st.Agents))
			fmt.Fprintf(w, "links\t%s, references %s\n", commas(st.Links), commas(st.References))
			if len(st.Files) > 0 {
				fmt.Fprintf(w, "files\t%s current, %s skipped, %s deleted\n", commas(st.Files[store.FileCurrent]),
					commas(st.Files[store.FileSkipped]), commas(st.Files[store.FileDeleted]))
			}
			if !st.First.IsZero() {
				fmt.Fprintf(w, "seen\t%s to %s\n", st.First.Local().Format(time.DateTime), st.Last.Local().Format(time.DateTime))
			}
			// A type whose entries were all forgotten keeps its counters,
			// at zero: it is not listed. Ties go by name, so that the
			// order is the same on every run.
			types := make([]store.ContentType, 0, len(st.ByType))
			for t, ts := range st.ByType {
				if ts.Occurrences > 0 {
					types = append(types, t)
				}
			}
			sort.Slice(types, func(i, j int) bool {
				oi, oj := st.ByType[types[i]].Occurrences, st.ByType[types[j]].Occurrences
				return oi > oj || oi == oj && types[i] < types[j]
			})
			for i, t := range types {
				label := ""
				if i == 0 {
					label = "by type"
				}
				ts := st.ByType[t]
				fmt.Fprintf(w, "%s\t%-18s %8s  %s tokens\n", label, t, commas(ts.Occurrences), commas(ts.Tokens))
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print as JSON")
	cmd.Flags().BoolVar(&check, "check", false, "verify the store's integrity instead")
	return cmd
}

type statsJSON struct {
	Project       string                   `json:"project"`
	Store         string                   `json:"store"`
	SchemaVersion int                      `json:"schema_version"`
	Encoding      string                   `json:"encoding"`
	SizeBytes     int64                    `json:"size_bytes"`
	Entries       int64                    `json:"entries"`
	ContentBytes  int64                    `json:"content_bytes"`
	Tokens        int64                    `json:"tokens"`
	Occurrences   int64                    `json:"occurrences"`
	Chunks        int64                    `json:"chunks"`
	Sessions      int64                    `json:"sessions"`
	Agents        int64                    `json:"agents"`
	Links         int64                    `json:"links"`
	References    int64                    `json:"references"`
	Files         map[string]int64         `json:"files"`
	First         string                   `json:"first,omitempty"`
	Last          string                   `json:"last,omitempty"`
	ByType        map[string]typeStatsJSON `json:"by_type"`
	// Disk is the store's use of [retention] disk_cap.
	Disk *engine.DiskUsage `json:"disk,omitempty"`
}

// diskLine says how much disk the store uses, of its cap if it has one.
func diskLine(u engine.DiskUsage) string {
	line := fmt.Sprintf("%s used", humanBytes(u.UsedBytes))
	if free := u.FileBytes - u.UsedBytes; free > 0 {
		line += fmt.Sprintf(" (%s free in the file, reused before it grows)", humanBytes(free))
	}
	if u.CapBytes > 0 {
		line += fmt.Sprintf(", %d%% of the %s cap", u.UsedBytes*100/u.CapBytes, humanBytes(u.CapBytes))
		if u.Level != engine.DiskOK {
			line += " (" + u.Level + ")"
		}
	}
	return line
}

type typeStatsJSON struct {
	Occurrences int64 `json:"occurrences"`
	Tokens      int64 `json:"tokens"`
}

func toStatsJSON(project, encoding string, st store.Stats) statsJSON {
	out := statsJSON{Project: project, Store: st.Location, SchemaVersion: st.SchemaVersion, Encoding: encoding,
		SizeBytes: st.SizeBytes, Entries: st.Entries, ContentBytes: st.ContentBytes, Tokens: st.Tokens,
		Occurrences: st.Occurrences, Chunks: st.Chunks, Sessions: st.Sessions, Agents: st.Agents,
		Links: st.Links, References: st.References, ByType: map[string]typeStatsJSON{}, Files: map[string]int64{}}
	for state, n := range st.Files {
		out.Files[string(state)] = n
	}
	if !st.First.IsZero() {
		out.First, out.Last = st.First.Format(time.RFC3339Nano), st.Last.Format(time.RFC3339Nano)
	}
	for t, ts := range st.ByType {
		out.ByType[string(t)] = typeStatsJSON(ts)
	}
	return out
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// commas formats n with thousands separators.
func commas(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments", cmd.Name())
	}
	return nil
}
