package archive

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/store/storetest"
)

// twoProcesses opens one store file twice, each with an archive of its
// own, as two engram processes would.
func twoProcesses(t *testing.T) (a, b *Archive, sa, sb *sqlite.Store) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "engram.db")
	sa = sqlitetest.OpenPath(t, path, sqlite.Options{})
	sb = sqlitetest.OpenPath(t, path, sqlite.Options{})
	var err error
	if a, err = New(sa, Options{}); err != nil {
		t.Fatal(err)
	}
	if b, err = New(sb, Options{}); err != nil {
		t.Fatal(err)
	}
	return a, b, sa, sb
}

func globalIDs(t *testing.T, a *Archive) []string {
	t.Helper()
	res, err := a.ReadGlobal(context.Background(), GlobalRead{All: true})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range res.Records {
		ids = append(ids, r.ID)
	}
	slices.Sort(ids)
	return ids
}

func briefingText(t *testing.T, a *Archive, session string) string {
	t.Helper()
	br, err := a.Briefing(context.Background(), session, Full, nil)
	if err != nil {
		t.Fatal(err)
	}
	return br.Text
}

// TestForget_OtherProcessForgets forgets a record through one process and
// checks that another, whose mirror and caches already hold it, no longer
// shows it anywhere: reads, briefings, duplicates.
func TestForget_OtherProcessForgets(t *testing.T) {
	ctx := context.Background()
	a, b, sa, _ := twoProcesses(t)
	ha := register(t, a, AgentSpec{ID: "a1", SessionID: "s1"})
	hb := register(t, b, AgentSpec{ID: "b1", SessionID: "s2"})
	p := ok(t)(ha.RecordPattern(ctx, Pattern{Category: "error.handling", Pattern: "always wrap errors with the operation name", Authority: Mandated}))
	keep := ok(t)(ha.RecordInsight(ctx, Insight{Insight: "the cache warms in two seconds"}))
	if ids := globalIDs(t, b); !slices.Contains(ids, p.ID) {
		t.Fatalf("process b does not see %s: %v", p.ID, ids)
	}
	if !strings.Contains(briefingText(t, b, "s2"), "always wrap errors") {
		t.Fatal("the mandated pattern is not in the other session's briefing")
	}

	if _, err := sa.Forget(ctx, store.ForgetRequest{Records: []string{p.ID}, Actor: "op"}); err != nil {
		t.Fatal(err)
	}
	if ids := globalIDs(t, b); !slices.Equal(ids, []string{keep.ID}) {
		t.Errorf("process b reads %v after %s was forgotten, want only %s", ids, p.ID, keep.ID)
	}
	if text := briefingText(t, b, "s2"); strings.Contains(text, "always wrap errors") {
		t.Errorf("process b's briefing still shows the forgotten pattern:\n%s", text)
	}
	// Written again, it is new: not merged into the record forgotten.
	wr := ok(t)(hb.RecordPattern(ctx, Pattern{Category: "error.handling", Pattern: "always wrap errors with the operation name"}))
	if wr.Status != "created" || wr.ID == p.ID {
		t.Errorf("writing the forgotten pattern again: %+v", wr)
	}
}

// TestRedact_OtherProcessSees redacts a string through one process and
// checks that the other shows it nowhere: global reads, session state,
// briefings, and duplicate detection, whose caches held the old text.
func TestRedact_OtherProcessSees(t *testing.T) {
	ctx := context.Background()
	a, b, sa, _ := twoProcesses(t)
	// Not of a format the secrets rules know, which writes redact
	// themselves: the kind of secret that slips through to be redacted.
	const secret = "billing-internal-passphrase-Qz7xK2vLm9"
	ha := register(t, a, AgentSpec{ID: "a1", SessionID: "s1"})
	hb := register(t, b, AgentSpec{ID: "b1", SessionID: "s1"})
	text := "call the billing api with " + secret
	ins := ok(t)(ha.RecordInsight(ctx, Insight{Insight: text}))
	ok(t)(ha.UpdateResume(ctx, Resume{Task: "rotate " + secret}))
	// Process b reads everything, which fills its mirror and caches, and
	// finds the insight a duplicate of itself.
	if wr := ok(t)(hb.RecordInsight(ctx, Insight{Insight: text})); wr.Status != "merged" {
		t.Fatalf("the same insight again: %+v", wr)
	}
	st, err := b.ReadSession(ctx, "s1", 0)
	if err != nil || !strings.Contains(st.Resume.Task, secret) {
		t.Fatalf("ReadSession = %+v, %v", st, err)
	}
	if !strings.Contains(briefingText(t, b, "s1"), secret) {
		t.Fatal("the briefing does not show the resume task")
	}

	rep, err := sa.Redact(ctx, store.RedactRequest{Text: []byte(secret), Actor: "op", Rechunk: storetest.Rechunk, Rederive: Rederive})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Counts.Records != 2 {
		t.Errorf("redacted %d records, want the insight and the resume", rep.Counts.Records)
	}
	res, err := b.ReadGlobal(ctx, GlobalRead{All: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Records {
		if strings.Contains(r.Text(), secret) {
			t.Errorf("process b reads %s as %q", r.ID, r.Text())
		}
	}
	st, err = b.ReadSession(ctx, "s1", 0)
	if err != nil || strings.Contains(st.Resume.Task, secret) || st.Resume.Task != "rotate "+store.DefaultMarker {
		t.Errorf("process b's session state: %+v, %v", st.Resume, err)
	}
	if text := briefingText(t, b, "s1"); strings.Contains(text, secret) {
		t.Errorf("process b's briefing shows it:\n%s", text)
	}
	// The insight with the string is no longer a duplicate of the record
	// that held it: its hash and trigrams are those of the redacted text.
	wr := ok(t)(hb.RecordInsight(ctx, Insight{Insight: text}))
	if wr.Status != "created" {
		t.Errorf("the old text again: %+v, want created (the redacted %s is another text now)", wr, ins.ID)
	}
}
