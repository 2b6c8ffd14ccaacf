package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sergi/go-diff/diffmatchpatch"

	"github.com/engramhq/engram/internal/assemble"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/window"
)

// Turn snapshots: every turn WindowAssemble assembles is kept, as the
// exact messages it returned (in engram's format, whatever format was
// asked: the body, stored once by its SHA-256 however many turns share
// it) and its report (AssembleOut without the messages). A snapshot is
// named by its hash, a prefix of it (8 hex digits at least), its number
// in the window, or "latest". The operations here list a window's
// snapshots, show one, diff two, and report where a window stands with
// its latest turn (WindowTurnStatus).

const (
	// KeepSnapshots is how many snapshots a window keeps: the newest.
	// A body is as large as the context it holds, so the oldest go.
	KeepSnapshots = 200
	// MaxDiffLines bounds each side of a diff, in lines of the rendered
	// context (some 200,000 tokens of text).
	MaxDiffLines = 20_000
	// diffTimeout bounds the line diff's search: past it, the diff is
	// still right but may not be the shortest. Within MaxDiffLines it is
	// not reached on this machine; it guards against a slower one.
	diffTimeout = 10 * time.Second
	// diffContext is the lines of context around each hunk.
	diffContext = 3
	// latest names a window's newest snapshot.
	latest = "latest"
)

// SnapshotLimitRange is the range of a list of snapshots' length.
var SnapshotLimitRange = Range{Name: "limit", Min: 1, Max: 1000, Default: 20}

// SnapshotsIn lists a window's snapshots.
type SnapshotsIn struct {
	Session string `json:"session,omitempty"`
	Agent   string `json:"agent,omitempty"`
	Limit   int    `json:"limit,omitempty" jsonschema:"most snapshots, newest first, 1-1000 (default 20)"`
}

// SnapshotIn names one snapshot of a window.
type SnapshotIn struct {
	Session string `json:"session,omitempty"`
	Agent   string `json:"agent,omitempty"`
	// Snapshot is a hash, a prefix of one (8 hex digits at least), the
	// snapshot's number in the window, or "latest" (the default).
	Snapshot string `json:"snapshot,omitempty"`
	Format   string `json:"format,omitempty" jsonschema:"engram (default), anthropic or openai"`
}

// SnapshotDiffIn names two snapshots of a window to compare.
type SnapshotDiffIn struct {
	Session string `json:"session,omitempty"`
	Agent   string `json:"agent,omitempty"`
	// From and To are as SnapshotIn.Snapshot; To defaults to "latest".
	From string `json:"from"`
	To   string `json:"to,omitempty"`
}

// SnapshotOut is a snapshot: which turn of which window, its size, and,
// shown alone, its messages and report.
type SnapshotOut struct {
	Snapshot string    `json:"snapshot"`
	Seq      int64     `json:"seq"`
	Session  string    `json:"session"`
	Agent    string    `json:"agent"`
	Version  int64     `json:"version"`
	At       time.Time `json:"at"`
	Bytes    int       `json:"bytes"`
	Budget   int       `json:"budget"`
	Tokens   int       `json:"tokens"`
	// Format, Messages and Report are set when a snapshot is shown: the
	// messages sent, in Format, and the assembly's report, as
	// WindowAssemble gave it (without the messages).
	Format   string            `json:"format,omitempty"`
	Messages []json.RawMessage `json:"messages,omitempty"`
	Report   json.RawMessage   `json:"report,omitempty"`
}

// SnapshotsOut is a window's snapshots, newest first.
type SnapshotsOut struct {
	Session   string        `json:"session"`
	Agent     string        `json:"agent"`
	Snapshots []SnapshotOut `json:"snapshots"`
}

// DeltaOut is a number in two snapshots, and how it changed.
type DeltaOut struct {
	From  int `json:"from"`
	To    int `json:"to"`
	Delta int `json:"delta"`
}

func delta(a, b int) DeltaOut { return DeltaOut{From: a, To: b, Delta: b - a} }

// LayerDeltaOut is how a layer's share changed between two snapshots; a
// layer one of them lacks counts zero there.
type LayerDeltaOut struct {
	Name      string   `json:"name"`
	Allocated DeltaOut `json:"allocated"`
	Used      DeltaOut `json:"used"`
}

// SnapshotDiffOut compares two snapshots: their contexts as text, line by
// line (Diff, unified, each message a block under its role's header),
// and the numbers of their reports.
type SnapshotDiffOut struct {
	From SnapshotOut `json:"from"`
	To   SnapshotOut `json:"to"`
	// Same is true when the two sent the same messages (one hash).
	Same    bool            `json:"same"`
	Added   int             `json:"added"`
	Removed int             `json:"removed"`
	Diff    string          `json:"diff"`
	Budget  DeltaOut        `json:"budget"`
	Tokens  DeltaOut        `json:"tokens"`
	Layers  []LayerDeltaOut `json:"layers"`
}

// SavingsOut compares the conversation whole with what a turn sent of
// it: History is its tokens whole, Sent those of the messages shown and
// the markers standing for the rest, Ratio Sent over History (0 without
// a history).
type SavingsOut struct {
	History int     `json:"history"`
	Sent    int     `json:"sent"`
	Saved   int     `json:"saved"`
	Ratio   float64 `json:"ratio"`
}

// AssembledOut is a window's latest assembled turn, from its snapshot.
type AssembledOut struct {
	Snapshot string    `json:"snapshot"`
	Seq      int64     `json:"seq"`
	At       time.Time `json:"at"`
	// Version is the window's version the turn was assembled at; Current
	// says the window has not changed since.
	Version int64 `json:"version"`
	Current bool  `json:"current"`
	Budget  int   `json:"budget"`
	Tokens  int   `json:"tokens"`
	// Layers are the allocation per layer.
	Layers []LayerOut `json:"layers"`
	// Strategy is how the history was compacted (full, windowed,
	// compacted, multi_level), Zones how each run of it was shown.
	Strategy string          `json:"strategy"`
	Zones    []assemble.Zone `json:"zones"`
	// Refs are the markers the turn's history showed; Evicted the
	// window's messages out of it at the time.
	Refs    int        `json:"refs"`
	Evicted int        `json:"evicted"`
	Savings SavingsOut `json:"savings"`
	// Report is the whole report, whatever else it holds.
	Report json.RawMessage `json:"report"`
}

// TurnStatusOut is where a window stands, as WindowStatus gives it, and
// its latest assembled turn: left out before the first (the API writes
// no nulls).
type TurnStatusOut struct {
	Window    WindowOut     `json:"window"`
	Assembled *AssembledOut `json:"assembled,omitempty"`
}

// reportFields are the fields of a report the snapshot operations read;
// the rest is kept as it came.
type reportFields struct {
	Budget int        `json:"budget"`
	Tokens int        `json:"tokens"`
	Layers []LayerOut `json:"layers"`
	Window struct {
		Evicted int `json:"evicted"`
	} `json:"window"`
	History struct {
		Strategy string          `json:"strategy"`
		Zones    []assemble.Zone `json:"zones"`
		Refs     int             `json:"refs"`
		Tokens   int             `json:"tokens"`
		Whole    int             `json:"whole"`
	} `json:"history"`
}

func readReport(snap store.WindowSnapshot) (reportFields, error) {
	var r reportFields
	if err := json.Unmarshal(snap.Report, &r); err != nil {
		return r, fmt.Errorf("snapshot %s: report: %w", snap.Hash, err)
	}
	return r, nil
}

// snapshotBody is the canonical JSON of a turn's messages: a list of
// them in engram's format, compact, as EncodeMessage writes them.
func snapshotBody(msgs []window.Message) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, m := range msgs {
		raw, err := EncodeMessage(FormatEngram, m)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		if err := json.Compact(&b, raw); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
	}
	b.WriteByte(']')
	return b.Bytes(), nil
}

// snapshotReport is out without its messages (and the snapshot it is
// about to get): whatever else AssembleOut holds is kept, so fields added
// to it are kept too.
func snapshotReport(out AssembleOut) ([]byte, error) {
	out.Messages = nil
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, err
	}
	delete(fields, "messages")
	delete(fields, "snapshot")
	return json.Marshal(fields)
}

// recordSnapshot keeps a turn: its messages and out's report. It returns
// the snapshot's hash.
func (o *Ops) recordSnapshot(ctx context.Context, k store.WindowKey, msgs []window.Message, out AssembleOut) (string, error) {
	body, err := snapshotBody(msgs)
	if err != nil {
		return "", err
	}
	report, err := snapshotReport(out)
	if err != nil {
		return "", err
	}
	snap, err := o.Eng.Store().PutSnapshot(ctx, store.WindowSnapshot{WindowKey: k, Body: body, Report: report, Version: out.Window.Version}, KeepSnapshots)
	if err != nil {
		return "", err
	}
	return snap.Hash, nil
}

// findSnapshot reads the snapshot id names in a window: a hash, a prefix
// of one, a number shorter than a prefix, or latest (or empty).
func (o *Ops) findSnapshot(ctx context.Context, k store.WindowKey, id string) (store.WindowSnapshot, error) {
	id = strings.TrimSpace(id)
	var (
		snap store.WindowSnapshot
		err  error
	)
	switch seq, nerr := strconv.ParseInt(id, 10, 64); {
	case id == "" || id == latest:
		var list []store.WindowSnapshot
		switch list, err = o.Eng.Store().Snapshots(ctx, k, 1); {
		case err != nil:
		case len(list) == 0:
			return snap, fmt.Errorf("window %s has no snapshot: no turn was assembled: %w", k, store.ErrNotFound)
		default:
			snap, err = o.Eng.Store().SnapshotAt(ctx, k, list[0].Seq)
		}
	case nerr == nil && len(id) < store.MinSnapshotPrefix:
		if seq < 1 {
			return snap, bad("snapshot %s: numbers start at 1", id)
		}
		snap, err = o.Eng.Store().SnapshotAt(ctx, k, seq)
	default:
		snap, err = o.Eng.Store().Snapshot(ctx, k, id)
	}
	var ae *store.AmbiguousError
	if errors.As(err, &ae) {
		return snap, bad("snapshot %s is ambiguous: it starts %s; give more of the hash", id, strings.Join(ae.Matches, ", "))
	}
	if errors.Is(err, store.ErrNotFound) {
		// Say whether the window or the snapshot is missing.
		if _, werr := o.Eng.Store().Window(ctx, k); errors.Is(werr, store.ErrNotFound) {
			return snap, noWindow(k)
		}
	}
	return snap, err
}

// noWindow says there is no window k, as the window package says it.
func noWindow(k store.WindowKey) error {
	return fmt.Errorf("no window for agent %q of session %q (open it first): %w", k.AgentID, k.SessionID, store.ErrNotFound)
}

func snapshotOut(snap store.WindowSnapshot, r reportFields) SnapshotOut {
	return SnapshotOut{Snapshot: snap.Hash, Seq: snap.Seq, Session: snap.SessionID, Agent: snap.AgentID, Version: snap.Version,
		At: snap.CreatedAt, Bytes: snap.Size, Budget: r.Budget, Tokens: r.Tokens}
}

// short is a hash's first 12 digits, as texts show it.
func short(hash string) string { return hash[:min(12, len(hash))] }

// WindowSnapshots lists a window's snapshots, newest first.
func (o *Ops) WindowSnapshots(ctx context.Context, in SnapshotsIn) (SnapshotsOut, string, error) {
	limit, err := SnapshotLimitRange.Check(in.Limit)
	if err != nil {
		return SnapshotsOut{}, "", err
	}
	k, err := o.findKey(ctx, in.Session, in.Agent)
	if err != nil {
		return SnapshotsOut{}, "", err
	}
	list, err := o.Eng.Store().Snapshots(ctx, k, limit)
	if errors.Is(err, store.ErrNotFound) {
		return SnapshotsOut{}, "", noWindow(k)
	}
	if err != nil {
		return SnapshotsOut{}, "", err
	}
	out := SnapshotsOut{Session: k.SessionID, Agent: k.AgentID, Snapshots: make([]SnapshotOut, 0, len(list))}
	var b strings.Builder
	for _, snap := range list {
		r, err := readReport(snap)
		if err != nil {
			return SnapshotsOut{}, "", err
		}
		so := snapshotOut(snap, r)
		out.Snapshots = append(out.Snapshots, so)
		fmt.Fprintf(&b, "%4d  %s  %s  window version %d  %d of %d tokens\n", so.Seq, short(so.Snapshot),
			so.At.Local().Format(time.DateTime), so.Version, so.Tokens, so.Budget)
	}
	if len(list) == 0 {
		fmt.Fprintf(&b, "window %s has no snapshot: no turn was assembled", k)
	} else {
		fmt.Fprintf(&b, "(%s of window %s, newest first)", plural(len(list), "snapshot"), k)
	}
	return out, b.String(), nil
}

// snapshotMessages decodes a snapshot's body.
func snapshotMessages(snap store.WindowSnapshot) ([]json.RawMessage, []window.Message, error) {
	var raws []json.RawMessage
	if err := json.Unmarshal(snap.Body, &raws); err != nil {
		return nil, nil, fmt.Errorf("snapshot %s: body: %w", snap.Hash, err)
	}
	msgs := make([]window.Message, len(raws))
	for i, raw := range raws {
		if err := json.Unmarshal(raw, &msgs[i]); err != nil {
			return nil, nil, fmt.Errorf("snapshot %s: message %d: %w", snap.Hash, i, err)
		}
	}
	return raws, msgs, nil
}

// WindowSnapshot shows a snapshot: the messages of its turn, in the
// format asked for (byte for byte as assembled, in engram's), and its
// report.
func (o *Ops) WindowSnapshot(ctx context.Context, in SnapshotIn) (SnapshotOut, string, error) {
	f, err := ParseFormat(in.Format)
	if err != nil {
		return SnapshotOut{}, "", err
	}
	k, err := o.findKey(ctx, in.Session, in.Agent)
	if err != nil {
		return SnapshotOut{}, "", err
	}
	snap, err := o.findSnapshot(ctx, k, in.Snapshot)
	if err != nil {
		return SnapshotOut{}, "", err
	}
	r, err := readReport(snap)
	if err != nil {
		return SnapshotOut{}, "", err
	}
	raws, msgs, err := snapshotMessages(snap)
	if err != nil {
		return SnapshotOut{}, "", err
	}
	out := snapshotOut(snap, r)
	out.Format, out.Report, out.Messages = f, snap.Report, raws
	if f != FormatEngram {
		out.Messages = make([]json.RawMessage, len(msgs))
		for i, m := range msgs {
			if out.Messages[i], err = EncodeMessage(f, m); err != nil {
				return SnapshotOut{}, "", fmt.Errorf("message %d: %w", i, err)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "snapshot %d of window %s: %s\nassembled %s at window version %d\n", snap.Seq, k, snap.Hash,
		snap.CreatedAt.Local().Format(time.DateTime), snap.Version)
	for i, m := range msgs {
		writeMessage(&b, i, m)
	}
	fmt.Fprintf(&b, "(%s, %d of %d tokens)\n", plural(len(msgs), "message"), r.Tokens, r.Budget)
	writeLayers(&b, r.Layers)
	return out, strings.TrimSuffix(b.String(), "\n"), nil
}

func writeLayers(b *strings.Builder, layers []LayerOut) {
	for _, l := range layers {
		fmt.Fprintf(b, "%-16s %6d of %6d allocated (min %d, ideal %d, max %d)\n", l.Name, l.Used, l.Allocated, l.Min, l.Ideal, l.Max)
	}
}

// renderContext is a turn's messages as text, one block per message
// under a header of its place, role and tokens.
func renderContext(msgs []window.Message) string {
	var b strings.Builder
	for i, m := range msgs {
		writeMessage(&b, i, m)
	}
	return b.String()
}

// WindowSnapshotDiff compares two snapshots of a window: a line diff of
// their contexts as text, and how the budget, the tokens and each
// layer's allocation and use changed from From to To.
func (o *Ops) WindowSnapshotDiff(ctx context.Context, in SnapshotDiffIn) (SnapshotDiffOut, string, error) {
	if strings.TrimSpace(in.From) == "" {
		return SnapshotDiffOut{}, "", bad("name the snapshot to compare from: a hash, a prefix of 8 hex digits or more, a number or latest")
	}
	k, err := o.findKey(ctx, in.Session, in.Agent)
	if err != nil {
		return SnapshotDiffOut{}, "", err
	}
	var (
		snaps [2]store.WindowSnapshot
		rs    [2]reportFields
		texts [2]string
	)
	for i, id := range []string{in.From, in.To} {
		if snaps[i], err = o.findSnapshot(ctx, k, id); err != nil {
			return SnapshotDiffOut{}, "", err
		}
		if rs[i], err = readReport(snaps[i]); err != nil {
			return SnapshotDiffOut{}, "", err
		}
		_, msgs, err := snapshotMessages(snaps[i])
		if err != nil {
			return SnapshotDiffOut{}, "", err
		}
		texts[i] = renderContext(msgs)
		if n := strings.Count(texts[i], "\n"); n > MaxDiffLines {
			return SnapshotDiffOut{}, "", bad("snapshot %d is %d lines as text; a diff takes at most %d a side: show the snapshots instead", snaps[i].Seq, n, MaxDiffLines)
		}
	}
	out := SnapshotDiffOut{From: snapshotOut(snaps[0], rs[0]), To: snapshotOut(snaps[1], rs[1]), Same: snaps[0].Hash == snaps[1].Hash,
		Budget: delta(rs[0].Budget, rs[1].Budget), Tokens: delta(rs[0].Tokens, rs[1].Tokens), Layers: layerDeltas(rs[0].Layers, rs[1].Layers)}
	names := [2]string{fmt.Sprintf("snapshot %d (%s)", snaps[0].Seq, short(snaps[0].Hash)), fmt.Sprintf("snapshot %d (%s)", snaps[1].Seq, short(snaps[1].Hash))}
	out.Diff, out.Added, out.Removed = lineDiff(names[0], names[1], texts[0], texts[1])
	var b strings.Builder
	if out.Same {
		fmt.Fprintf(&b, "%s and %s sent the same messages\n", names[0], names[1])
	} else {
		b.WriteString(out.Diff)
	}
	fmt.Fprintf(&b, "lines: +%d -%d; tokens %d -> %d (%+d); budget %d -> %d (%+d)\n", out.Added, out.Removed,
		out.Tokens.From, out.Tokens.To, out.Tokens.Delta, out.Budget.From, out.Budget.To, out.Budget.Delta)
	for _, l := range out.Layers {
		fmt.Fprintf(&b, "%-16s allocated %6d -> %6d (%+d), used %6d -> %6d (%+d)\n", l.Name, l.Allocated.From, l.Allocated.To,
			l.Allocated.Delta, l.Used.From, l.Used.To, l.Used.Delta)
	}
	return out, strings.TrimSuffix(b.String(), "\n"), nil
}

// layerDeltas pairs the layers of two reports by name: those of b in
// its order, then those only a has.
func layerDeltas(a, b []LayerOut) []LayerDeltaOut {
	inA := map[string]LayerOut{}
	for _, l := range a {
		inA[l.Name] = l
	}
	out := []LayerDeltaOut{}
	seen := map[string]bool{}
	for _, l := range b {
		p := inA[l.Name]
		out = append(out, LayerDeltaOut{Name: l.Name, Allocated: delta(p.Allocated, l.Allocated), Used: delta(p.Used, l.Used)})
		seen[l.Name] = true
	}
	for _, l := range a {
		if !seen[l.Name] {
			out = append(out, LayerDeltaOut{Name: l.Name, Allocated: delta(l.Allocated, 0), Used: delta(l.Used, 0)})
		}
	}
	return out
}

// lineOp is a line of a diff: ' ' in both, '-' only in the first, '+'
// only in the second.
type lineOp struct {
	kind byte
	text string
}

// lineDiff is a unified diff of two texts, line by line, with
// diffContext lines around each hunk, and the lines added and removed.
// Empty when they are the same.
func lineDiff(nameA, nameB, a, b string) (string, int, int) {
	if a == b {
		return "", 0, 0
	}
	dmp := diffmatchpatch.New()
	dmp.DiffTimeout = diffTimeout
	ra, rb, lines := dmp.DiffLinesToRunes(a, b)
	diffs := dmp.DiffCharsToLines(dmp.DiffMainRunes(ra, rb, false), lines)
	var (
		ops            []lineOp
		added, removed int
	)
	for _, d := range diffs {
		kind := byte(' ')
		switch d.Type {
		case diffmatchpatch.DiffInsert:
			kind = '+'
		case diffmatchpatch.DiffDelete:
			kind = '-'
		}
		for _, l := range strings.SplitAfter(d.Text, "\n") {
			if l == "" {
				continue
			}
			ops = append(ops, lineOp{kind, l})
			switch kind {
			case '+':
				added++
			case '-':
				removed++
			}
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", nameA, nameB)
	// Hunks: runs of changes, each with diffContext lines either side;
	// two closer than twice that are one.
	lineA, lineB := make([]int, len(ops)+1), make([]int, len(ops)+1)
	for i, op := range ops {
		lineA[i+1], lineB[i+1] = lineA[i], lineB[i]
		if op.kind != '+' {
			lineA[i+1]++
		}
		if op.kind != '-' {
			lineB[i+1]++
		}
	}
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		start, end := max(0, i-diffContext), i
		for j := i; j < len(ops); j++ {
			if ops[j].kind != ' ' {
				end = j + 1
			} else if j-end >= 2*diffContext {
				break
			}
		}
		end = min(len(ops), end+diffContext)
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(lineA[start], lineA[end]), hunkRange(lineB[start], lineB[end]))
		for _, op := range ops[start:end] {
			out.WriteByte(op.kind)
			out.WriteString(op.text)
			if !strings.HasSuffix(op.text, "\n") {
				out.WriteString("\n\\ No newline at end of file\n")
			}
		}
		i = end
	}
	return out.String(), added, removed
}

// hunkRange is a hunk's lines [from, to) of one side, as a unified diff
// writes them: first line (from 1) and count.
func hunkRange(from, to int) string {
	switch n := to - from; n {
	case 0:
		return fmt.Sprintf("%d,0", from)
	case 1:
		return strconv.Itoa(from + 1)
	}
	return fmt.Sprintf("%d,%d", from+1, to-from)
}

// WindowTurnStatus reports where a window stands, as WindowStatus does,
// with its latest assembled turn: the allocation per layer, the strategy
// (when the report has one), the markers and evictions, and what the
// turn saved of the whole conversation.
func (o *Ops) WindowTurnStatus(ctx context.Context, in WindowIn) (TurnStatusOut, string, error) {
	w, text, err := o.WindowStatus(ctx, in)
	if err != nil {
		return TurnStatusOut{}, "", err
	}
	out := TurnStatusOut{Window: w}
	k := store.WindowKey{SessionID: w.Session, AgentID: w.Agent}
	list, err := o.Eng.Store().Snapshots(ctx, k, 1)
	if err != nil {
		return TurnStatusOut{}, "", err
	}
	if len(list) == 0 {
		return out, text, nil
	}
	snap := list[0]
	r, err := readReport(snap)
	if err != nil {
		return TurnStatusOut{}, "", err
	}
	a := &AssembledOut{Snapshot: snap.Hash, Seq: snap.Seq, At: snap.CreatedAt, Version: snap.Version, Current: snap.Version == w.Version,
		Budget: r.Budget, Tokens: r.Tokens, Layers: r.Layers, Strategy: r.History.Strategy, Zones: r.History.Zones, Refs: r.History.Refs, Evicted: r.Window.Evicted,
		Savings: savingsOf(r), Report: snap.Report}
	if a.Layers == nil {
		a.Layers = []LayerOut{}
	}
	if a.Zones == nil {
		a.Zones = []assemble.Zone{}
	}
	out.Assembled = a
	var b strings.Builder
	b.WriteString(text + "\n")
	since := "the window has not changed since"
	if !a.Current {
		since = fmt.Sprintf("the window is at version %d now", w.Version)
	}
	fmt.Fprintf(&b, "latest turn: snapshot %d (%s), %s, at window version %d (%s): %d of %d tokens\n", a.Seq, short(a.Snapshot),
		a.At.Local().Format(time.DateTime), a.Version, since, a.Tokens, a.Budget)
	if a.Strategy != "" {
		fmt.Fprintf(&b, "strategy: %s\n", a.Strategy)
	}
	for _, z := range a.Zones {
		fmt.Fprintf(&b, "  %-8s messages %d to %d (%d): %d of %d tokens\n", z.Form, z.From+1, z.To, z.Messages, z.Tokens, z.Budget)
	}
	writeLayers(&b, a.Layers)
	fmt.Fprintf(&b, "history: %s for %d evicted messages; %d tokens sent of %d whole (%.0f%%), %d saved",
		plural(a.Refs, "marker"), a.Evicted, a.Savings.Sent, a.Savings.History, 100*a.Savings.Ratio, a.Savings.Saved)
	return out, b.String(), nil
}
