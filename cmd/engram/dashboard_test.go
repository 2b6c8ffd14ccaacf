package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/engramhq/engram/internal/browsertest"
	"github.com/engramhq/engram/internal/httpapi"
)

// dashServer is an engram serve process on a fixed address, so that it can
// be stopped and started again under the page.
type dashServer struct {
	t     *testing.T
	e     *env
	addr  string
	cmd   *exec.Cmd
	login string // the login link it printed
	token string
}

// start runs engram serve and waits until it has printed its login link.
func (s *dashServer) start(ctx context.Context) {
	t := s.t
	t.Helper()
	s.cmd = s.e.command(ctx, "serve", "--addr", s.addr, "--yes", "--no-embed")
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cmd := s.cmd
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	linkRe := regexp.MustCompile(`(http://\S+/login\?t=\S+)`)
	fileRe := regexp.MustCompile(`bearer token in (\S+)`)
	var log strings.Builder
	s.login = ""
	tokenFile := ""
	for (s.login == "" || tokenFile == "") && sc.Scan() {
		line := sc.Text()
		log.WriteString(line + "\n")
		if m := linkRe.FindStringSubmatch(line); m != nil {
			s.login = m[1]
		}
		if m := fileRe.FindStringSubmatch(line); m != nil {
			tokenFile = m[1]
		}
	}
	go func() {
		for sc.Scan() {
		}
	}()
	if s.login == "" || tokenFile == "" {
		t.Fatalf("serve did not print a login link and its token file:\n%s", log.String())
	}
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	s.token = strings.TrimSpace(string(tok))
}

// stop ends the server as Ctrl-C would.
func (s *dashServer) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
}

// call sends a request to the API with the operator's token and decodes
// its answer into out (if not nil); it fails the test on another status
// than want.
func (s *dashServer) call(method, path string, body any, want int, out any) {
	t := s.t
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://"+s.addr+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Engram-Session", "s-dash")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != want {
		t.Fatalf("%s %s: HTTP %d, want %d: %s", method, path, resp.StatusCode, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
}

// xss is a tool's output that would run script if the page put it in as
// markup.
const xss = `<script>window.__xss = "script"</script><img src=x onerror="window.__xss = 'img'"> fetched from a hostile page`

// dashTurn is a turn of a coding agent in Anthropic's shape: a prompt, a
// call, its (long) result and an answer.
func dashTurn(i int, result string) []json.RawMessage {
	if result == "" {
		result = fmt.Sprintf("package pkg%d\n\n// handler%d serves requests.\n%s", i, i, strings.Repeat("\t// a line of the body, ünïcödé ✓\n", 40))
	}
	res, _ := json.Marshal(result)
	return []json.RawMessage{
		json.RawMessage(fmt.Sprintf(`{"role":"user","content":"Step %d: read internal/pkg%d/file.go"}`, i, i)),
		json.RawMessage(fmt.Sprintf(`{"role":"assistant","content":[{"type":"text","text":"Reading it."},{"type":"tool_use","id":"call-%d","name":"read_file","input":{"path":"internal/pkg%d/file.go"}}]}`, i, i)),
		json.RawMessage(fmt.Sprintf(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"call-%d","content":%s}]}`, i, res)),
		json.RawMessage(fmt.Sprintf(`{"role":"assistant","content":"handler%d serves requests."}`, i)),
	}
}

type apiWindow struct {
	Session, Agent, Role, Model, Strategy string
	Budget, Used, EvictAt                 int
	Messages, Evicted, Refs               int
	Version                               int64
}

// freeAddr returns a loopback address with a port free now.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String()
}

// TestDashboard drives the dashboard in a real Chromium against a real
// engram serve, on a store where agents worked: every view shows what the
// API says, a reference opens to its exact bytes, a message appended
// through the API shows up without a reload, a hostile tool output stays
// text, the page survives a restart of the server and things that vanish
// under it, and axe-core finds no serious violation in any view.
func TestDashboard(t *testing.T) {
	b := browsertest.New(t)
	e := newEnv(t)
	for name, src := range map[string]string{
		"retry.go":   "package p\n\n// Backoff waits longer after each failed attempt.\nfunc Backoff(n int) int { return n * n }\n",
		"handler.go": "package p\n\n// Serve answers a request.\nfunc Serve() {}\n",
	} {
		if err := os.WriteFile(filepath.Join(e.project, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &dashServer{t: t, e: e, addr: freeAddr(t)}
	s.start(ctx)

	// What agents did: a coder whose window evicted, a reviewer, a window
	// of a session about to be forgotten, and the shared memory.
	const coder = "/v1/windows/s-dash/coder"
	s.call("PUT", coder, map[string]any{"limit": 3000, "output": 200, "safety": 100, "role": "coder"}, 200, nil)
	s.call("POST", coder+"/messages", map[string]any{"messages": []any{map[string]any{"role": "system", "content": "You are a careful engineer."}}}, 201, nil)
	for i := range 7 {
		result := ""
		if i == 6 {
			result = xss
		}
		s.call("POST", coder+"/messages", map[string]any{"format": "anthropic", "messages": dashTurn(i, result)}, 201, nil)
		if i%3 == 2 {
			s.call("POST", coder+"/assemble", map[string]any{"message": fmt.Sprintf("What does handler%d do?", i)}, 200, nil)
		}
	}
	s.call("PUT", "/v1/windows/s-dash/reviewer", map[string]any{"limit": 20000, "role": "reviewer"}, 200, nil)
	s.call("POST", "/v1/windows/s-dash/reviewer/messages", map[string]any{"format": "anthropic", "messages": dashTurn(9, "")}, 201, nil)
	s.callAs("s-gone", "PUT", "/v1/windows/s-gone/tmp", []byte(`{"limit":1500}`), 200)
	for i := range 3 {
		req, _ := json.Marshal(map[string]any{"format": "anthropic", "messages": dashTurn(20+i, "")})
		s.callAs("s-gone", "POST", "/v1/windows/s-gone/tmp/messages", req, 201)
	}
	s.call("POST", "/v1/patterns", map[string]any{"pattern": "Wrap errors with the operation's name", "category": "error.handling"}, 201, nil)
	s.call("POST", "/v1/failures", map[string]any{"approach": "Retry without a limit", "reason": "it hammered the API", "error": "429 Too Many Requests"}, 201, nil)
	s.call("POST", "/v1/insights", map[string]any{"insight": "Backoff squares the attempt number"}, 201, nil)
	s.call("POST", "/v1/decisions", map[string]any{"decision": "Keep the handler synchronous", "rationale": "callers expect it"}, 201, nil)
	s.call("POST", "/v1/intents", map[string]any{"description": "Refactor the retry loop", "paths": []string{"retry.go"}}, 201, nil)
	s.call("PUT", "/v1/sessions/s-dash/resume", map[string]any{"task": "Make retries bounded", "current": "reviewing handler.go", "next": []string{"add a limit"}}, 200, nil)

	tab := b.Tab(t)
	shots := os.Getenv("ENGRAM_DASHBOARD_SHOTS") // where to keep the README's pictures, if anywhere
	keep := func(name string) {
		if shots == "" {
			return
		}
		if err := os.WriteFile(filepath.Join(shots, "dashboard-"+name+".png"), tab.Capture(), 0o644); err != nil {
			t.Error(err)
		}
	}
	view := func(name string) {
		t.Helper()
		tab.Click("#tab-" + name)
		tab.Eval(`new Promise(r => setTimeout(r, 50)).then(() => document.querySelector('#view-`+name+`').hidden === false)`, nil)
	}
	axe := func(name string) {
		t.Helper()
		if os.Getenv("ENGRAM_TEST_AXE") == "" {
			return // Axe skips the whole test without it; the rest still runs
		}
		if v := browsertest.SeriousViolations(tab.Axe(browsertest.AxeOptions{})); v != "" {
			t.Errorf("axe-core, %s view: serious violations:\n%s", name, v)
		}
	}
	shotOnFail := func(name string) {
		if t.Failed() {
			tab.Screenshot(name)
		}
	}

	// Signing in: the link engram serve printed lands on the page, live.
	tab.Navigate(s.login)
	tab.WaitText("#conn", "Live")
	var loc string
	tab.Eval(`location.pathname + location.search`, &loc)
	if loc != "/" {
		t.Errorf("after the login link the page is at %q: the spent link should not stay in the address bar", loc)
	}
	tab.Eval(`window.__marker = 42`, nil) // gone if the page reloads

	// Windows: the numbers on the page are the API's.
	var ws struct{ Windows []apiWindow }
	s.call("GET", "/v1/windows", nil, 200, &ws)
	if len(ws.Windows) != 3 {
		t.Fatalf("windows: %+v", ws)
	}
	type rowNums struct{ Used, Budget, Evicted int }
	rows := func() map[string]rowNums {
		var out map[string]rowNums
		tab.Eval(`Object.fromEntries([...document.querySelectorAll('#windows-table tbody tr')].map(tr => [tr.dataset.key,
			{used: +tr.querySelector('.used').dataset.value, budget: +tr.querySelector('.budget').dataset.value, evicted: +tr.querySelector('.evicted').dataset.value}]))`, &out)
		return out
	}
	tab.Eval(`new Promise(r => { const f = () => document.querySelectorAll('#windows-table tbody tr').length === 3 ? r(true) : setTimeout(f, 50); f(); })`, nil)
	got := rows()
	for _, w := range ws.Windows {
		k := w.Session + "/" + w.Agent
		if got[k] != (rowNums{w.Used, w.Budget, w.Evicted}) {
			t.Errorf("window %s on the page %+v, the API's used %d budget %d evicted %d", k, got[k], w.Used, w.Budget, w.Evicted)
		}
	}

	// The coder's window in detail: its numbers, layers, chart, timeline.
	tab.Click(`tr[data-key="s-dash/coder"] button`)
	tab.Run(chromedp.WaitVisible(chromedp.CSS(`#window-detail[data-key="s-dash/coder"]`)))
	var st struct {
		Window    apiWindow
		Assembled struct {
			Layers []struct {
				Name      string
				Allocated int
			}
		}
	}
	s.call("GET", coder+"/status", nil, 200, &st)
	tab.WaitText("#wd-turn", "turn")
	var detail struct {
		Used, Evicted int
		Layers        map[string]int
		Canvas        bool
		Evicts        int
	}
	tab.Eval(`({used: +document.querySelector('#wd-facts .wd-used').dataset.value, evicted: +document.querySelector('#wd-facts .wd-evicted').dataset.value,
		layers: Object.fromEntries([...document.querySelectorAll('#wd-legend li')].map(li => [li.dataset.layer, +li.querySelector('.alloc').dataset.value])),
		canvas: !!document.querySelector('#wd-chart canvas'), evicts: document.querySelectorAll('#wd-timeline li.evict').length})`, &detail)
	if detail.Used != st.Window.Used || detail.Evicted != st.Window.Evicted || !detail.Canvas || detail.Evicts == 0 {
		t.Errorf("the coder's detail %+v, the API's used %d evicted %d", detail, st.Window.Used, st.Window.Evicted)
	}
	if len(detail.Layers) != len(st.Assembled.Layers) || len(detail.Layers) == 0 {
		t.Errorf("layers on the page %v, the API's %+v", detail.Layers, st.Assembled.Layers)
	}
	for _, l := range st.Assembled.Layers {
		if detail.Layers[l.Name] != l.Allocated {
			t.Errorf("layer %s: %d on the page, %d in the API", l.Name, detail.Layers[l.Name], l.Allocated)
		}
	}
	axe("windows")
	keep("windows")

	// A reference opens to its exact bytes.
	var refID string
	tab.Eval(`document.querySelector('#wd-timeline li.evict button.ref').dataset.ref`, &refID)
	tab.Click(`#wd-timeline li.evict button.ref`)
	tab.WaitText("#viewer-sub", "byte for byte")
	var shown []string
	tab.Eval(`[...document.querySelectorAll('#viewer-body section.message pre.block.text')].map(p => p.textContent)`, &shown)
	var ref struct {
		Messages []struct {
			Blocks []struct{ Type, Text string }
		}
	}
	s.call("GET", "/v1/refs/"+refID, nil, 200, &ref)
	var stored []string
	for _, m := range ref.Messages {
		for _, bl := range m.Blocks {
			if bl.Type == "text" || bl.Type == "tool_result" {
				stored = append(stored, bl.Text)
			}
		}
	}
	if len(stored) == 0 || strings.Join(shown, "\x00") != strings.Join(stored, "\x00") {
		t.Errorf("reference %s: the page shows %d texts %q, the store holds %d %q", refID, len(shown), shown, len(stored), stored)
	}
	axe("reference")
	tab.Click("#viewer-close")
	shotOnFail("windows")

	// A hostile tool output is text: shown, never run.
	tab.WaitText("#wd-context", `<script>window.__xss = "script"</script>`)
	var xssRan any
	tab.Eval(`window.__xss === undefined ? null : String(window.__xss)`, &xssRan)
	if xssRan != nil {
		t.Errorf("the stored payload ran: window.__xss = %v", xssRan)
	}

	// Live: a message appended through the API shows without a reload.
	var appended struct{ Window apiWindow }
	s.call("POST", coder+"/messages", map[string]any{"format": "anthropic", "messages": dashTurn(7, "")}, 201, &appended)
	tab.Eval(fmt.Sprintf(`new Promise(r => { const f = () => { const tr = document.querySelector('tr[data-key="s-dash/coder"] .used');
		tr && +tr.dataset.value === %d ? r(true) : setTimeout(f, 50); }; f(); })`, appended.Window.Used), nil)
	var marker int
	tab.Eval(`window.__marker`, &marker)
	if marker != 42 {
		t.Errorf("the page reloaded to show the append")
	}
	tab.WaitText("#wd-timeline", fmt.Sprintf("Turn at version %d", appended.Window.Version)) // the timeline follows too
	shotOnFail("live")

	// Savings: the totals and each window's are the API's.
	view("savings")
	var status struct {
		TokensStored int `json:"tokens_stored"`
		Savings      struct{ History, Sent, Saved int }
		PerWindow    []struct {
			Session, Agent       string
			History, Sent, Saved int
		} `json:"per_window"`
	}
	s.call("GET", "/v1/status", nil, 200, &status)
	tab.WaitText("#savings-cards", "Saved")
	var cards map[string]int
	tab.Eval(`Object.fromEntries(['tokens-stored','savings-history','savings-sent','savings-saved'].map(c => [c, +document.querySelector('#savings-cards .'+c).dataset.value]))`, &cards)
	if cards["savings-history"] != status.Savings.History || cards["savings-sent"] != status.Savings.Sent || cards["savings-saved"] != status.Savings.Saved ||
		cards["tokens-stored"] != status.TokensStored || status.Savings.Saved <= 0 {
		t.Errorf("savings on the page %v, the API's %+v (stored %d)", cards, status.Savings, status.TokensStored)
	}
	var perWindow map[string][3]int
	tab.Eval(`Object.fromEntries([...document.querySelectorAll('#savings-table tbody tr')].map(tr => [tr.dataset.key, ['history','sent','saved'].map(c => +tr.querySelector('.'+c).dataset.value)]))`, &perWindow)
	for _, w := range status.PerWindow {
		if perWindow[w.Session+"/"+w.Agent] != [3]int{w.History, w.Sent, w.Saved} {
			t.Errorf("savings of %s/%s on the page %v, the API's %+v", w.Session, w.Agent, perWindow[w.Session+"/"+w.Agent], w)
		}
	}
	var bars bool
	tab.Eval(`!!document.querySelector('#savings-chart canvas')`, &bars)
	if !bars {
		t.Errorf("no chart of the savings")
	}
	axe("savings")
	keep("savings")
	shotOnFail("savings")

	// Memory: the records, the sessions' resume points, the event log,
	// which follows new events live.
	view("memory")
	tab.WaitText("#m-patterns", "Wrap errors with the operation's name")
	tab.WaitText("#m-failures", "Retry without a limit")
	tab.WaitText("#m-decisions", "Keep the handler synchronous")
	tab.WaitText("#m-intents", "Refactor the retry loop")
	tab.WaitText("#m-sessions", "Make retries bounded")
	s.call("POST", "/v1/insights", map[string]any{"insight": "The event log is live"}, 201, nil)
	tab.WaitText("#m-insights", "The event log is live")
	var events struct{ Events []struct{ Seq int } }
	s.call("GET", "/v1/events?limit=1", nil, 200, &events)
	tab.WaitText("#events-table tbody tr:first-child td", fmt.Sprint(events.Events[0].Seq))
	axe("memory")
	keep("memory")
	shotOnFail("memory")

	// Search: scores as the API gives them; a hit opens to its lines; a
	// search that finds nothing says so.
	view("search")
	tab.Run(chromedp.SendKeys(chromedp.CSS("#search-q"), "Backoff attempt"), chromedp.Click(chromedp.CSS("#search-form button")))
	tab.WaitText("#search-status", " for “")
	var hits struct {
		Hits []struct {
			Where           string
			Score           float64
			StartLine       int `json:"start_line"`
			EndLine         int `json:"end_line"`
			Lexical, Vector float64
		}
	}
	s.call("GET", "/v1/search?q=Backoff+attempt&limit=20", nil, 200, &hits)
	var first struct {
		Where string
		Score float64
	}
	tab.Eval(`({where: document.querySelector('#search-hits li button').textContent, score: +document.querySelector('#search-hits li .score').dataset.value})`, &first)
	if len(hits.Hits) == 0 || first.Where != hits.Hits[0].Where ||
		fmt.Sprintf("%.4f", first.Score) != fmt.Sprintf("%.4f", hits.Hits[0].Score) {
		t.Errorf("the first hit on the page %+v, the API's %+v", first, hits.Hits)
	}
	tab.Click("#search-hits li button")
	tab.WaitText("#viewer-body", "func Backoff(n int) int")
	axe("search")
	keep("search")
	tab.Click("#viewer-close")
	tab.Run(chromedp.SetValue(chromedp.CSS("#search-q"), "zqxjv wplmk"), chromedp.Click(chromedp.CSS("#search-form button")))
	tab.WaitText("#search-status", "Nothing matches")
	shotOnFail("search")

	// Index: the files and embeddings the API counts, the watcher's state.
	view("index")
	var idx struct {
		Files    map[string]int
		Watching bool
	}
	s.call("GET", "/v1/index", nil, 200, &idx)
	n := 0
	for _, v := range idx.Files {
		n += v
	}
	tab.WaitText("#index-cards", "Files")
	var files int
	tab.Eval(`+document.querySelector('#index-cards .files').dataset.value`, &files)
	if files != n || n < 2 || !idx.Watching {
		t.Errorf("files on the page %d, the API's %v (watching %v)", files, idx.Files, idx.Watching)
	}
	axe("index")
	keep("index")
	shotOnFail("index")

	// The keyboard moves between views (the tabs' arrows).
	tab.Run(chromedp.Focus(chromedp.CSS("#tab-index")), chromedp.KeyEvent(kb.ArrowRight))
	tab.WaitText(`[role=tab][aria-selected=true]`, "Windows")

	// Things that vanish under the page: a forgotten session's window and
	// its reference.
	tab.Click(`tr[data-key="s-gone/tmp"] button`)
	tab.Run(chromedp.WaitVisible(chromedp.CSS(`#window-detail[data-key="s-gone/tmp"]`)))
	var goneRef string
	tab.Eval(`new Promise(r => { const f = () => { const b = document.querySelector('#wd-timeline button.ref'); b ? r(b.dataset.ref) : setTimeout(f, 50); }; f(); })`, &goneRef)
	if out, err := e.command(ctx, "forget", "session", "s-gone", "--yes").CombinedOutput(); err != nil {
		t.Fatalf("engram forget: %v\n%s", err, out)
	}
	tab.WaitText("#window-detail .error", "no longer exists")
	tab.Click(`#wd-timeline button.ref[data-ref="` + goneRef + `"]`)
	tab.WaitText("#viewer .error", "no longer exists")
	tab.Click("#viewer-close")
	var left int
	tab.Eval(`document.querySelectorAll('#windows-table tbody tr').length`, &left)
	if left != 2 {
		t.Errorf("%d windows listed after the forget, want 2", left)
	}
	shotOnFail("vanished")

	// A server that restarts under the page: it says so, a search while it
	// is down fails plainly, and once it is back the page is live again on
	// the same cookie.
	s.stop()
	tab.WaitText("#conn", "connect")
	view("search")
	tab.Run(chromedp.SetValue(chromedp.CSS("#search-q"), "Backoff"), chromedp.Click(chromedp.CSS("#search-form button")))
	tab.WaitText("#view-search .error", "cannot be reached")
	s.start(ctx)
	tab.WaitText("#conn", "restarted")
	tab.Click("#search-form button")
	tab.WaitText("#search-status", " for “")
	var errHidden bool
	tab.Eval(`document.querySelector('#view-search .error').hidden`, &errHidden)
	if !errHidden {
		t.Errorf("the search's error stays after a search that worked")
	}
	shotOnFail("restart")

	// A phone's screen: nothing wider than it.
	tab.Run(chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	view("windows")
	var width int
	tab.Eval(`document.documentElement.scrollWidth`, &width)
	if width > 390 {
		t.Errorf("on a 390 px screen the page is %d px wide", width)
	}
	shotOnFail("phone")

	// The page's own errors: none. (The browser logs the requests that
	// failed on purpose above: the vanished reference's 404, the stopped
	// server's refused connections.)
	for _, m := range tab.Errors() {
		if m.Kind != browsertest.KindLog || m.Source != "network" {
			t.Errorf("the page reported an error: %v", m)
		}
	}
}

// callAs is call for another session, with a body already encoded.
func (s *dashServer) callAs(session, method, path string, body []byte, want int) {
	t := s.t
	t.Helper()
	req, err := http.NewRequest(method, "http://"+s.addr+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Engram-Session", session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, b)
	}
}

// TestDashboardSignOut signs in with the link engram serve printed, clicks
// Sign out, and checks that the page is signed out: the server refuses the
// page's reads and the page asks to sign in. A page of another origin that
// posts the same form is refused.
func TestDashboardSignOut(t *testing.T) {
	b := browsertest.New(t)
	e := newEnv(t)
	s := &dashServer{t: t, e: e, addr: freeAddr(t)}
	s.start(t.Context())
	tab := b.Tab(t)
	read := func() int {
		t.Helper()
		var st int
		tab.Eval(`fetch('v1/windows').then(r => r.status)`, &st)
		return st
	}

	tab.Navigate(s.login)
	tab.WaitText("#conn", "Live")
	tab.Run(chromedp.WaitVisible(chromedp.CSS(".signout button")))

	// Another port of loopback is the same site, so the browser sends the
	// cookie with its form's POST: its origin is what refuses it.
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><title>other</title><form method="post" action="http://%s/logout"></form><script>document.forms[0].submit()</script>`, s.addr)
	}))
	defer other.Close()
	tab.Navigate(other.URL)
	tab.WaitText("body", "forbidden_origin")
	tab.Navigate("http://" + s.addr + "/")
	tab.WaitText("#conn", "Live")
	if st := read(); st != http.StatusOK {
		t.Fatalf("a read from the page after another origin posted a sign-out: HTTP %d, want 200", st)
	}

	var cookies []*network.Cookie
	tab.Run(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		res, err := cdp.Call(ctx, tg, network.GetCookies, network.GetCookiesParams{})
		cookies = res.Cookies
		return err
	}))
	if len(cookies) != 1 {
		t.Fatalf("the browser holds %d cookies, want the sign-in's", len(cookies))
	}
	signedIn := cookies[0]

	tab.Click(".signout button")
	tab.Run(chromedp.WaitVisible(chromedp.CSS("#signin")))
	var loc string
	tab.Eval(`location.pathname`, &loc)
	if loc != "/" {
		t.Errorf("after signing out the page is at %q, want /", loc)
	}
	if st := read(); st != http.StatusUnauthorized {
		t.Errorf("a read from the page after signing out: HTTP %d, want 401", st)
	}
	// The page says it is not signed in, offers no Sign out, and stops
	// asking for its event stream, which the server would refuse again.
	tab.WaitText("#conn", "Not signed in")
	var signOutShown bool
	tab.Eval(`document.querySelector('.signout button').offsetParent !== null`, &signOutShown)
	if signOutShown {
		t.Errorf("signed out, the page still offers to sign out")
	}
	streams := func() int {
		n := 0
		for _, m := range tab.Console() {
			if strings.Contains(m.URL, "/v1/events/stream") {
				n++
			}
		}
		return n
	}
	before := streams()
	time.Sleep(6 * time.Second) // past the 5 s after which a refused stream is asked for again
	if after := streams(); after != before {
		t.Errorf("signed out, the page asked for its event stream %d more times", after-before)
	}
	var conn string
	tab.Eval(`document.querySelector('#conn').textContent`, &conn)
	if conn != "Not signed in" {
		t.Errorf("signed out, the status says %q", conn)
	}
	if os.Getenv("ENGRAM_TEST_AXE") != "" {
		if v := browsertest.SeriousViolations(tab.Axe(browsertest.AxeOptions{})); v != "" {
			t.Errorf("axe-core, signed out: serious violations:\n%s", v)
		}
	}

	// A person is asked to sign in, not told the API's hint for programs.
	var banner string
	tab.Eval(`document.querySelector('#signin').textContent`, &banner)
	if strings.Contains(banner, "Authorization") || strings.Contains(banner, "Bearer") || !strings.Contains(banner, "engram token login") {
		t.Errorf("the sign-in banner says %q", banner)
	}

	// Signed out on the server too: a copy of the cookie is refused, and
	// the page that sends it says why, in a person's words.
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.addr+"/v1/windows", nil)
	req.AddCookie(&http.Cookie{Name: signedIn.Name, Value: signedIn.Value})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a copy of the signed-out cookie: HTTP %d, want 401", resp.StatusCode)
	}
	tab.Run(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, network.SetCookie, network.SetCookieParams{Name: signedIn.Name, Value: signedIn.Value,
			URL: "http://" + s.addr + "/", HTTPOnly: &signedIn.HTTPOnly, SameSite: signedIn.SameSite})
		return err
	}), chromedp.Reload())
	tab.WaitText("#signin-why", "sign-in was signed out")
	tab.Eval(`document.querySelector('#signin').textContent`, &banner)
	if strings.Contains(banner, "Authorization") || strings.Contains(banner, "Bearer") {
		t.Errorf("the sign-in banner for a signed-out cookie says %q", banner)
	}

	// Signing in again in another tab signs this one in when it gets the
	// focus back: live, with Sign out, and no banner.
	link, err := httpapi.LoginURL("http://"+s.addr+"/", s.token, 0)
	if err != nil {
		t.Fatal(err)
	}
	b.Tab(t).Navigate(link)
	tab.Eval(`window.dispatchEvent(new Event('focus'))`, nil)
	tab.WaitText("#conn", "Live")
	tab.Run(chromedp.WaitVisible(chromedp.CSS(".signout button")), chromedp.WaitNotVisible(chromedp.CSS("#signin")))
	for _, m := range tab.Errors() {
		if m.Kind != browsertest.KindLog || m.Source != "network" {
			t.Errorf("the page reported an error: %v", m)
		}
	}
}

// TestDashboardHistoryHits searches what agents saw, in the dashboard: a
// hit shows only the scores the API gives it (a signal that did not find
// it, or found it at a BM25 that rounds to nothing, is not a 0), and a
// tool's output seen in several turns opens under the turn its hit names.
func TestDashboardHistoryHits(t *testing.T) {
	b := browsertest.New(t)
	e := newEnv(t)
	s := &dashServer{t: t, e: e, addr: freeAddr(t)}
	s.start(t.Context())

	// The same test output in three turns: one entry, three sightings.
	const coder = "/v1/windows/s-dash/coder"
	s.call("PUT", coder, map[string]any{"limit": 20000}, 200, nil)
	for i := 1; i <= 3; i++ {
		s.call("POST", coder+"/messages", map[string]any{"format": "anthropic", "messages": []json.RawMessage{
			json.RawMessage(fmt.Sprintf(`{"role":"user","content":"Step %d: why does the retry backoff explode?"}`, i)),
			json.RawMessage(fmt.Sprintf(`{"role":"assistant","content":[{"type":"tool_use","id":"call-%d","name":"run","input":{"cmd":"go test ./retry"}}]}`, i)),
			json.RawMessage(fmt.Sprintf(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"call-%d","content":"FAIL TestBackoff: backoff overflowed at attempt 40"}]}`, i)),
		}}, 201, nil)
	}
	var api struct{ Hits []map[string]any }
	s.call("GET", "/v1/search?q=backoff+overflowed&limit=20", nil, 200, &api)
	var output map[string]any
	for _, h := range api.Hits {
		if h["type"] == "tool_result" {
			output = h
		}
	}
	if output == nil {
		t.Fatalf("the API found no tool output: %v", api.Hits)
	}
	turn := regexp.MustCompile(`turn \d+`)
	hitTurn := turn.FindString(output["where"].(string))
	if hitTurn == "" {
		t.Fatalf("the tool output's hit names no turn: %v", output)
	}

	tab := b.Tab(t)
	tab.Navigate(s.login)
	tab.WaitText("#conn", "Live")
	tab.Click("#tab-search")
	tab.Run(chromedp.SendKeys(chromedp.CSS("#search-q"), "backoff overflowed"), chromedp.Click(chromedp.CSS("#search-form button")))
	tab.WaitText("#search-status", " for “")

	// Each hit's scores: the API's, and none it does not give.
	var shown []struct {
		Entry           string
		Lexical, Vector *float64
		Text            string
	}
	tab.Eval(`[...document.querySelectorAll('#search-hits li')].map(li => ({entry: li.dataset.entry, text: li.querySelector('.scores').textContent,
		lexical: li.querySelector('.scores .lexical') ? +li.querySelector('.scores .lexical').dataset.value : null,
		vector: li.querySelector('.scores .vector') ? +li.querySelector('.scores .vector').dataset.value : null}))`, &shown)
	if len(shown) != len(api.Hits) {
		t.Fatalf("%d hits on the page, %d from the API", len(shown), len(api.Hits))
	}
	for i, h := range api.Hits {
		for name, got := range map[string]*float64{"lexical": shown[i].Lexical, "vector": shown[i].Vector} {
			want, ok := h[name].(float64)
			switch {
			case !ok && got != nil:
				t.Errorf("hit %s shows %s %v (%q), which the API does not give", shown[i].Entry, name, *got, shown[i].Text)
			case ok && (got == nil || fmt.Sprintf("%.4f", *got) != fmt.Sprintf("%.4f", want)):
				t.Errorf("hit %s shows %s %v (%q), the API's %v", shown[i].Entry, name, got, shown[i].Text, want)
			}
		}
	}

	// The tool output opens under the turn its hit names, and no other.
	tab.Click(`#search-hits li[data-entry="` + output["entry"].(string) + `"] button`)
	tab.WaitText("#viewer-body", "backoff overflowed at attempt 40")
	var label string
	tab.Eval(`document.querySelector('#viewer-title').textContent + ' | ' + document.querySelector('#viewer-sub').textContent`, &label)
	if !strings.Contains(label, hitTurn) {
		t.Errorf("the hit names %s, the viewer it opens says %q", hitTurn, label)
	}
	for _, tn := range turn.FindAllString(label, -1) {
		if tn != hitTurn {
			t.Errorf("the hit names %s, the viewer it opens says %q", hitTurn, label)
		}
	}
	if os.Getenv("ENGRAM_TEST_AXE") != "" {
		if v := browsertest.SeriousViolations(tab.Axe(browsertest.AxeOptions{})); v != "" {
			t.Errorf("axe-core, a history hit: serious violations:\n%s", v)
		}
	}
	for _, m := range tab.Errors() {
		t.Errorf("the page reported an error: %v", m)
	}
}

// TestDashboardSavingsLabels checks the labels the savings chart draws
// under its bars: windows of one agent in several sessions can be told
// apart.
func TestDashboardSavingsLabels(t *testing.T) {
	b := browsertest.New(t)
	e := newEnv(t)
	s := &dashServer{t: t, e: e, addr: freeAddr(t)}
	s.start(t.Context())
	// A coder in three sessions, two of whose names differ only near
	// their end; a proxy in two sessions whose names differ only in their
	// middle; a reviewer alone.
	windows := []struct{ session, agent string }{{"s-dash", "coder"}, {"s-dash", "reviewer"}, {"run-0123456789-1", "coder"},
		{"run-0123456789-2", "coder"}, {"0123456789-one-abcdef", "proxy"}, {"0123456789-two-abcdef", "proxy"}}
	for _, w := range windows {
		path := "/v1/windows/" + w.session + "/" + w.agent
		s.callAs(w.session, "PUT", path, []byte(`{"limit":20000}`), 200)
		req, _ := json.Marshal(map[string]any{"format": "anthropic", "messages": dashTurn(1, "")})
		s.callAs(w.session, "POST", path+"/messages", req, 201)
		req, _ = json.Marshal(map[string]any{"message": "What does handler1 do?"})
		s.callAs(w.session, "POST", path+"/assemble", req, 200)
	}

	tab := b.Tab(t)
	tab.Navigate(s.login)
	tab.WaitText("#conn", "Live")
	// What the chart's canvas is given to write, and where: the lines of
	// one bar's label are written at one x.
	tab.Eval(`(() => { const fill = CanvasRenderingContext2D.prototype.fillText; window.__drawn = [];
		CanvasRenderingContext2D.prototype.fillText = function (text, x, y, ...rest) {
			if (this.canvas.closest('#savings-chart')) window.__drawn.push({text: String(text), x: Math.round(x), y});
			return fill.call(this, text, x, y, ...rest); }; })()`, nil)
	tab.Click("#tab-savings")
	tab.WaitText("#savings-chart-cap", "6 windows")
	type text struct {
		Text string
		X, Y float64
	}
	var drawn []text
	tab.Eval(`new Promise(r => requestAnimationFrame(() => r(window.__drawn)))`, &drawn)
	slices.SortStableFunc(drawn, func(a, b text) int { return cmp.Compare(a.Y, b.Y) })
	lines := map[float64][]string{} // x: the lines written there, top down, each once (the chart may be drawn again)
	for _, d := range drawn {
		if !slices.Contains(lines[d.X], d.Text) {
			lines[d.X] = append(lines[d.X], d.Text)
		}
	}
	var labels []string
	for _, ls := range lines {
		labels = append(labels, strings.Join(ls, " / "))
	}
	for _, want := range []string{"coder / s-dash", "reviewer", "coder / run-0…789-1", "coder / run-0…789-2",
		"proxy / 0123456789-one-abcdef", "proxy / 0123456789-two-abcdef"} {
		if !slices.Contains(labels, want) {
			t.Errorf("the savings chart has no bar labelled %q: it wrote %q", want, labels)
		}
	}
	if os.Getenv("ENGRAM_TEST_AXE") != "" {
		if v := browsertest.SeriousViolations(tab.Axe(browsertest.AxeOptions{})); v != "" {
			t.Errorf("axe-core, savings: serious violations:\n%s", v)
		}
	}
	for _, m := range tab.Errors() {
		t.Errorf("the page reported an error: %v", m)
	}
}
