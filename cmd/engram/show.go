package main

import (
	"encoding/base64"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/store"
)

func (a *app) showCmd() *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Print a stored entry byte for byte",
		Long: `Print the content of the entry whose ID is ID, or starts with ID (at least
4 hex digits), exactly as it was stored. With --json, print the entry with
its occurrences and chunks instead; content that is not valid UTF-8 is then
given base64-encoded as content_base64.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("show needs exactly one entry ID")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			eng, err := a.engine(ctx, true)
			if err != nil {
				return err
			}
			ent, err := eng.Entry(ctx, args[0])
			if err != nil {
				return err
			}
			if !jsonOut {
				_, err := a.stdout.Write(ent.Content)
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
			out := entryJSON{ID: ent.ID, Size: len(ent.Content), Tokens: ent.TokenCount}
			if utf8.Valid(ent.Content) {
				out.Content = string(ent.Content)
			} else {
				out.ContentBase64 = base64.StdEncoding.EncodeToString(ent.Content)
			}
			for _, o := range occ {
				out.Occurrences = append(out.Occurrences, toOccJSON(o))
			}
			for _, c := range chunks {
				out.Chunks = append(out.Chunks, chunkJSON{Ordinal: c.Ordinal, Start: c.Start, End: c.End,
					StartLine: c.StartLine, EndLine: c.EndLine, Tokens: c.TokenCount})
			}
			return writeJSON(a.stdout, out)
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the entry, its occurrences and chunks as JSON")
	return cmd
}

type entryJSON struct {
	ID            string      `json:"id"`
	Size          int         `json:"size"`
	Tokens        int         `json:"tokens"`
	Content       string      `json:"content,omitempty"`
	ContentBase64 string      `json:"content_base64,omitempty"`
	Occurrences   []occJSON   `json:"occurrences"`
	Chunks        []chunkJSON `json:"chunks"`
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
	Ordinal   int `json:"ordinal"`
	Start     int `json:"start"`
	End       int `json:"end"`
	StartLine int `json:"start_line"`
	EndLine   int `json:"end_line"`
	Tokens    int `json:"tokens"`
}
