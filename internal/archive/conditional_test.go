package archive

import (
	"context"
	"strings"
	"testing"
)

// TestConditionalReadsStale: a reader that holds an older version gets the
// full answer, with what changed since; only the current version gets
// NOT_MODIFIED. For session reads, global reads and briefings (whose
// versions are both).
func TestConditionalReadsStale(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t, Options{})
	h := register(t, a, AgentSpec{ID: "a1", SessionID: "s1"})

	t.Run("Session", func(t *testing.T) {
		old := ok(t)(h.UpdateResume(ctx, Resume{Task: "first task"}))
		if sr, err := a.ReadSession(ctx, "s1", old.SV); err != nil || sr.Status != StatusNotModified || sr.Resume != nil {
			t.Fatalf("current version: %+v, %v", sr, err)
		}
		cur := ok(t)(h.UpdateResume(ctx, Resume{Task: "second task"}))
		for _, stale := range []uint64{old.SV, old.SV - 1} {
			sr, err := a.ReadSession(ctx, "s1", stale)
			if err != nil || sr.Status != StatusOK || sr.SV != cur.SV || sr.Resume == nil || sr.Resume.Task != "second task" {
				t.Errorf("stale version %d (current %d): %+v, %v", stale, cur.SV, sr, err)
			}
		}
		if sr, err := a.ReadSession(ctx, "s1", cur.SV); err != nil || sr.Status != StatusNotModified {
			t.Errorf("current version %d: %+v, %v", cur.SV, sr, err)
		}
	})

	t.Run("Global", func(t *testing.T) {
		old := ok(t)(h.RecordPattern(ctx, Pattern{Category: "testing.unit", Pattern: "never sleep in tests; use a fake clock"}))
		if res, err := a.ReadGlobal(ctx, GlobalRead{Kind: "pattern", IfGV: old.GV}); err != nil || res.Status != StatusNotModified || res.Records != nil {
			t.Fatalf("current version: %+v, %v", res, err)
		}
		cur := ok(t)(h.RecordPattern(ctx, Pattern{Category: "error.handling", Pattern: "wrap errors with %w"}))
		for _, stale := range []uint64{old.GV} {
			res, err := a.ReadGlobal(ctx, GlobalRead{Kind: "pattern", IfGV: stale})
			if err != nil || res.Status != StatusOK || res.GV != cur.GV || len(res.Records) != 2 || res.Records[0].ID != cur.ID {
				t.Errorf("stale version %d (current %d): %+v, %v", stale, cur.GV, res, err)
			}
		}
		if res, err := a.ReadGlobal(ctx, GlobalRead{Kind: "pattern", IfGV: cur.GV}); err != nil || res.Status != StatusNotModified {
			t.Errorf("current version %d: %+v, %v", cur.GV, res, err)
		}
	})

	t.Run("Briefing", func(t *testing.T) {
		b, err := a.Briefing(ctx, "s1", Standard, nil)
		if err != nil {
			t.Fatal(err)
		}
		held := Versions{GV: b.GV, SV: b.SV}
		// The session changes: the held sv is stale, the gv current.
		ok(t)(h.UpdateResume(ctx, Resume{Task: "third task"}))
		b2, err := a.Briefing(ctx, "s1", Standard, &held)
		if err != nil || b2.Status != StatusOK || b2.SV == held.SV || b2.GV != held.GV || !strings.Contains(b2.Text, "task: third task") {
			t.Errorf("stale sv, current gv: %+v, %v", b2, err)
		}
		// The global history changes: the held gv is stale, the sv current.
		held = Versions{GV: b2.GV, SV: b2.SV}
		w := ok(t)(h.RecordDecision(ctx, Decision{Decision: "retries use full jitter"}))
		b3, err := a.Briefing(ctx, "s1", Standard, &held)
		if err != nil || b3.Status != StatusOK || b3.GV != w.GV || b3.SV != held.SV || !strings.Contains(b3.Text, w.ID) {
			t.Errorf("stale gv, current sv: %+v, %v", b3, err)
		}
		if nm, err := a.Briefing(ctx, "s1", Standard, &Versions{GV: b3.GV, SV: b3.SV}); err != nil || nm.Status != StatusNotModified || nm.Text != "" {
			t.Errorf("current versions: %+v, %v", nm, err)
		}
	})
}
