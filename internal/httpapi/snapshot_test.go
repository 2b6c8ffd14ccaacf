package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/store"
)

type assembled struct {
	Snapshot string
	Messages []json.RawMessage
	Tokens   int
	Layers   []struct {
		Name            string
		Allocated, Used int
	}
	History struct {
		Whole, Tokens int
		Strategy      string
	}
}

func (c client) assemble(w, body string) assembled {
	c.t.Helper()
	_, b := c.want(200, "POST", w+"/assemble", body, `"snapshot":"`, "X-Engram-Session", strings.Split(w, "/")[3])
	var out assembled
	if err := json.Unmarshal([]byte(b), &out); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// TestWindowsSnapshots: every assembly is kept under the SHA-256 of its
// messages in engram's format; the same state gives the same snapshot,
// an append a new one; snapshots list newest first, show the very
// messages in any format with the report, diff as lines and layer
// deltas; the status shows the latest turn's allocation per layer; bad
// input is a 4xx with a JSON error.
func TestWindowsSnapshots(t *testing.T) {
	eng := newEngine(t)
	srv := httptest.NewServer(Handler(eng, Options{Token: "tok"}))
	defer srv.Close()
	c := client{t, srv.URL}
	const w = "/v1/windows/s1/claude"
	c.want(404, "GET", w+"/status", "", "no window for agent")
	c.want(404, "GET", w+"/snapshots", "", "no window for agent")
	c.want(200, "PUT", w, `{"limit":3000,"output":200,"safety":100}`, "")
	c.want(201, "POST", w+"/messages", `{"messages":[{"role":"system","content":"You are a careful engineer."}]}`, "")
	for i := range 6 {
		c.want(201, "POST", w+"/messages", appendBody("anthropic", anthropicTurn(i)...), "")
	}
	// Before the first turn: the window alone.
	_, b := c.want(200, "GET", w+"/status", "", `"window":{"session":"s1","agent":"claude"`)
	checkJSON(t, "status", b)
	if strings.Contains(b, `"assembled"`) {
		t.Errorf("status before the first turn: %s", b)
	}
	c.want(200, "GET", w+"/snapshots", "", `"snapshots":[]`)
	c.want(404, "GET", w+"/snapshots/latest", "", "no turn was assembled")

	const ask = `{"message":"Why does handler2 serve requests slowly?","tools":300`
	first := c.assemble(w, ask+`}`)
	again := c.assemble(w, ask+`,"format":"anthropic"}`)
	if again.Snapshot != first.Snapshot {
		t.Errorf("the same state assembled twice: snapshots %s and %s", first.Snapshot, again.Snapshot)
	}
	var raws []string
	for _, m := range first.Messages {
		raws = append(raws, string(m))
	}
	sum := sha256.Sum256([]byte("[" + strings.Join(raws, ",") + "]"))
	if hex.EncodeToString(sum[:]) != first.Snapshot {
		t.Errorf("snapshot %s is not the SHA-256 of the messages sent, %x", first.Snapshot, sum)
	}
	c.want(201, "POST", w+"/messages", appendBody("anthropic", anthropicTurn(6)...), "")
	third := c.assemble(w, ask+`}`)
	if third.Snapshot == first.Snapshot {
		t.Fatal("an append did not change the snapshot")
	}

	// Listed newest first; the first two share a body.
	_, b = c.want(200, "GET", w+"/snapshots?limit=5", "", "")
	checkJSON(t, "snapshots", b)
	var list struct {
		Snapshots []struct {
			Snapshot       string
			Seq            int64
			Tokens, Budget int
			Bytes          int
		}
	}
	if err := json.Unmarshal([]byte(b), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Snapshots) != 3 || list.Snapshots[0].Seq != 3 || list.Snapshots[0].Snapshot != third.Snapshot ||
		list.Snapshots[1].Snapshot != first.Snapshot || list.Snapshots[2].Snapshot != first.Snapshot ||
		list.Snapshots[0].Tokens != third.Tokens || list.Snapshots[0].Budget != 2430-300 || list.Snapshots[0].Bytes == 0 {
		t.Errorf("snapshots: %s", b)
	}
	if _, b := c.want(200, "GET", w+"/snapshots?limit=1", "", ""); strings.Count(b, `"seq"`) != 1 {
		t.Errorf("limit=1: %s", b)
	}

	// Shown: the very messages, in engram's format and Anthropic's, and
	// the report (the layers) without them.
	for _, tc := range []struct {
		id, format string
		want       []json.RawMessage
	}{
		{first.Snapshot, "", first.Messages},
		{first.Snapshot[:8], "anthropic", again.Messages},
		{strings.ToUpper(first.Snapshot[:16]), "engram", first.Messages},
		{"1", "", first.Messages},
		{"latest", "", third.Messages},
	} {
		_, b := c.want(200, "GET", w+"/snapshots/"+tc.id+"?format="+tc.format, "", "")
		checkJSON(t, "snapshot", b)
		var shown struct {
			Snapshot string
			Messages []json.RawMessage
			Report   struct {
				Layers   []struct{ Name string }
				Messages json.RawMessage
				Window   struct{ Session string }
			}
		}
		if err := json.Unmarshal([]byte(b), &shown); err != nil {
			t.Fatal(err)
		}
		if len(shown.Messages) != len(tc.want) {
			t.Fatalf("snapshot %s: %d messages, want %d", tc.id, len(shown.Messages), len(tc.want))
		}
		for i := range tc.want {
			if !sameJSON(t, string(shown.Messages[i]), string(tc.want[i])) {
				t.Errorf("snapshot %s (%s) message %d: %s, want %s", tc.id, tc.format, i, shown.Messages[i], tc.want[i])
			}
		}
		if len(shown.Report.Layers) != len(first.Layers) || shown.Report.Messages != nil || shown.Report.Window.Session != "s1" {
			t.Errorf("snapshot %s report: %+v", tc.id, shown.Report)
		}
	}

	// Diffed (a hash names the newest turn that sent it, 2): the appended turn's answer is added (its tool's output may
	// stand under a marker, as the compaction chooses); tokens and layers carry their deltas.
	_, b = c.want(200, "GET", w+"/snapshots/"+first.Snapshot[:10]+"/diff/"+third.Snapshot[:10], "", "")
	checkJSON(t, "diff", b)
	var diff struct {
		Same           bool
		Added, Removed int
		Diff           string
		Tokens         struct{ From, To, Delta int }
		Layers         []struct {
			Name      string
			Allocated struct{ From, To, Delta int }
			Used      struct{ From, To, Delta int }
		}
	}
	if err := json.Unmarshal([]byte(b), &diff); err != nil {
		t.Fatal(err)
	}
	if diff.Same || diff.Added == 0 || !strings.HasPrefix(diff.Diff, "--- snapshot 2 ("+first.Snapshot[:12]+")\n+++ snapshot 3 (") ||
		!strings.Contains(diff.Diff, "\n+handler6 serves requests.\n") || !strings.Contains(diff.Diff, "\n@@ -") {
		t.Errorf("diff: added %d, removed %d\n%s", diff.Added, diff.Removed, diff.Diff)
	}
	if diff.Tokens.From != first.Tokens || diff.Tokens.To != third.Tokens || diff.Tokens.Delta != third.Tokens-first.Tokens {
		t.Errorf("diff tokens: %+v, want %d -> %d", diff.Tokens, first.Tokens, third.Tokens)
	}
	if len(diff.Layers) != len(third.Layers) {
		t.Fatalf("diff layers: %+v", diff.Layers)
	}
	for i, l := range diff.Layers {
		if l.Name != third.Layers[i].Name || l.Used.To != third.Layers[i].Used || l.Used.From != first.Layers[i].Used ||
			l.Allocated.Delta != third.Layers[i].Allocated-first.Layers[i].Allocated {
			t.Errorf("layer %d delta %+v; from %+v to %+v", i, l, first.Layers[i], third.Layers[i])
		}
	}
	if _, b := c.want(200, "GET", w+"/snapshots/1/diff/2", "", `"same":true`); !strings.Contains(b, `"diff":""`) {
		t.Errorf("a diff of one body: %s", b)
	}

	// The status: the window, and the latest turn's allocation per
	// layer and savings.
	_, b = c.want(200, "GET", w+"/status", "", "")
	checkJSON(t, "status", b)
	var st struct {
		Window    struct{ Session, Agent string }
		Assembled *struct {
			Snapshot string
			Strategy string
			Zones    []struct{ Form string }
			Current  bool
			Tokens   int
			Layers   []struct {
				Name            string
				Allocated, Used int
			}
			Savings struct {
				History, Sent, Saved int
				Ratio                float64
			}
		}
	}
	if err := json.Unmarshal([]byte(b), &st); err != nil {
		t.Fatal(err)
	}
	a := st.Assembled
	if st.Window.Agent != "claude" || a == nil || a.Snapshot != third.Snapshot || !a.Current || a.Tokens != third.Tokens || len(a.Layers) != len(third.Layers) ||
		a.Strategy == "" || a.Strategy != third.History.Strategy || len(a.Zones) == 0 {
		t.Fatalf("status: %s", b)
	}
	for i, l := range a.Layers {
		if l != third.Layers[i] {
			t.Errorf("status layer %d: %+v, want %+v", i, l, third.Layers[i])
		}
	}
	if s := a.Savings; s.History != third.History.Whole || s.Sent != third.History.Tokens || s.Saved != s.History-s.Sent ||
		s.History == 0 || s.Ratio != float64(s.Sent)/float64(s.History) {
		t.Errorf("savings %+v, history %+v", s, third.History)
	}
	c.want(201, "POST", w+"/messages", appendBody("anthropic", anthropicTurn(7)...), "")
	c.want(200, "GET", w+"/status", "", `"current":false`)

	// Bad input: a JSON error each time.
	c.want(400, "GET", w+"/snapshots/xyz", "", "not a snapshot hash")
	c.want(400, "GET", w+"/snapshots/0", "", "numbers start at 1")
	c.want(400, "GET", w+"/snapshots/"+first.Snapshot+"00", "", "not a snapshot hash")
	c.want(404, "GET", w+"/snapshots/99", "", "no snapshot 99")
	unknown := "00000000"
	if strings.HasPrefix(first.Snapshot, unknown) || strings.HasPrefix(third.Snapshot, unknown) {
		unknown = "ffffffff"
	}
	c.want(404, "GET", w+"/snapshots/"+unknown, "", "no snapshot")
	c.want(404, "GET", w+"/snapshots/"+unknown+"/diff/latest", "", "no snapshot")
	c.want(400, "GET", w+"/snapshots/latest/diff/xyz", "", "not a snapshot hash")
	c.want(400, "GET", w+"/snapshots?limit=5000", "", "limit is 5000")
	c.want(400, "GET", w+"/snapshots?limit=x", "", "not a whole number")
	c.want(400, "GET", w+"/snapshots/latest?format=xml", "", `format \"xml\"`)
	c.want(404, "GET", "/v1/windows/s1/nobody/snapshots/latest", "", "no window for agent \\\"nobody\\\"")
	c.want(404, "GET", "/v1/windows/s1/nobody/status", "", "no window for agent \\\"nobody\\\"")
	// Two hashes with the same first eight digits: a prefix of both is
	// ambiguous.
	seen := map[string]string{}
	var prefix string
	for i := 0; prefix == ""; i++ {
		body := fmt.Sprintf(`[{"role":"user","blocks":[{"type":"text","text":"%d"}],"tokens":1}]`, i)
		p := store.ID([]byte(body))[:8]
		if other, ok := seen[p]; ok {
			prefix = p
			for _, b := range []string{other, body} {
				if _, err := eng.Store().PutSnapshot(context.Background(), store.WindowSnapshot{
					WindowKey: store.WindowKey{SessionID: "s1", AgentID: "claude"}, Body: []byte(b), Report: []byte(`{}`)}, 0); err != nil {
					t.Fatal(err)
				}
			}
		}
		seen[p] = body
	}
	c.want(400, "GET", w+"/snapshots/"+prefix, "", "ambiguous")
}

// TestWindowsSnapshotsAgentKeys: an agent assembles (and so records the
// snapshots of) its own window only; like every window's, its snapshots
// and status are read by any agent.
func TestWindowsSnapshotsAgentKeys(t *testing.T) {
	eng := newEngine(t)
	srv := httptest.NewServer(Handler(eng, Options{Token: tok}))
	defer srv.Close()
	alice := agentKey(t, srv.URL, "alice", "a1")
	bob := agentKey(t, srv.URL, "bob", "b1")
	as := func(key string) []string {
		return []string{"Authorization", "Bearer " + key, "Content-Type", "application/json"}
	}
	for _, tc := range []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
	}{
		{"open own", "PUT", "/v1/windows/alice/a1", `{"limit":8000}`, as(alice), 200},
		{"append own", "POST", "/v1/windows/alice/a1/messages", `{"messages":[{"role":"user","content":"hello from a test"}]}`, as(alice), 201},
		{"assemble own", "POST", "/v1/windows/alice/a1/assemble", `{"no_retrieval":true}`, as(alice), 200},
		{"assemble another's", "POST", "/v1/windows/alice/a1/assemble", `{"no_retrieval":true}`, as(bob), 403},
		{"read another's snapshots", "GET", "/v1/windows/alice/a1/snapshots", "", as(bob), 200},
		{"read another's snapshot", "GET", "/v1/windows/alice/a1/snapshots/latest", "", as(bob), 200},
		{"read another's status", "GET", "/v1/windows/alice/a1/status", "", as(bob), 200},
		{"no credential", "GET", "/v1/windows/alice/a1/snapshots", "", nil, 401},
	} {
		if st, _, b := raw(t, tc.method, srv.URL+tc.path, tc.body, tc.hdr...); st != tc.status {
			t.Errorf("%s: HTTP %d %s, want %d", tc.name, st, strings.TrimSpace(b), tc.status)
		}
	}
	list, err := eng.Store().Snapshots(context.Background(), store.WindowKey{SessionID: "alice", AgentID: "a1"}, 0)
	if err != nil || len(list) != 1 {
		t.Errorf("alice's snapshots: %d, %v; want her one", len(list), err)
	}
}
