package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/postgres"
	"github.com/engramhq/engram/internal/store/postgres/pgtest"
)

// These tests run several engram serve processes on one PostgreSQL
// database, as several hosts would: what one server acknowledges, every
// other serves.

// server is one engram serve process of a test.
type server struct {
	name string
	proc *os.Process
	url  string
}

// peer is a client of the servers: it talks to one, and fails over to the
// next when its server is gone.
type peer struct {
	token          string
	session, agent string
	servers        []*server
	at             int // the server it talks to
	hc             *http.Client
}

// errUnknown says a request got no answer: it may or may not have been
// done (the server died with it in flight), so it is not acknowledged.
var errUnknown = errors.New("no answer")

// do sends a JSON request to the peer's server and decodes the answer into
// out; on no answer it moves to the next server and says errUnknown.
func (p *peer) do(method, path string, in, out any, hdr ...string) (int, http.Header, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, p.servers[p.at].url+path, body)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Engram-Session", p.session)
	req.Header.Set("X-Engram-Agent", p.agent)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		p.at = (p.at + 1) % len(p.servers)
		return 0, nil, fmt.Errorf("%w: %v", errUnknown, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		p.at = (p.at + 1) % len(p.servers)
		return 0, nil, fmt.Errorf("%w: %v", errUnknown, err)
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, resp.Header, fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, b)
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, resp.Header, fmt.Errorf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return resp.StatusCode, resp.Header, nil
}

// acked holds what the servers acknowledged.
type acked struct {
	mu      sync.Mutex
	entries map[string]string // entry ID -> content
	records map[string]uint64 // record ID -> gv it was given (0 when merged)
}

func (a *acked) entry(id, content string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.entries[id] = content
}

// record notes an acknowledged write of a record: created with its
// version, or merged into an existing record (version 0: the existing
// one's).
func (a *acked) record(w writeOut) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if w.Status != "created" {
		w.GV = 0
	}
	if _, ok := a.records[w.ID]; !ok || w.GV != 0 {
		a.records[w.ID] = w.GV
	}
}

type writeOut struct {
	Status string `json:"status"`
	ID     string `json:"id"`
	GV     uint64 `json:"gv"`
}

// words makes texts of writes that no two are near duplicates of each
// other (the archivalist merges those).
var words = strings.Fields(`amber basalt cobalt dune ember fjord garnet harbor indigo juniper kelp lichen meadow nickel
	opal pumice quartz raven sienna tundra umber violet walnut xenon yarrow zinc anchor beacon cipher delta`)

func phrase(r *rand.Rand, tag string) string {
	w := make([]string, 0, 8)
	for range 6 {
		w = append(w, words[r.IntN(len(words))])
	}
	return tag + " " + strings.Join(w, " ")
}

// TestServers_OneDatabase runs three engram serve processes on one
// PostgreSQL database under a storm of writers through HTTP and MCP,
// with readers tailing the event log and reading conditionally, and kills
// one server with SIGKILL midway: every acknowledged write must be there
// afterwards, the archivalist's versions unique and in record order, no
// reader may see version N+1 before N, the survivors must keep serving, and
// a window appended to through two servers must lose nothing and never
// interleave a turn.
func TestServers_OneDatabase(t *testing.T) {
	db := pgtest.Database(t)
	e := newEnv(t)
	e.vars["ENGRAM_STORE"] = db
	// The writers read each write's ID from its structured content.
	conf := filepath.Join(e.vars["HOME"], ".config", "engram", "config.toml")
	if err := os.WriteFile(conf, []byte("[retrieve]\ndeadline = \"1m\"\n[mcp]\nstructured = true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var servers []*server
	for i := range 3 {
		cmd, url, _ := startServe(ctx, t, e, "--no-index", "--no-proxy")
		servers = append(servers, &server{name: fmt.Sprintf("server %d", i), proc: cmd.Process, url: url})
	}
	tok, err := os.ReadFile(e.vars["ENGRAM_DATA_DIR"] + "/serve.token")
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tok))
	hc := &http.Client{Timeout: 20 * time.Second}
	newPeer := func(at int, session, agent string) *peer {
		return &peer{token: token, session: session, agent: agent, servers: servers, at: at, hc: hc}
	}

	// The window appended to through servers 0 and 1, opened first.
	if _, _, err := newPeer(0, "win", "w").do("PUT", "/v1/windows/win/w", map[string]any{"limit": 1_000_000}, nil); err != nil {
		t.Fatal(err)
	}

	got := &acked{entries: map[string]string{}, records: map[string]uint64{}}
	var (
		wg       sync.WaitGroup
		stop     atomic.Bool
		failures atomic.Int64 // requests with no answer (the killed server's)
		mu       sync.Mutex
		errs     []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(errs) < 20 {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}
	// writeAfterKill counts writes acknowledged after the kill.
	var killed atomic.Bool
	var afterKill atomic.Int64

	// HTTP writers: entries and global records, two per server.
	for w := range 6 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			p := newPeer(w%3, fmt.Sprintf("http-%d", w), fmt.Sprintf("ha-%d", w))
			patterns := 0
			for n := 0; !stop.Load(); n++ {
				var err error
				switch n % 5 {
				case 0, 3:
					content := fmt.Sprintf("writer %d entry %d: %s", w, n, phrase(r, "note"))
					var out struct{ ID string }
					if _, _, err = p.do("POST", "/v1/sessions/"+p.session+"/records", map[string]any{"type": "note", "content": content}, &out); err == nil {
						got.entry(out.ID, content)
					}
				default:
					kind, body := "decisions", map[string]any{"decision": phrase(r, fmt.Sprintf("decision w%d n%d", w, n))}
					switch {
					case n%5 == 2 && patterns < 5:
						patterns++
						kind, body = "patterns", map[string]any{"category": fmt.Sprintf("testing.w%d", w), "pattern": phrase(r, fmt.Sprintf("pattern w%d n%d", w, n))}
					case n%5 == 2:
						kind, body = "failures", map[string]any{"approach": phrase(r, fmt.Sprintf("approach w%d n%d", w, n)), "reason": phrase(r, "because")}
					case n%5 == 4:
						kind, body = "insights", map[string]any{"insight": phrase(r, fmt.Sprintf("insight w%d n%d", w, n))}
					}
					var out writeOut
					if _, _, err = p.do("POST", "/v1/"+kind, body, &out); err == nil {
						got.record(out)
					}
				}
				switch {
				case errors.Is(err, errUnknown):
					failures.Add(1)
				case err != nil:
					fail("http writer %d: %v", w, err)
				case killed.Load():
					afterKill.Add(1)
				}
			}
		})
	}

	// MCP writers: real client sessions, one per server; the killed
	// server's fails, and its client connects to the next server.
	for w := range 3 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 2))
			at := w
			var cs *mcp.ClientSession
			defer func() {
				if cs != nil {
					_ = cs.Close()
				}
			}()
			for n := 0; !stop.Load(); n++ {
				if cs == nil {
					c := mcp.NewClient(&mcp.Implementation{Name: "servers-test", Version: "v0"}, nil)
					var err error
					cs, err = c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: servers[at].url + "/mcp",
						HTTPClient: &http.Client{Timeout: 20 * time.Second, Transport: sessionBearer{token, fmt.Sprintf("mcp-%d", w), fmt.Sprintf("ma-%d", w)}},
						MaxRetries: -1}, nil)
					if err != nil {
						failures.Add(1)
						cs, at = nil, (at+1)%3
						continue
					}
				}
				name, args := "record_decision", map[string]any{"decision": phrase(r, fmt.Sprintf("mcp decision w%d n%d", w, n))}
				content := fmt.Sprintf("mcp writer %d entry %d: %s", w, n, phrase(r, "note"))
				if n%2 == 0 {
					name, args = "record", map[string]any{"type": "note", "content": content}
				}
				cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
				res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: name, Arguments: args})
				ccancel()
				if err != nil {
					// The connection is gone (or the call's answer with
					// it): not acknowledged; fail over.
					failures.Add(1)
					_ = cs.Close()
					cs, at = nil, (at+1)%3
					continue
				}
				if res.IsError {
					fail("mcp writer %d: %s: %v", w, name, res.Content)
					continue
				}
				b, _ := json.Marshal(res.StructuredContent)
				var out writeOut
				if err := json.Unmarshal(b, &out); err != nil || out.ID == "" {
					fail("mcp writer %d: %s: %s", w, name, b)
					continue
				}
				if name == "record" {
					got.entry(out.ID, content)
				} else {
					got.record(out)
				}
				if killed.Load() {
					afterKill.Add(1)
				}
			}
		})
	}

	// Readers, one per server: each tails the event log, where the global
	// versions of the records added must come one after another, and reads
	// the decisions conditionally, whose versions must never go back.
	var tailed, notModified atomic.Int64
	for rd := range 3 {
		wg.Go(func() {
			p := newPeer(rd, "reader", fmt.Sprintf("ra-%d", rd))
			after, lastGV, etagGV := int64(0), uint64(0), uint64(0)
			for !stop.Load() {
				var evs struct{ Events []store.ArchiveEvent }
				if _, _, err := p.do("GET", fmt.Sprintf("/v1/events?after=%d&limit=1000", after), nil, &evs); err != nil {
					if !errors.Is(err, errUnknown) {
						fail("reader %d: %v", rd, err)
					}
					continue
				}
				for _, ev := range evs.Events {
					if ev.Seq <= after {
						fail("reader %d: event %d after %d", rd, ev.Seq, after)
					}
					after = ev.Seq
					if strings.HasSuffix(ev.Type, "_add") {
						if ev.GV != lastGV+1 {
							fail("reader %d: event %d (%s) has version %d after version %d", rd, ev.Seq, ev.Type, ev.GV, lastGV)
						}
						lastGV = ev.GV
					}
					tailed.Add(1)
				}
				var res struct{ GV uint64 }
				status, hdr, err := p.do("GET", "/v1/decisions?limit=1", nil, &res, "If-None-Match", fmt.Sprintf(`"%d-0"`, etagGV))
				switch {
				case status == http.StatusNotModified:
					notModified.Add(1)
				case err != nil:
					if !errors.Is(err, errUnknown) {
						fail("reader %d: %v", rd, err)
					}
					continue
				}
				var gv, sv uint64
				if _, err := fmt.Sscanf(hdr.Get("ETag"), `"%d-%d"`, &gv, &sv); err != nil || gv < etagGV {
					fail("reader %d: ETag %s after version %d", rd, hdr.Get("ETag"), etagGV)
				}
				etagGV = gv
			}
		})
	}

	// Two appenders of one window, through servers 0 and 1 (which live):
	// each turn is three messages that must land together, in order.
	type turn struct {
		texts     []string
		positions []int
	}
	var turns []turn
	var conflicts atomic.Int64
	var turnsMu sync.Mutex
	for a := range 2 {
		wg.Go(func() {
			p := newPeer(a, "win", "w")
			for n := 0; !stop.Load(); n++ {
				var msgs []map[string]string
				var texts []string
				for k := range 3 {
					text := fmt.Sprintf("appender %d turn %d message %d", a, n, k)
					msgs = append(msgs, map[string]string{"role": []string{"user", "assistant", "user"}[k], "content": text})
					texts = append(texts, text)
				}
				var out struct{ Positions []int }
				status, _, err := p.do("POST", "/v1/windows/win/w/messages", map[string]any{"messages": msgs}, &out)
				if status == http.StatusConflict {
					// The other server kept changing the window for
					// every attempt of this one: refused cleanly, and
					// nothing written.
					conflicts.Add(1)
					continue
				}
				if err != nil {
					fail("appender %d: %v", a, err)
					continue
				}
				turnsMu.Lock()
				turns = append(turns, turn{texts, out.Positions})
				turnsMu.Unlock()
			}
		})
	}

	time.Sleep(3 * time.Second)
	if err := servers[2].proc.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed.Store(true)
	time.Sleep(3 * time.Second)
	stop.Store(true)
	wg.Wait()
	for _, s := range errs {
		t.Error(s)
	}
	if afterKill.Load() == 0 {
		t.Error("no write was acknowledged after the kill")
	}
	t.Logf("acknowledged %d entries and %d records (%d after the kill), %d requests unanswered, %d events tailed, %d not modified, %d window turns (%d refused as conflicts)",
		len(got.entries), len(got.records), afterKill.Load(), failures.Load(), tailed.Load(), notModified.Load(), len(turns), conflicts.Load())

	live := servers[:2]
	p := &peer{token: token, session: "check", agent: "check", servers: live, hc: hc}

	// Every acknowledged entry is there, byte for byte.
	ids := slices.Sorted(func(yield func(string) bool) {
		for id := range got.entries {
			if !yield(id) {
				return
			}
		}
	})
	for chunk := range slices.Chunk(ids, 20) {
		var out struct {
			Items []struct{ ID, Content string }
		}
		if _, _, err := p.do("POST", "/v1/retrieve", map[string]any{"content_ids": chunk, "max_tokens": 8000}, &out); err != nil {
			t.Fatal(err)
		}
		found := map[string]string{}
		for _, it := range out.Items {
			found[it.ID] += it.Content
		}
		for _, id := range chunk {
			if !strings.Contains(found[id], got.entries[id]) {
				t.Errorf("acknowledged entry %s is not served: %q", id, found[id])
			}
		}
	}

	// Every acknowledged record is there, with the version it was given.
	served := map[string]uint64{}
	for _, kind := range []string{"patterns", "failures", "insights", "decisions"} {
		var out struct {
			Records []struct {
				ID string
				GV uint64
			}
			More bool
		}
		if _, _, err := p.do("GET", "/v1/"+kind+"?all=true&limit=1000", nil, &out); err != nil {
			t.Fatal(err)
		}
		if out.More {
			t.Fatalf("more than 1000 %s", kind)
		}
		for _, r := range out.Records {
			served[r.ID] = r.GV
		}
	}
	for id, gv := range got.records {
		if have, ok := served[id]; !ok || (gv != 0 && have != gv) {
			t.Errorf("acknowledged record %s (version %d) is served as version %d (%v)", id, gv, have, ok)
		}
	}

	// The versions of the records are unique and follow their order.
	st, err := postgres.Open(ctx, db, postgres.Options{NoMigrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	recs, err := st.ArchiveRecords(ctx, store.RecordQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for _, r := range recs {
		if r.GV == 0 {
			continue
		}
		if r.GV != last+1 {
			t.Errorf("record %s (seq %d) has version %d after version %d", r.ID, r.Seq, r.GV, last)
		}
		last = r.GV
	}

	// The window holds every acknowledged turn, each whole and in order.
	var ctxOut struct {
		Items []struct {
			Pos     int
			Message struct{ Blocks []struct{ Text string } }
		}
	}
	if _, _, err := p.do("GET", "/v1/windows/win/w/context", nil, &ctxOut); err != nil {
		t.Fatal(err)
	}
	at := map[int]string{}
	for _, it := range ctxOut.Items {
		if len(it.Message.Blocks) > 0 {
			at[it.Pos] = it.Message.Blocks[0].Text
		}
	}
	slices.SortFunc(turns, func(a, b turn) int { return cmp.Compare(a.positions[0], b.positions[0]) })
	next := 0
	for _, tn := range turns {
		if len(tn.positions) != 3 || tn.positions[0] != next || tn.positions[2] != next+2 {
			t.Errorf("turn %q at positions %v, want %d-%d", tn.texts[0], tn.positions, next, next+2)
		}
		for k, pos := range tn.positions {
			if at[pos] != tn.texts[k] {
				t.Errorf("window position %d holds %q, want %q", pos, at[pos], tn.texts[k])
			}
		}
		next = tn.positions[len(tn.positions)-1] + 1
	}
	if len(ctxOut.Items) != next {
		t.Errorf("the window holds %d messages, the acknowledged turns %d", len(ctxOut.Items), next)
	}

	measureVisibility(t, token, hc, live)
}

// measureVisibility measures how long after a write on one server another
// server's readers see it: an event tail (GET /v1/events?after=) and a
// conditional read (If-None-Match), each polling in a loop, note when they
// first see each version; the delay is from the write's answer to that.
func measureVisibility(t *testing.T, token string, hc *http.Client, live []*server) {
	const writes = 300
	w := &peer{token: token, session: "measure", agent: "mw", servers: live, at: 0, hc: hc}
	var (
		mu            sync.Mutex
		acks          = map[uint64]time.Time{}
		tailSeen      = map[uint64]time.Time{}
		condSeen      = map[uint64]time.Time{}
		done          atomic.Bool
		wg            sync.WaitGroup
		first         uint64
		tailN, condN  atomic.Int64
		tailEr, condE atomic.Int64
	)
	var evs struct{ Events []store.ArchiveEvent }
	tail := &peer{token: token, session: "measure", agent: "mt", servers: live, at: 1, hc: hc}
	if _, _, err := tail.do("GET", "/v1/events?limit=1", nil, &evs); err != nil {
		t.Fatal(err)
	}
	after := int64(0)
	if len(evs.Events) > 0 {
		after = evs.Events[0].Seq
	}
	wg.Go(func() {
		for !done.Load() {
			var evs struct{ Events []store.ArchiveEvent }
			if _, _, err := tail.do("GET", fmt.Sprintf("/v1/events?after=%d&limit=1000", after), nil, &evs); err != nil {
				tailEr.Add(1)
				continue
			}
			tailN.Add(1)
			now := time.Now()
			mu.Lock()
			for _, ev := range evs.Events {
				after = ev.Seq
				if ev.Type == "decision_add" {
					tailSeen[ev.GV] = now
				}
			}
			mu.Unlock()
		}
	})
	// The conditional reader knows the version before the first write, so
	// that it counts every write it then sees, however late its first poll.
	cond := &peer{token: token, session: "measure", agent: "mc", servers: live, at: 1, hc: hc}
	var have uint64
	if _, hdr, err := cond.do("GET", "/v1/decisions?limit=1", nil, nil); err != nil {
		t.Fatal(err)
	} else if _, err := fmt.Sscanf(hdr.Get("ETag"), `"%d-`, &have); err != nil || have == 0 {
		t.Fatalf("the decisions' ETag %q before the writes: %v", hdr.Get("ETag"), err)
	}
	wg.Go(func() {
		for !done.Load() {
			status, hdr, err := cond.do("GET", "/v1/decisions?limit=1", nil, nil, "If-None-Match", fmt.Sprintf(`"%d-0"`, have))
			if err != nil && status != http.StatusNotModified {
				condE.Add(1)
				continue
			}
			condN.Add(1)
			var gv, sv uint64
			if _, err := fmt.Sscanf(hdr.Get("ETag"), `"%d-%d"`, &gv, &sv); err != nil {
				condE.Add(1)
				continue
			}
			now := time.Now()
			mu.Lock()
			for v := have + 1; v <= gv && have > 0; v++ {
				condSeen[v] = now
			}
			mu.Unlock()
			have = gv
		}
	})
	r := rand.New(rand.NewPCG(7, 7))
	for i := range writes {
		var out writeOut
		if _, _, err := w.do("POST", "/v1/decisions", map[string]any{"decision": phrase(r, fmt.Sprintf("measured decision %d", i))}, &out); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		acks[out.GV] = time.Now()
		if first == 0 {
			first = out.GV
		}
		mu.Unlock()
		time.Sleep(time.Duration(r.IntN(4)) * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	done.Store(true)
	wg.Wait()
	for _, m := range []struct {
		name   string
		seen   map[uint64]time.Time
		polls  *atomic.Int64
		errors *atomic.Int64
	}{{"event tail", tailSeen, &tailN, &tailEr}, {"conditional read", condSeen, &condN, &condE}} {
		var d []time.Duration
		missed := 0
		for gv, at := range acks {
			seen, ok := m.seen[gv]
			if !ok {
				missed++
				continue
			}
			d = append(d, max(seen.Sub(at), 0))
		}
		if missed > 0 || m.errors.Load() > 0 {
			t.Errorf("%s: %d of %d writes never seen, %d errors", m.name, missed, len(acks), m.errors.Load())
		}
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		t.Logf("%s on another server: %d writes, %d polls; seen after the write's answer: p50 %v, p95 %v, max %v",
			m.name, len(d), m.polls.Load(), d[len(d)/2], d[len(d)*95/100], d[len(d)-1])
	}
}

// sessionBearer adds the token and a session and agent to every request.
type sessionBearer struct{ token, session, agent string }

func (b sessionBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	r.Header.Set("X-Engram-Session", b.session)
	r.Header.Set("X-Engram-Agent", b.agent)
	return http.DefaultTransport.RoundTrip(r)
}
