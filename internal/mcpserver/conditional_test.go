package mcpserver

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBriefingStaleVersions: the briefing tool's conditional read answers
// NOT_MODIFIED only for the versions that are current; a client holding
// an older session or global version gets the whole briefing, with what
// changed.
func TestBriefingStaleVersions(t *testing.T) {
	cs, _ := newClient(t, Options{Session: "s1", Agent: "a1", Structured: true})
	versions := func(args map[string]any) (string, uint64, uint64) {
		t.Helper()
		text, res := call(t, cs, "briefing", args)
		if res.IsError {
			t.Fatalf("briefing: %s", text)
		}
		var v struct {
			Status string `json:"status"`
			GV     uint64 `json:"gv"`
			SV     uint64 `json:"sv"`
		}
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatal(err)
		}
		return text, v.GV, v.SV
	}
	ok(t, cs, "update_resume", map[string]any{"task": "first task"})
	_, gv, sv := versions(nil)

	// The session moves on: the held sv is stale.
	ok(t, cs, "update_resume", map[string]any{"task": "second task"})
	text, gv2, sv2 := versions(map[string]any{"gv": gv, "sv": sv})
	if strings.HasPrefix(text, "NOT_MODIFIED") || !strings.Contains(text, "task: second task") || sv2 == sv || gv2 != gv {
		t.Errorf("stale sv %d: %q (gv %d, sv %d)", sv, text, gv2, sv2)
	}
	// The global history moves on: the held gv is stale.
	rec := ok(t, cs, "record_pattern", map[string]any{"category": "testing.unit", "pattern": "never sleep in tests; use a fake clock"})
	text, gv3, sv3 := versions(map[string]any{"gv": gv2, "sv": sv2})
	if strings.HasPrefix(text, "NOT_MODIFIED") || !strings.Contains(text, strings.Fields(rec)[1]) || gv3 == gv2 || sv3 != sv2 {
		t.Errorf("stale gv %d: %q (gv %d, sv %d)", gv2, text, gv3, sv3)
	}
	// Both current: NOT_MODIFIED.
	if text, _, _ := versions(map[string]any{"gv": gv3, "sv": sv3}); !strings.HasPrefix(text, "NOT_MODIFIED") {
		t.Errorf("current versions: %q", text)
	}
}
