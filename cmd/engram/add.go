package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
)

func (a *app) addCmd() *cobra.Command {
	var (
		defaults  engine.Record
		typ       string
		batchSize int
		jsonOut   bool
		quiet     bool
		noEmbed   bool
	)
	cmd := &cobra.Command{
		Use:   "add [FILE]",
		Short: "Store messages and tool events read as JSON Lines",
		Long: `Store messages and tool events, read as JSON Lines from FILE or standard input:
one JSON object per line, for example

  {"session":"s1","agent":"claude","role":"user","content":"Fix the flaky test"}
  {"session":"s1","agent":"claude","type":"tool_call","msg_id":"t1","content":{"cmd":"go test ./..."}}
  {"session":"s1","agent":"claude","type":"tool_result","parent":"t1","content":"FAIL TestRetry"}

Fields: session, agent, agent_type, type (user_prompt, agent_response,
tool_call, tool_result, code_file, web_fetch, research_paper, agent_message,
plan_workflow, test_result, inspector_finding, note, handoff_state,
checkpoint) or role (user, assistant, tool, system), content (a string, kept
byte for byte; other JSON values are kept as compact JSON) or content_base64
(bytes that are not text), and optionally
turn, time (RFC 3339), msg_id, parent (a msg_id or an entry id), files,
keywords, entities, metadata.

The whole input is read and checked before anything is written: a bad line
writes nothing, and the bad lines (the first 20) are reported with their
numbers and fields.
Records are then written in transactions of --batch-size; each entry ID is
printed once its transaction has committed. Storing content that is already
stored records a new occurrence and prints the same ID.`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if typ != "" {
				defaults.Type = store.ContentType(typ)
			}
			if batchSize < 0 {
				return usagef("--batch-size is %d; it must be 0 (the default) or more", batchSize)
			}
			if batchSize == 0 {
				batchSize = a.cfg.Ingest.BatchSize
			}
			in, name, err := a.input(args)
			if err != nil {
				return err
			}
			defer in.Close()
			eng, err := a.engine(ctx, false)
			if err != nil {
				return err
			}
			start := time.Now()
			lines, err := eng.ReadJSONL(in, defaults)
			if err != nil {
				return fmt.Errorf("%s: nothing was stored:\n%w", name, err)
			}
			out := bufio.NewWriter(a.stdout)
			enc := json.NewEncoder(out)
			var sum addSummary
			recs := make([]engine.Record, len(lines))
			for i, l := range lines {
				recs[i] = l.Record
			}
			stored := 0
			err = eng.AddAll(ctx, recs, batchSize, func(first int, res []engine.AddResult) error {
				for i, r := range res {
					sum.count(r)
					if jsonOut {
						enc.Encode(addResult{Line: lines[first+i].N, ID: r.ID, Seq: r.Seq, Turn: r.Turn, New: r.NewContent, Replayed: r.Replayed, Redacted: r.Redacted})
					} else {
						fmt.Fprintln(out, r.ID)
					}
				}
				stored = first + len(res)
				// An ID is printed only once its batch is committed.
				return out.Flush()
			})
			if err != nil {
				var re *engine.RecordError
				if errors.As(err, &re) {
					err = &engine.LineError{Line: lines[re.Index].N, Err: re.Err}
				}
				if stored > 0 {
					return fmt.Errorf("%s: %w\n(the %d records before line %d were stored; the rest were not)", name, err, stored, lines[stored].N)
				}
				return fmt.Errorf("%s: nothing was stored: %w", name, err)
			}
			if !quiet {
				fmt.Fprintf(a.stderr, "stored %d records from %s in %v: %d new entries, %d already stored, %d replayed msg_ids\n",
					len(lines), name, time.Since(start).Round(time.Millisecond), sum.new, sum.old, sum.replayed)
				if sum.redacted > 0 {
					fmt.Fprintf(a.stderr, "secrets redacted before storing in %d records (their IDs are of the redacted content; --json names the kinds)\n", sum.redacted)
				}
				fmt.Fprintf(a.stderr, "store: %s\n", a.cfg.Store.Path)
			}
			if !noEmbed {
				_, err = a.runEmbed(ctx, eng, false)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&defaults.Session, "session", "", "session for lines that name none")
	f.StringVar(&defaults.Agent, "agent", "", "agent for lines that name none")
	f.StringVar(&defaults.AgentType, "agent-type", "", "agent type for lines that name none")
	f.StringVar(&typ, "type", "", "content type for lines that give neither type nor role")
	f.IntVar(&batchSize, "batch-size", 0, "records per transaction (default from ingest.batch_size, 1000)")
	f.BoolVar(&jsonOut, "json", false, "print one JSON object per record: line, id, seq, turn, new, replayed, redacted")
	f.BoolVarP(&quiet, "quiet", "q", false, "no summary on standard error")
	f.BoolVar(&noEmbed, "no-embed", false, "do not embed the new chunks now (engram embed does it later)")
	return cmd
}

type addResult struct {
	Line     int      `json:"line"`
	ID       string   `json:"id"`
	Seq      int64    `json:"seq"`
	Turn     int      `json:"turn"`
	New      bool     `json:"new"`
	Replayed bool     `json:"replayed"`
	Redacted []string `json:"redacted,omitempty"`
}

type addSummary struct{ new, old, replayed, redacted int }

func (s *addSummary) count(r engine.AddResult) {
	if len(r.Redacted) > 0 {
		s.redacted++
	}
	switch {
	case r.Replayed:
		s.replayed++
	case r.NewContent:
		s.new++
	default:
		s.old++
	}
}

// input opens the file argument, or standard input for none or "-".
func (a *app) input(args []string) (io.ReadCloser, string, error) {
	if len(args) == 1 && args[0] != "-" {
		f, err := os.Open(args[0])
		if err != nil {
			return nil, "", err
		}
		return f, args[0], nil
	}
	if f, ok := a.stdin.(*os.File); ok && isTerminal(f) {
		return nil, "", usagef("standard input is a terminal: pipe JSON Lines into engram add, or name a file")
	}
	return io.NopCloser(a.stdin), "standard input", nil
}

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }
