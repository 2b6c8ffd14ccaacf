package proxy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/modelserver"
	"github.com/engramhq/engram/internal/proxy"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/postgres"
	"github.com/engramhq/engram/internal/store/postgres/pgtest"
	"github.com/engramhq/engram/internal/window"
)

// server is one engram proxy of a team's several over one PostgreSQL
// store, as a load balancer has them: a process of its own, with its own
// connections, engine and windows' Manager.
type server struct {
	st      store.Store
	p       *proxy.Proxy
	front   *httptest.Server
	windows *window.Manager
}

// startServer opens the database db as a server opens it and stands a
// proxy over it in front of the upstream up.
func startServer(t *testing.T, db string, up *modelserver.Server, opts proxy.Options) *server {
	t.Helper()
	st, err := postgres.Open(t.Context(), db, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	opts.Anthropic, opts.OpenAI = up.URL(), up.URL()
	_, m, p := newProxy(t, st, opts)
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	t.Cleanup(p.Wait)
	return &server{st: st, p: p, front: front, windows: m}
}

// echo answers "Question N: ..." with "Answer N.", whichever server
// sends it and in whatever order they come.
func echo(r *modelserver.Request) (modelserver.Response, error) {
	var n int
	if r.Params == nil || r.Params.LastUser() == nil {
		return modelserver.Response{}, fmt.Errorf("request %d: no user message", r.Seq)
	}
	if _, err := fmt.Sscanf(r.Params.LastUser().Text(), "Question %d:", &n); err != nil {
		return modelserver.Response{}, fmt.Errorf("request %d: %q is no question: %v", r.Seq, r.Params.LastUser().Text(), err)
	}
	return modelserver.Response{Content: []modelserver.Block{modelserver.Text(answer(n))}}, nil
}

func question(n int) string {
	return fmt.Sprintf("Question %d: %s", n, strings.Repeat("how many crates are on the ship today? ", 15))
}

func answer(n int) string {
	return fmt.Sprintf("Answer %d: %s", n, strings.Repeat("the quartermaster counts the crates again. ", 20))
}

// crates is the request of turn n of a conversation whose answers are
// echo's: the system prompt, and questions 0 to n with the answers to
// those before n.
func crates(n int) string {
	var msgs []map[string]any
	for i := 0; i <= n; i++ {
		msgs = append(msgs, map[string]any{"role": "user", "content": question(i)})
		if i < n {
			msgs = append(msgs, map[string]any{"role": "assistant", "content": []map[string]any{{"type": "text", "text": answer(i)}}})
		}
	}
	body, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 100, "system": "You count crates.", "messages": msgs})
	return string(body)
}

// ask sends turn n of the crates conversation to s and checks that its
// answer is echo's.
func (s *server) ask(t *testing.T, n int) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.front.URL+"/v1/messages", strings.NewReader(crates(n)))
	if err != nil {
		t.Error(err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", "sk-ant-test")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("X-Engram-Session", "crates")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), answer(n)) {
		t.Errorf("turn %d: HTTP %d %.300s", n, resp.StatusCode, b)
	}
}

// wantWindow checks that the crates conversation has one window, which
// holds its system prompt and turns 0 to n, each message once, in order.
func (s *server) wantWindow(t *testing.T, n int) {
	t.Helper()
	wins, err := s.st.Windows(t.Context(), "crates")
	if err != nil {
		t.Fatal(err)
	}
	if len(wins) != 1 {
		var keys []string
		for _, w := range wins {
			keys = append(keys, w.String())
		}
		t.Errorf("the conversation has %d windows (%s), want one", len(wins), strings.Join(keys, ", "))
	}
	_, held, _, err := s.windows.Messages(t.Context(), store.WindowKey{SessionID: "crates", AgentID: "proxy"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"system: You count crates."}
	for i := 0; i <= n; i++ {
		want = append(want, "user: "+question(i))
		if i < n {
			want = append(want, "assistant: "+answer(i))
		}
	}
	var got []string
	for _, msg := range held {
		got = append(got, string(msg.Role)+": "+msg.Blocks[0].Text)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		short := func(s []string) string {
			var b strings.Builder
			for _, x := range s {
				fmt.Fprintf(&b, "  %.40s\n", x)
			}
			return b.String()
		}
		t.Errorf("the window holds %d messages:\n%swant %d:\n%s", len(got), short(got), len(want), short(want))
	}
}

// TestProxy_TwoServersOneConversation: a conversation whose requests
// alternate between two proxies over one PostgreSQL store, as behind a
// load balancer. Each server notices what the other appended: the window
// holds the conversation once, in order, and every request goes upstream
// as one server alone would have sent it, evictions included.
func TestProxy_TwoServersOneConversation(t *testing.T) {
	const turns = 24
	opts := proxy.Options{Limit: 6000} // evicts from about turn 8
	run := func(servers ...*server) {
		for n := range turns {
			s := servers[n%len(servers)]
			s.ask(t, n)
			// The harness sends the next request once it has the answer:
			// by then the proxy has stored the turn.
			s.p.Wait()
		}
	}

	// One server alone, for what each request must be upstream.
	upOne := modelserver.Start(modelserver.Options{Main: repeat(echo, turns)})
	t.Cleanup(upOne.Close)
	run(startServer(t, pgtest.Database(t), upOne, opts))

	up := modelserver.Start(modelserver.Options{Main: repeat(echo, turns)})
	t.Cleanup(up.Close)
	db := pgtest.Database(t)
	a, b := startServer(t, db, up, opts), startServer(t, db, up, opts)
	run(a, b)
	if t.Failed() {
		t.FailNow()
	}
	if err := up.Err(); err != nil {
		t.Fatal(err)
	}
	a.wantWindow(t, turns-1)
	b.wantWindow(t, turns-1)

	alone, both := upOne.Requests(modelserver.KindMain), up.Requests(modelserver.KindMain)
	if len(both) != turns || len(alone) != turns {
		t.Fatalf("%d and %d requests upstream, want %d", len(alone), len(both), turns)
	}
	evicted := false
	for n := range turns {
		if string(both[n].Body) != string(alone[n].Body) {
			t.Errorf("turn %d went upstream with %d messages, %d bytes; one server alone sent %d messages, %d bytes",
				n, len(both[n].Params.Messages), len(both[n].Body), len(alone[n].Params.Messages), len(alone[n].Body))
		}
		evicted = evicted || len(alone[n].Params.Messages) < 2*n+1
	}
	if !evicted {
		t.Error("the window never evicted: the test does not reach the layout")
	}
	for _, s := range []*server{a, b} {
		if st := s.p.Stats(); st.FailedOpen != 0 {
			t.Errorf("a server failed open %d times", st.FailedOpen)
		}
	}
}

func repeat(step modelserver.Step, n int) []modelserver.Step {
	steps := make([]modelserver.Step, n)
	for i := range steps {
		steps[i] = step
	}
	return steps
}

// TestProxy_TwoServersAppendAtOnce: two proxies over one PostgreSQL
// store take requests of one conversation at the same moment: the same
// request twice (a load balancer's retry), or a turn and the next (the
// first server's append of its turn, made once the request has left, not
// in yet when the next request reaches the other). Whichever append
// commits first, the other reads the window again and appends only what
// it lacks: the window holds the conversation once, in order, and
// neither server fails open.
func TestProxy_TwoServersAppendAtOnce(t *testing.T) {
	const rounds = 12
	up := modelserver.Start(modelserver.Options{Main: repeat(echo, 4*rounds)})
	t.Cleanup(up.Close)
	db := pgtest.Database(t)
	opts := proxy.Options{Limit: 6000}
	a, b := startServer(t, db, up, opts), startServer(t, db, up, opts)
	at := func(s *server, n int, start <-chan struct{}, wg *sync.WaitGroup) {
		wg.Go(func() {
			<-start
			s.ask(t, n)
		})
	}
	n := 0
	for r := range rounds {
		start := make(chan struct{})
		var wg sync.WaitGroup
		first, second := a, b
		if r%2 == 1 {
			first, second = b, a
		}
		switch r % 3 {
		case 0: // the same request at both
			at(first, n, start, &wg)
			at(second, n, start, &wg)
			n++
		default: // a turn at one, the next at the other
			at(first, n, start, &wg)
			at(second, n+1, start, &wg)
			n += 2
		}
		close(start)
		wg.Wait()
		a.p.Wait()
		b.p.Wait()
	}
	// A copy of a request that comes late, to the server that did not
	// store what the other did since: the window holds it already.
	a.ask(t, n)
	a.p.Wait()
	b.ask(t, n)
	b.p.Wait()
	a.ask(t, n+1)
	a.p.Wait()
	b.ask(t, n)
	b.p.Wait()
	n += 2
	if t.Failed() {
		t.FailNow()
	}
	if err := up.Err(); err != nil {
		t.Fatal(err)
	}
	a.wantWindow(t, n-1)
	for _, s := range []*server{a, b} {
		if st := s.p.Stats(); st.FailedOpen != 0 {
			t.Errorf("a server failed open %d times", st.FailedOpen)
		}
	}
}

// TestProxy_ForgottenTail: the operator forgets the last messages a
// conversation's window holds, the whole of its last append (engram
// forget); the harness, which still has them, sends the next turn. The proxy appends it again, with what is
// new, at the place whose key the forgotten append took: the window
// holds the conversation, and no request fails open.
func TestProxy_ForgottenTail(t *testing.T) {
	f := newFixture(t, proxy.Options{}, repeat(echo, 4)...)
	s := &server{st: f.eng.Store(), p: f.p, front: f.front, windows: f.windows}
	s.ask(t, 0)
	s.p.Wait()
	s.ask(t, 1)
	s.p.Wait()
	key := store.WindowKey{SessionID: "crates", AgentID: "proxy"}
	_, items, _, err := f.eng.Store().WindowLedger(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	// The last append: turn 1's answer and question, from place 2.
	if len(items) != 4 {
		t.Fatalf("the window holds %d messages, want 4", len(items))
	}
	var tail []string
	for _, it := range items[2:] {
		tail = append(tail, it.EntryIDs...)
	}
	if _, err := f.eng.Forget(t.Context(), engine.ForgetRequest{Entries: tail, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, items, _, err := f.eng.Store().WindowLedger(t.Context(), key); err != nil || len(items) != 2 {
		t.Fatalf("after forgetting the last append: %d messages (%v), want 2", len(items), err)
	}
	s.ask(t, 2)
	s.p.Wait()
	s.ask(t, 3)
	s.p.Wait()
	if st := f.p.Stats(); st.FailedOpen != 0 {
		t.Errorf("%d requests failed open", st.FailedOpen)
	}
	s.wantWindow(t, 3)
}
