// Package storecopy copies a store from one backend to another (engram
// store copy): SQLite to PostgreSQL when a project outgrows one machine,
// and back.
//
// Both backends keep the same tables with the same meaning (the
// PostgreSQL schema is the SQLite one, table for table), so a copy moves
// rows, not records: every ID, sequence number and chunk ID stays what it
// was, so vectors, references, windows and the archivalist's versions
// need no translation. What each backend derives for itself (its
// full-text index) is not copied but built again by the target, in the
// same transaction as the load: the target holds all of the copy or, on
// any error, nothing of it.
//
// A copy is verified before it commits: every table is read back from
// the target, in the load's transaction, and compared with the source by
// its row count and an order-independent hash of its rows (the sum,
// modulo 2^256, of each row's SHA-256), so that a value changed on the
// way (a type the target stores differently, a truncated blob) fails the
// copy and leaves the target as it was. The check that the target is
// empty (every table, not a few) runs in the same transaction, so a
// writer that slips in between cannot mix its rows with the copy's.
package storecopy

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Table is a table both backends keep, with the columns they share.
type Table struct {
	Name    string
	Columns []string
}

// Tables are copied in this order, which respects their references.
// Counters are copied too (totals the target would otherwise have to
// recount), but not the backends' own derived state: full-text tables,
// and the counters that track them (skip). A target loads counters and
// arch_versions over the rows its migrations seeded.
var Tables = []Table{
	{"sessions", []string{"id", "name", "created_at", "last_seen_at", "metadata"}},
	{"agents", []string{"session_id", "id", "name", "role", "parent_id", "model", "context_window", "registered_at", "last_seen_at"}},
	{"entries", []string{"pk", "id", "content", "size", "token_count", "created_at", "fts", "redacted"}},
	{"occurrences", []string{"seq", "entry", "session_id", "agent_id", "agent_type", "type", "turn", "time", "msg_id", "parent_id", "files", "keywords", "entities", "metadata"}},
	{"chunks", []string{"id", "entry", "ordinal", "start_byte", "end_byte", "start_line", "end_line", "token_count", "symbols"}},
	{"contexts", []string{"entry", "text"}},
	{"entry_terms", []string{"entry", "terms"}},
	{"links", []string{"from_id", "to_id", "kind", "created_at"}},
	{"refs", []string{"id", "type", "session_id", "agent_id", "content_ids", "summary", "tokens_saved", "turn_from", "turn_to", "created_at", "topics", "entities", "query_hints"}},
	{"settings", []string{"key", "value"}},
	{"blobs", []string{"name", "data", "created_at"}},
	{"access", []string{"chunk", "count", "last_at"}},
	{"files", []string{"path", "state", "reason", "entry", "size", "mtime", "hash", "language", "version", "indexed_at"}},
	{"file_versions", []string{"path", "version", "entry", "size", "mtime", "indexed_at"}},
	{"vector_models", []string{"id", "name", "dim"}},
	{"vectors", []string{"model", "chunk", "vec", "seq"}},
	{"arch_versions", []string{"scope", "version"}},
	{"arch_records", []string{"seq", "id", "kind", "gv", "sv", "session_id", "agent_id", "model", "category", "key", "ref", "hash", "text", "body", "created_at"}},
	{"arch_superseded", []string{"id", "by"}},
	{"arch_usage", []string{"id", "count", "last_at"}},
	{"arch_agents", []string{"id", "name", "session_id", "parent_id", "model", "role", "registered_at", "credential", "key_hash"}},
	{"arch_events", []string{"seq", "type", "gv", "sv", "session_id", "agent_id", "scope", "record_id", "detail", "at"}},
	{"audit", []string{"seq", "at", "actor", "action", "targets", "counts"}},
	{"windows", []string{"session_id", "agent_id", "settings", "version", "created_at", "updated_at", "next_pos"}},
	{"window_items", []string{"session_id", "agent_id", "pos", "append_version", "form", "entry_ids", "tokens", "pinned", "ref_id", "appended_at"}},
	{"window_readmits", []string{"session_id", "agent_id", "seq", "at_pos", "from_pos", "to_pos"}},
	{"window_summaries", []string{"session_id", "agent_id", "level", "from_pos", "to_pos", "digest", "text", "tokens", "made_by", "epoch", "created_at"}},
	{"window_appends", []string{"session_id", "agent_id", "key", "digest", "from_pos", "items", "created_at"}},
	{"snapshot_bodies", []string{"hash", "body"}},
	{"window_snapshots", []string{"session_id", "agent_id", "seq", "hash", "version", "created_at", "report"}},
	{"counters", []string{"name", "value"}},
}

// skip reports whether a row is left out of a copy and its verification:
// a counter that is a backend's own (derived state the target keeps for
// itself), or one at zero (which a backend may seed or not), and the
// global version's seed row of an archive never written.
func skip(t Table, values []any) bool {
	switch t.Name {
	case "counters":
		return values[0] == "fts_generation" || isZero(values[1])
	case "arch_versions":
		return values[0] == "" && isZero(values[1])
	}
	return false
}

func isZero(v any) bool {
	n, ok := v.(int64)
	return ok && n == 0
}

// A Source reads a store's tables. ReadTable calls fn for every row of
// a table, its values in the order of the columns: int64, string,
// []byte, bool or nil. All of a copy's reads see one state of the store.
type Source interface {
	ReadTables(ctx context.Context, fn func(read func(t Table, row func(values []any) error) error) error) error
	Describe() string
}

// A Target loads tables into an empty store of this engram's schema, in
// one transaction. Load calls fill with the transaction's Loader, then
// builds what the backend derives (its full-text index), then calls
// check with the same Loader, and commits only if both returned nil. An
// error anywhere leaves the target as it was.
type Target interface {
	Load(ctx context.Context, fill, check func(Loader) error) error
	Source
}

// A Loader writes and reads tables within a target's load transaction.
// Write writes rows pulled from next until it returns false; Read calls
// row for every row of a table, as Source's reads do, or for its first
// limit rows when limit > 0.
type Loader interface {
	Write(t Table, next func() ([]any, bool, error)) error
	Read(t Table, limit int, row func(values []any) error) error
}

// Progress tells how a copy goes. Table is called as each table is
// copied, with its rows and how long it took; Step as each later stage
// begins (building the target's index, verifying). Either may be nil.
type Progress struct {
	Table func(table string, rows int64, took time.Duration)
	Step  func(what string)
}

func (p Progress) step(what string) {
	if p.Step != nil {
		p.Step(what)
	}
}

// Report says what a copy moved: rows by table.
type Report struct {
	Tables []TableReport
}

// TableReport is one table's rows and their hash.
type TableReport struct {
	Name string
	Rows int64
	Hash string // hex: the sum of the rows' SHA-256, modulo 2^256
}

// A NotEmptyError is the refusal of a target that holds rows.
type NotEmptyError struct {
	Target string
	Table  string // the first table found holding a row
}

func (e *NotEmptyError) Error() string {
	return fmt.Sprintf("target %s already holds a store (its table %s has rows): copy into an empty one (a new SQLite file, or a new database)",
		e.Target, e.Table)
}

// errFound stops a read at its first row.
var errFound = errors.New("found a row")

// Copy copies from into to, which must hold no row of any table Tables
// names (beyond what a new store's migrations seed), and verifies the
// copy. Both the check that the target is empty and the verification
// run inside the target's load transaction: a copy that fails either
// leaves the target as it was.
func Copy(ctx context.Context, from Source, to Target, progress Progress) (Report, error) {
	var want, got Report
	fill := func(l Loader) error {
		for _, t := range Tables {
			limit := 1 // a table of rows skip may leave out is read whole: they are few
			if t.Name == "counters" || t.Name == "arch_versions" {
				limit = 0
			}
			err := l.Read(t, limit, func(values []any) error {
				if skip(t, values) {
					return nil
				}
				return errFound
			})
			if errors.Is(err, errFound) {
				return &NotEmptyError{Target: to.Describe(), Table: t.Name}
			}
			if err != nil {
				return fmt.Errorf("target %s: read %s: %w", to.Describe(), t.Name, err)
			}
		}
		begun := false
		err := from.ReadTables(ctx, func(read func(t Table, row func(values []any) error) error) error {
			// A source may run its read again after a lost connection;
			// the rows written by the first run are in the target by then.
			if begun {
				return fmt.Errorf("source %s: its read was interrupted (the connection was lost) and cannot go on; nothing was copied: run the copy again", from.Describe())
			}
			begun = true
			want = Report{}
			for _, t := range Tables {
				r, err := copyTable(ctx, t, read, l)
				if err != nil {
					return err
				}
				want.Tables = append(want.Tables, r.TableReport)
				if progress.Table != nil {
					progress.Table(t.Name, r.Rows, r.took)
				}
			}
			return nil
		})
		if err == nil {
			progress.step("building the full-text index")
		}
		return err
	}
	check := func(l Loader) error {
		progress.step("verifying")
		var err error
		got, err = summarize(func(t Table, row func(values []any) error) error { return l.Read(t, 0, row) })
		if err != nil {
			return fmt.Errorf("verify: %w", err)
		}
		for i, w := range want.Tables {
			g := got.Tables[i]
			if g.Rows != w.Rows || g.Hash != w.Hash {
				return fmt.Errorf("verify: table %s: the target holds %d rows (hash %.16s), the source %d (hash %.16s); nothing was copied",
					w.Name, g.Rows, g.Hash, w.Rows, w.Hash)
			}
		}
		return nil
	}
	if err := to.Load(ctx, fill, check); err != nil {
		return Report{}, err
	}
	return got, nil
}

// tableCopy is a table copied, and how long it took.
type tableCopy struct {
	TableReport
	took time.Duration
}

// copyTable copies one table's rows from read to l, hashing them as
// they pass.
func copyTable(ctx context.Context, t Table, read func(t Table, row func(values []any) error) error, l Loader) (tableCopy, error) {
	start := time.Now()
	h := newHasher()
	rows := make(chan []any, 256)
	errc := make(chan error, 1)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		defer close(rows)
		errc <- read(t, func(values []any) error {
			if skip(t, values) {
				return nil
			}
			for i, v := range values {
				// SQLite's driver reads an empty BLOB as a nil []byte,
				// which both backends would write as NULL.
				if b, ok := v.([]byte); ok && b == nil {
					values[i] = []byte{}
				}
			}
			h.add(values)
			select {
			case rows <- values:
				return nil
			case <-rctx.Done():
				return rctx.Err()
			}
		})
	}()
	werr := l.Write(t, func() ([]any, bool, error) {
		v, ok := <-rows
		return v, ok, nil
	})
	cancel()
	for range rows { // let the reader finish
	}
	if rerr := <-errc; rerr != nil && werr == nil {
		werr = fmt.Errorf("read %s: %w", t.Name, rerr)
	}
	if werr != nil {
		return tableCopy{}, fmt.Errorf("table %s: %w", t.Name, werr)
	}
	return tableCopy{TableReport{Name: t.Name, Rows: h.rows, Hash: h.hex()}, time.Since(start)}, nil
}

// Summarize counts and hashes every table of a store.
func Summarize(ctx context.Context, s Source) (Report, error) {
	var r Report
	err := s.ReadTables(ctx, func(read func(t Table, row func(values []any) error) error) error {
		var err error
		r, err = summarize(read)
		return err
	})
	return r, err
}

func summarize(read func(t Table, row func(values []any) error) error) (Report, error) {
	var r Report
	for _, t := range Tables {
		h := newHasher()
		err := read(t, func(values []any) error {
			if skip(t, values) {
				return nil
			}
			h.add(values)
			return nil
		})
		if err != nil {
			return Report{}, fmt.Errorf("read %s: %w", t.Name, err)
		}
		r.Tables = append(r.Tables, TableReport{Name: t.Name, Rows: h.rows, Hash: h.hex()})
	}
	return r, nil
}

// hasher sums the SHA-256 of rows: the same rows in any order give the
// same sum. Values are written in one canonical form whatever the
// backend's type: integers and booleans as integers, text and bytes as
// bytes (SQLite's TEXT and PostgreSQL's bytea may hold the same
// column), NULL apart from every value.
type hasher struct {
	sum  *big.Int
	rows int64
}

var mod = new(big.Int).Lsh(big.NewInt(1), 256)

func newHasher() *hasher { return &hasher{sum: new(big.Int)} }

func (h *hasher) add(values []any) {
	d := sha256.New()
	var n [8]byte
	for _, v := range values {
		switch v := v.(type) {
		case nil:
			d.Write([]byte{0})
		case bool:
			d.Write([]byte{1})
			x := int64(0)
			if v {
				x = 1
			}
			binary.BigEndian.PutUint64(n[:], uint64(x))
			d.Write(n[:])
		case int64:
			d.Write([]byte{1})
			binary.BigEndian.PutUint64(n[:], uint64(v))
			d.Write(n[:])
		case float64:
			d.Write([]byte{3})
			d.Write([]byte(strconv.FormatFloat(v, 'g', -1, 64)))
		case string:
			v = Text(v)
			d.Write([]byte{2})
			binary.BigEndian.PutUint64(n[:], uint64(len(v)))
			d.Write(n[:])
			d.Write([]byte(v))
		case []byte:
			d.Write([]byte{2})
			binary.BigEndian.PutUint64(n[:], uint64(len(v)))
			d.Write(n[:])
			d.Write(v)
		default:
			fmt.Fprintf(d, "\x04%T:%v", v, v)
		}
	}
	h.sum.Add(h.sum, new(big.Int).SetBytes(d.Sum(nil)))
	h.sum.Mod(h.sum, mod)
	h.rows++
}

// Text is s as both backends can hold it in a text column: valid UTF-8
// without NUL. PostgreSQL's text holds nothing else; SQLite's may (the
// conversation context cut from binary content), and the PostgreSQL
// backend keeps such text in this form (its context.go): a copy writes it
// so, and compares it so.
func Text(s string) string {
	if utf8.ValidString(s) && !strings.Contains(s, "\x00") {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}

func (h *hasher) hex() string { return fmt.Sprintf("%064x", h.sum) }
