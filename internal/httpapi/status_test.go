package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/engramhq/engram/internal/api"
	"github.com/engramhq/engram/internal/index"
	"github.com/engramhq/engram/internal/metrics"
)

// decode unmarshals an answer, failing the test on a bad one.
func decode[T any](t *testing.T, b string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(b), &v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return v
}

// TestWindowTimeline appends three turns to a small window, so that it
// evicts, assembles a turn and hands off: the timeline has the three
// turns with the versions, the use after each and the references each
// made that the appends reported, an evict event whose reference GET
// /v1/refs expands to its tokens, the assembled turn and both ends of
// the handoff, and a fill series ending at the window's use now. A limit
// keeps the newest turns; a bad limit and an unknown window are refused.
func TestWindowTimeline(t *testing.T) {
	eng := newEngine(t)
	srv := httptest.NewServer(Handler(eng, Options{Token: "tok"}))
	defer srv.Close()
	c := client{t, srv.URL}
	const w = "/v1/windows/s1/claude"
	c.want(404, "GET", w+"/timeline", "", "no window for agent")
	c.want(200, "PUT", w, `{"limit":2000,"output":200,"safety":100}`, "")

	type appended struct {
		Window struct {
			Used    int
			Version int64
		}
		Positions []int
		Evicted   []struct {
			ID       string
			Messages int
			Tokens   int
		}
	}
	var appends []appended
	for i := range 3 {
		_, b := c.want(201, "POST", w+"/messages", appendBody("anthropic", anthropicTurn(i)...), "")
		appends = append(appends, decode[appended](t, b))
	}
	var wantRefs []api.TimelineRefOut
	for _, a := range appends {
		for _, r := range a.Evicted {
			wantRefs = append(wantRefs, api.TimelineRefOut{RefID: r.ID, Messages: r.Messages, Tokens: r.Tokens})
		}
	}
	if len(wantRefs) == 0 {
		t.Fatal("three turns of about 600 tokens in a 1,530-token window evicted nothing")
	}

	_, b := c.want(200, "GET", w+"/timeline", "", `"session":"s1","agent":"claude"`)
	checkJSON(t, "timeline", b)
	tl := decode[api.TimelineOut](t, b)
	if tl.TurnsTotal != 3 || len(tl.Turns) != 3 {
		t.Fatalf("timeline has %d turns (%d in all), want 3: %s", len(tl.Turns), tl.TurnsTotal, b)
	}
	var gotRefs []api.TimelineRefOut
	for i, turn := range tl.Turns {
		a := appends[i]
		if turn.Version != a.Window.Version || turn.Used != a.Window.Used || turn.Messages != 4 || turn.At == nil {
			t.Errorf("turn %d: version %d, used %d, %d messages, at %v; the append said version %d, used %d, 4 messages",
				i, turn.Version, turn.Used, turn.Messages, turn.At, a.Window.Version, a.Window.Used)
		}
		gotRefs = append(gotRefs, turn.Evicted...)
	}
	if diff := cmp.Diff(wantRefs, gotRefs); diff != "" {
		t.Errorf("the turns' references differ from the appends' (-appends +timeline):\n%s", diff)
	}
	// Nothing was evicted by the first turn, so it holds what it added.
	if tl.Turns[0].Tokens != tl.Turns[0].Used || len(tl.Turns[0].Evicted) != 0 {
		t.Errorf("first turn: %d tokens appended, %d used, %d evicted", tl.Turns[0].Tokens, tl.Turns[0].Used, len(tl.Turns[0].Evicted))
	}

	// The evict events are the references, and each expands to its tokens.
	var evicts []api.TimelineEventOut
	for _, e := range tl.Events {
		if e.Kind == api.EventEvict {
			evicts = append(evicts, e)
		}
	}
	if len(evicts) != len(wantRefs) {
		t.Fatalf("%d evict events, want %d: %s", len(evicts), len(wantRefs), b)
	}
	for i, e := range evicts {
		if e.RefID != wantRefs[i].RefID || e.Version == 0 || e.At == nil {
			t.Errorf("evict event %d: %+v, want ref %s with its version and time", i, e, wantRefs[i].RefID)
		}
		_, rb := c.want(200, "GET", "/v1/refs/"+e.RefID, "", `"ref_id":"`+e.RefID)
		if exp := decode[api.ExpandOut](t, rb); exp.Tokens != e.Tokens || len(exp.Messages) != e.Messages {
			t.Errorf("ref %s expands to %d messages of %d tokens; the event says %d of %d", e.RefID, len(exp.Messages), exp.Tokens, e.Messages, e.Tokens)
		}
	}

	// The fill series, a point per turn, ends where the window stands.
	_, sb := c.want(200, "GET", w+"/status", "", "")
	st := decode[api.TurnStatusOut](t, sb)
	if len(tl.Fill) != 3 || tl.Fill[2].Used != st.Window.Used || tl.Used != st.Window.Used || tl.Fill[2].Budget != st.Window.Budget {
		t.Errorf("fill %+v, used %d; the window's status: used %d of %d", tl.Fill, tl.Used, st.Window.Used, st.Window.Budget)
	}

	// An assembled turn and a handoff are events too.
	snap := c.assemble(w, `{"message":"What does handler2 do?"}`).Snapshot
	c.want(201, "POST", w+"/handoff", `{"to":"claude-2"}`, "")
	_, b = c.want(200, "GET", w+"/timeline", "", "")
	tl = decode[api.TimelineOut](t, b)
	n := len(tl.Events)
	if n < 2 || tl.Events[n-2].Kind != api.EventAssembled || tl.Events[n-2].Snapshot != snap || tl.Events[n-1].Kind != api.EventHandoffOut || tl.Events[n-1].Agent != "claude-2" {
		t.Errorf("the last events are not the assembled turn %s and the handoff to claude-2: %s", snap, b)
	}
	_, b = c.want(200, "GET", "/v1/windows/s1/claude-2/timeline", "", `"kind":"handoff_in"`)
	if next := decode[api.TimelineOut](t, b); next.Events[0].Kind != api.EventHandoffIn || next.Events[0].Agent != "claude" {
		t.Errorf("the next window's first event is not the handoff from claude: %s", b)
	}

	// The newest turns, and the events from the first of them on.
	_, b = c.want(200, "GET", w+"/timeline?limit=1", "", `"turns_total":3`)
	one := decode[api.TimelineOut](t, b)
	if len(one.Turns) != 1 || one.Turns[0].Version != appends[2].Window.Version || len(one.Fill) != 1 {
		t.Errorf("limit=1: %s", b)
	}
	for _, e := range one.Events {
		if e.Kind == api.EventEvict && e.Version < one.Turns[0].Version {
			t.Errorf("limit=1 kept the event %+v of a turn it left out", e)
		}
	}
	c.want(400, "GET", w+"/timeline?limit=5001", "", "from 1 to 5000")
	c.want(400, "GET", w+"/timeline?limit=-1", "", "from 1 to 5000")
	c.want(400, "GET", w+"/timeline?limit=many", "", "not a whole number")
	c.want(404, "GET", "/v1/windows/s1/nobody/timeline", "", "no window for agent")
}

// TestSessionsList lists sessions most recently seen first, with their
// windows and agents counted and the resume point PUT .../resume wrote;
// a limit cuts the list, saying how many there are; a bad one is refused.
func TestSessionsList(t *testing.T) {
	eng := newEngine(t)
	srv := httptest.NewServer(Handler(eng, Options{Token: "tok"}))
	defer srv.Close()
	c := client{t, srv.URL}
	c.want(200, "GET", "/v1/sessions", "", `{"sessions":[],"total":0}`)

	c.want(200, "PUT", "/v1/windows/s1/claude", `{"limit":3000}`, "")
	c.want(201, "POST", "/v1/windows/s1/claude/messages", appendBody("anthropic", anthropicTurn(0)...), "")
	c.want(201, "POST", "/v1/sessions/s2/records", `{"type":"note","content":"a note of session two"}`, "", "X-Engram-Session", "s2")
	c.want(200, "PUT", "/v1/sessions/s1/resume", `{"task":"Explain the handlers","current":"handler 0","next":["write it up"]}`, "")

	_, b := c.want(200, "GET", "/v1/sessions", "", `"total":2`)
	checkJSON(t, "sessions", b)
	out := decode[api.SessionsOut](t, b)
	byID := map[string]api.SessionOut{}
	for _, s := range out.Sessions {
		byID[s.Session] = s
	}
	s1, s2 := byID["s1"], byID["s2"]
	if s1.Windows != 1 || s1.Resume == nil || s1.Resume.Task != "Explain the handlers" || s1.Resume.Current != "handler 0" {
		t.Errorf("session s1: %+v", s1)
	}
	if s2.Session != "s2" || s2.Windows != 0 || s2.Resume != nil {
		t.Errorf("session s2: %+v", s2)
	}
	if len(out.Sessions) != 2 || out.Sessions[0].LastSeen.Before(out.Sessions[1].LastSeen) {
		t.Errorf("not most recently seen first: %s", b)
	}
	_, b = c.want(200, "GET", "/v1/sessions?limit=1", "", `"total":2`)
	if got := decode[api.SessionsOut](t, b); len(got.Sessions) != 1 || got.Sessions[0].Session != out.Sessions[0].Session {
		t.Errorf("limit=1: %s", b)
	}
	c.want(400, "GET", "/v1/sessions?limit=1001", "", "from 1 to 1000")
}

// TestIndexStatus indexes a directory through the engine: GET /v1/index
// counts its files and chunks; a server that watches reports the
// watcher's queue, last update and last errors, newest first; one that
// does not says so and leaves the live part out.
func TestIndexStatus(t *testing.T) {
	eng := newEngine(t)
	dir := t.TempDir()
	for name, text := range map[string]string{"a.go": "package a\n\nfunc A() int { return 1 }\n", "b.md": "# B\n\nAbout b.\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := eng.Index(t.Context(), dir, index.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.New != 2 {
		t.Fatalf("indexed %d new files, want 2", sum.New)
	}

	plain := httptest.NewServer(Handler(eng, Options{Token: "tok"}))
	defer plain.Close()
	_, b := client{t, plain.URL}.want(200, "GET", "/v1/index", "", `"watching":false`)
	checkJSON(t, "index", b)
	out := decode[api.IndexOut](t, b)
	if out.Files["current"] != 2 || out.Chunks < 2 || out.Entries < 2 || out.TokensStored <= 0 || out.Live != nil {
		t.Errorf("index without a watcher: %s", b)
	}
	if strings.Contains(b, `"live"`) {
		t.Errorf("a server that does not index reports a live state: %s", b)
	}

	act := index.NewActivity()
	act.Updated(sum, nil)
	act.Pending(3)
	act.Updated(index.Summary{Changed: 1, Errors: []index.FileError{{Path: "c.go", Err: "permission denied"}}}, nil)
	act.Updated(index.Summary{}, errors.New("walk the tree: too many open files"))
	watching := httptest.NewServer(Handler(eng, Options{Token: "tok", Index: act}))
	defer watching.Close()
	_, b = client{t, watching.URL}.want(200, "GET", "/v1/index", "", `"watching":true`)
	checkJSON(t, "index", b)
	out = decode[api.IndexOut](t, b)
	if out.Live == nil {
		t.Fatalf("no live state: %s", b)
	}
	l := out.Live
	if l.Pending != 3 || l.Updates != 3 || l.Last == nil || l.Last.Error != "walk the tree: too many open files" {
		t.Errorf("live state: %s", b)
	}
	var errs []string
	for _, e := range l.Errors {
		errs = append(errs, e.Path+": "+e.Message)
	}
	if diff := cmp.Diff([]string{": walk the tree: too many open files", "c.go: permission denied"}, errs); diff != "" {
		t.Errorf("last errors (-want +got):\n%s", diff)
	}
}

// TestStatus: GET /v1/status sums what each window's status says, and
// what their latest assembled turns saved; it counts the archivalist's
// records, and, since this server started, the references expanded and
// the pre-fetches served.
func TestStatus(t *testing.T) {
	eng := newEngine(t)
	m := metrics.New(eng)
	srv := httptest.NewServer(Handler(eng, Options{Token: "tok", Metrics: m, Version: "v9.9.9"}))
	defer srv.Close()
	c := client{t, srv.URL}
	_, b := c.want(200, "GET", "/v1/status", "", `"version":"v9.9.9"`)
	checkJSON(t, "status", b)

	windows := []string{"/v1/windows/s1/claude", "/v1/windows/s1/codex", "/v1/windows/s2/claude"}
	for i, w := range windows {
		c.want(200, "PUT", w, `{"limit":1500,"output":200,"safety":100}`, "", "X-Engram-Session", strings.Split(w, "/")[3])
		for j := range i + 1 {
			c.want(201, "POST", w+"/messages", appendBody("anthropic", anthropicTurn(10*i+j)...), "", "X-Engram-Session", strings.Split(w, "/")[3])
		}
	}
	// Two windows have an assembled turn, the third none.
	c.assemble(windows[1], `{"message":"What does handler11 do?"}`)
	c.assemble(windows[2], `{"message":"What does handler21 do?","no_retrieval":true}`)
	c.want(200, "POST", "/v1/prefetch", `{"query":"nothing matches quokka"}`, "")
	c.want(201, "POST", "/v1/patterns", `{"category":"testing.unit","pattern":"never sleep in tests; use a fake clock"}`, "")
	c.want(201, "POST", "/v1/failures", `{"approach":"raising timeouts","reason":"still flaky"}`, "")
	c.want(201, "POST", "/v1/failures", `{"approach":"retrying the upload","reason":"hides the bug","resolution":"fix the race","outcome":"success"}`, "")
	_, tb := c.want(200, "GET", windows[2]+"/timeline", "", "")
	var ref string
	for _, turn := range decode[api.TimelineOut](t, tb).Turns {
		for _, r := range turn.Evicted {
			ref = r.RefID
		}
	}
	if ref == "" {
		t.Fatalf("three turns in a 1,080-token window evicted nothing: %s", tb)
	}
	c.want(200, "GET", "/v1/refs/"+ref, "", "")
	c.want(200, "POST", "/v1/retrieve", `{"ref_id":"`+ref+`"}`, "")

	var want api.WindowsSumOut
	var wantSavings api.SavingsOut
	want.Open, want.Summed = 3, 3
	perWindow := map[string]api.WindowSavingsOut{}
	for _, w := range windows {
		_, sb := c.want(200, "GET", w+"/status", "", "")
		st := decode[api.TurnStatusOut](t, sb)
		want.Messages += st.Window.Messages
		want.Evicted += st.Window.Evicted
		want.Refs += st.Window.Refs
		want.Used += st.Window.Used
		want.Budget += st.Window.Budget
		var sv api.SavingsOut
		if st.Assembled != nil {
			sv = st.Assembled.Savings
		}
		wantSavings.History += sv.History
		wantSavings.Sent += sv.Sent
		wantSavings.Saved += sv.Saved
		perWindow[st.Window.Session+"/"+st.Window.Agent] = api.WindowSavingsOut{Session: st.Window.Session, Agent: st.Window.Agent,
			SavingsOut: sv, Used: st.Window.Used, Budget: st.Window.Budget}
	}
	wantSavings.Ratio = float64(wantSavings.Sent) / float64(wantSavings.History)

	_, b = c.want(200, "GET", "/v1/status", "", `"backend":"sqlite"`)
	checkJSON(t, "status", b)
	out := decode[api.StatusOut](t, b)
	if diff := cmp.Diff(want, out.Windows); diff != "" {
		t.Errorf("windows (-the windows' statuses +status):\n%s", diff)
	}
	if diff := cmp.Diff(wantSavings, out.Savings); diff != "" {
		t.Errorf("savings (-the windows' statuses +status):\n%s", diff)
	}
	if wantSavings.Saved <= 0 {
		t.Errorf("the assembled turns saved nothing: %+v", wantSavings)
	}
	got := map[string]api.WindowSavingsOut{}
	for _, p := range out.PerWindow {
		got[p.Session+"/"+p.Agent] = p
	}
	if diff := cmp.Diff(perWindow, got); diff != "" {
		t.Errorf("per window (-the windows' statuses +status):\n%s", diff)
	}
	st, err := eng.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if out.Store.Location != st.Location || out.Store.SizeBytes <= 0 || out.Sessions != 2 || out.Entries != st.Entries || out.TokensStored != st.Tokens || out.Agents != st.Agents {
		t.Errorf("store: %s; the store's stats: %+v", b, st)
	}
	mo := out.Memory
	if mo.Patterns != 1 || mo.Failures != 2 || mo.UnresolvedFailures != 1 || mo.Events <= 0 {
		t.Errorf("memory: %+v", mo)
	}
	// Expanded: GET /v1/refs and retrieve with the marker; pre-fetched:
	// POST /v1/prefetch and the assembled turn that retrieved (the other
	// did not).
	cn := out.Counters
	if cn.RefsExpanded != 2 || cn.Prefetches != 2 || cn.PrefetchHits > cn.Prefetches || cn.Since.IsZero() {
		t.Errorf("counters: %+v", cn)
	}
	mc := m.Counters()
	if !cn.Since.Equal(mc.Since) || cn.RefsExpanded != mc.RefsExpanded || cn.Prefetches != mc.Prefetches || cn.PrefetchHits != mc.PrefetchHits {
		t.Errorf("counters %+v, the metrics' %+v", cn, mc)
	}
}

// TestStatusLocation: the store's location (a path on the server's
// machine) is the operator's to see: the token, a trusted loopback caller
// and the dashboard's sign-in get it in GET /v1/status, an agent's key
// gets the status without it.
func TestStatusLocation(t *testing.T) {
	eng := newEngine(t)
	st, err := eng.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Location == "" {
		t.Fatal("the store names no location")
	}
	srv := httptest.NewServer(Handler(eng, Options{Token: tok, TrustLoopback: true}))
	defer srv.Close()
	key := agentKey(t, srv.URL, "alice", "a1")

	jar, _ := cookiejar.New(nil)
	c := noRedirect(jar)
	link, err := LoginURL(srv.URL+"/", tok, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if resp, _ := get(t, c, link); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	dashboard := func() (int, string) {
		resp, b := get(t, c, srv.URL+"/v1/status")
		return resp.StatusCode, b
	}
	bearer := func(cred string) func() (int, string) {
		return func() (int, string) {
			var hdr []string
			if cred != "" {
				hdr = []string{"Authorization", "Bearer " + cred}
			}
			st, _, b := raw(t, "GET", srv.URL+"/v1/status", "", hdr...)
			return st, b
		}
	}
	for _, tc := range []struct {
		name     string
		get      func() (int, string)
		location string
	}{
		{"token", bearer(tok), st.Location},
		{"loopback", bearer(""), st.Location},
		{"dashboard", dashboard, st.Location},
		{"agent key", bearer(key), ""},
	} {
		status, body := tc.get()
		if status != 200 {
			t.Errorf("%s: HTTP %d %s", tc.name, status, body)
			continue
		}
		var out struct {
			Store map[string]any
		}
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			t.Fatalf("%s: %v: %s", tc.name, err, body)
		}
		loc, has := out.Store["location"]
		switch {
		case tc.location == "" && (has || strings.Contains(body, filepath.Base(st.Location))):
			t.Errorf("%s: the status names the store's location: %s", tc.name, body)
		case tc.location != "" && loc != tc.location:
			t.Errorf("%s: location %v, want %q", tc.name, loc, tc.location)
		}
		if out.Store["backend"] != "sqlite" {
			t.Errorf("%s: store %v", tc.name, out.Store)
		}
	}
}
