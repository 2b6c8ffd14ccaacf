package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/bench"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/modelserver"
	"github.com/engramhq/engram/internal/proxy"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
)

// The goals of issue 26 the bench reports against.
const (
	proxyGoalOverhead = 5 * time.Millisecond
	proxyGoalTTFB     = 2 * time.Millisecond
	proxyGoalStream   = 1 << 20 // RSS per concurrent stream
)

// proxyBenchFlags are the flags of engram bench proxy.
type proxyBenchFlags struct {
	n, first, messages, turns, streams int
	pace, settle, releaseIdle          time.Duration
	window                             int
	exe, memProfile                    string
	seed                               uint64
}

func (a *app) benchProxyCmd() *cobra.Command {
	var fl proxyBenchFlags
	cmd := &cobra.Command{
		Use:     "proxy",
		PreRunE: atLeast(map[string]int64{"requests": 1, "first": 1, "messages": 1, "turns": 1, "streams": 0, "pace": 0, "settle": 0, "window": 0, "release-idle": 0}),
		Short:   "What engram proxy adds to a model request: latency, first byte, memory per stream",
		Long: `Measure what engram proxy adds to a request, against the same request sent
straight to the model, in the same run. The model is the scripted model
server (internal/modelserver) on loopback; the conversation is a synthetic
Claude Code session of --messages messages: a system prompt of about 3,000
tokens, ten tool definitions, user prompts, and assistant tool calls
answered by tool results of a few hundred bytes to a few KB (the bench
corpus's sizes). The model answers each request with the conversation's
next assistant message.

Latency: an in-process proxy (as engram proxy builds it: this config, a new
store in a temporary directory) on a loopback port. Each request goes three
ways, each first in turn and each once that proxy is idle: to the model
server direct, through a bare reverse proxy (net/http/httputil: the floor
of any proxy), and through engram's. The overhead is the difference of
each request's pair, through a proxy minus direct. Two cases, each
non-streamed and streamed:

  steady       the per-turn cost: a session's next request, the one before
               plus the model's answer and a new user message, so the
               proxy appends two messages. Each session is seeded with its
               first request (not timed), then --turns requests are timed,
               the last of --messages messages.
  first sight  a new session each time: the proxy appends all
               --messages messages, once per session.

For streams, the time to the first byte of the body is compared too.

Memory: this engram binary (--exe) runs engram proxy as a subprocess over a
new store, in front of the model server; --streams sessions are seeded,
then their next requests run at once, streamed, the model's events spaced
by --pace so that they are all open together. The proxy's resident set
(VmRSS in /proc/PID/status, Linux) is read before, every 20 ms during, and
--settle after; the per-stream figure is (peak - baseline) / --streams.
The subprocess runs with GODEBUG=gctrace=1, whose lines give the Go heap
live after its last collection: about what the resident set would come
down to if the proxy collected and returned its free memory
(debug.FreeOSMemory). By itself the runtime collects when the heap reaches
its goal (twice the live heap) or after two minutes, and returns only what
is above that goal; the proxy returns its free memory itself once idle for
--release-idle (its own flag, passed on), before --settle ends.

Profiles: engram --cpuprofile FILE bench proxy labels the in-process
proxy's work with the phase (go tool pprof -tagfocus phase=steady);
--memprofile writes what that proxy holds once the latency phase is done.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.benchProxy(cmd.Context(), fl)
		},
	}
	f := cmd.Flags()
	f.IntVarP(&fl.n, "requests", "n", 200, "steady-state requests timed, per form (non-streamed, streamed)")
	f.IntVar(&fl.first, "first", 30, "first-sight requests timed, per form")
	f.IntVar(&fl.messages, "messages", 200, "messages in a timed request")
	f.IntVar(&fl.turns, "turns", 10, "steady-state requests timed per session")
	f.IntVar(&fl.streams, "streams", 50, "concurrent streams of the memory phase (0: skip it)")
	f.DurationVar(&fl.pace, "pace", 250*time.Millisecond, "the pause between a stream's events in the memory phase")
	f.DurationVar(&fl.settle, "settle", 5*time.Second, "how long after the streams end the memory is read again")
	f.IntVar(&fl.window, "window", 0, "the in-process proxy's window in tokens (engram proxy --window): under the conversation's size, the requests are laid out with markers (default: the model's, 200,000: they go whole)")
	f.DurationVar(&fl.releaseIdle, "release-idle", 2*time.Second, "the proxy's --release-idle: how long idle before it returns its free memory to the system")
	f.StringVar(&fl.exe, "exe", "", "the engram binary the memory phase runs (default: this one)")
	f.StringVar(&fl.memProfile, "memprofile", "", "write a heap profile of this process after the latency phase (what the in-process proxy holds for the sessions it saw) to this file")
	f.Uint64Var(&fl.seed, "seed", 1, "corpus seed")
	return cmd
}

func (a *app) benchProxy(ctx context.Context, fl proxyBenchFlags) (err error) {
	// Each flag's least is checked before (atLeast); this is how they go
	// together.
	if fl.messages-2*fl.turns < 2 {
		return usagef("--turns %d of --messages %d: a session's seed (messages - 2*turns) must hold at least 2 messages", fl.turns, fl.messages)
	}
	exe := fl.exe
	if fl.streams > 0 && exe == "" {
		if exe, err = os.Executable(); err != nil {
			return err
		}
		if filepath.Base(exe) != "engram" {
			return usagef("the memory phase runs engram proxy from this binary, %s, which is not engram: build it (make build; ./bin/engram bench proxy) or name one with --exe", exe)
		}
	}
	pb := &proxyBench{corpus: bench.NewCorpus(fl.seed), rng: rand.New(rand.NewPCG(fl.seed, 26)), convs: map[string]*benchConv{}}
	pb.makePreamble()
	up := modelserver.Start(modelserver.Options{
		Classify: func(*modelserver.Request) modelserver.Kind { return kindBench },
		Side:     pb.answer,
		Forget:   true,
	})
	defer up.Close()
	pb.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2*fl.streams + 4, DisableCompression: true}}
	defer pb.client.CloseIdleConnections()

	sample := pb.newConv("sample", fl.messages)
	body := pb.body(sample, fl.messages, false)
	fmt.Fprintf(a.stdout, "request: %d messages, %s (system prompt %s, tools %s); %d CPUs\n",
		fl.messages, humanBytes(int64(len(body))), humanBytes(int64(pb.systemBytes)), humanBytes(int64(pb.toolBytes)), runtime.GOMAXPROCS(0))
	pb.forget(sample)

	lat, err := a.benchProxyLatency(ctx, pb, up, fl)
	if err != nil {
		return err
	}
	if err := a.printProxyLatency(lat, fl); err != nil {
		return err
	}
	if fl.streams == 0 {
		return nil
	}
	mem, err := a.benchProxyMemory(ctx, pb, up, exe, fl)
	if err != nil {
		return err
	}
	return a.printProxyMemory(mem, fl)
}

// maxToolResult bounds a tool result of the bench's conversations, so
// that one of 200 messages stays under the window's eviction threshold
// (the proxy sends it as it came) and a few hundred KB.
const maxToolResult = 6000

// kindBench is the kind of every request the bench sends: the model
// server answers them all with proxyBench.answer.
const kindBench modelserver.Kind = "bench"

// benchConv is one synthetic conversation: msgs[i] its i-th message as
// the harness sends it, last[i] the same as the last message of a request
// (with Claude Code's cache breakpoint), answer[i] the blocks of an
// assistant message, which the model answers with when a request stops
// before it.
type benchConv struct {
	session string
	msgs    []json.RawMessage
	last    []json.RawMessage
	answer  map[int][]modelserver.Block
	pace    time.Duration
}

// proxyBench holds the bench's workload and its client.
type proxyBench struct {
	corpus *bench.Corpus
	rng    *rand.Rand
	client *http.Client
	seq    atomic.Int64
	token  string

	preamble               []byte // the body's fields before the messages
	systemBytes, toolBytes int
	sessions, tools        int // made so far, for their ids

	// mu guards convs, which the model's handlers read.
	mu    sync.Mutex
	convs map[string]*benchConv
}

// draw returns the corpus's next message of type t.
func (pb *proxyBench) draw(t store.ContentType) string {
	for {
		if m := pb.corpus.Next(); m.Type == t {
			return m.Content
		}
	}
}

// makePreamble writes the fields of every request but its messages: a
// system prompt of about 3,000 tokens in two text blocks, the first
// with a cache breakpoint, and ten tool definitions, as Claude Code sends
// them.
func (pb *proxyBench) makePreamble() {
	var sys strings.Builder
	sys.WriteString("You are an interactive CLI tool that helps users with software engineering tasks.\n\n")
	for sys.Len() < 13000 {
		sys.WriteString("# " + pb.corpus.Word() + "\n" + pb.draw(store.AgentResponse) + "\n\n")
	}
	system := []map[string]any{
		{"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.", "cache_control": map[string]string{"type": "ephemeral"}},
		{"type": "text", "text": sys.String(), "cache_control": map[string]string{"type": "ephemeral"}},
	}
	var tools []map[string]any
	for _, name := range []string{"Bash", "Read", "Edit", "Write", "Grep", "Glob", "TodoWrite", "Task", "WebFetch", "WebSearch"} {
		tools = append(tools, map[string]any{
			"name":        name,
			"description": pb.draw(store.AgentResponse),
			"input_schema": map[string]any{"type": "object", "$schema": "http://json-schema.org/draft-07/schema#", "additionalProperties": false,
				"required": []string{"command"},
				"properties": map[string]any{
					"command":     map[string]string{"type": "string", "description": pb.draw(store.UserPrompt)},
					"path":        map[string]string{"type": "string", "description": "The absolute path of the file."},
					"description": map[string]string{"type": "string", "description": pb.draw(store.UserPrompt)},
					"timeout":     map[string]string{"type": "number", "description": "Optional timeout in milliseconds (max 600000)."},
				}},
		})
	}
	sb, _ := json.Marshal(system)
	tb, _ := json.Marshal(tools)
	pb.systemBytes, pb.toolBytes = len(sb), len(tb)
	pb.preamble = fmt.Appendf(nil, `{"model":"claude-sonnet-4-5","max_tokens":32000,"system":%s,"tools":%s,`, sb, tb)
}

// newConv makes a conversation of n+1 messages (the last the answer to
// a request of n), for a new session, and registers it with the model.
// It is not safe for concurrent use.
// Its requests are its first k messages, k of n's parity: the last one
// a user message. When n is even the session opens with a user message of
// the project's context (CLAUDE.md), then the first prompt, as the
// alternation of roles otherwise makes every request odd.
func (pb *proxyBench) newConv(prefix string, n int) *benchConv {
	pb.sessions++
	id := fmt.Sprintf("%08x-0000-4000-8000-%012d", pb.rng.Uint32(), pb.sessions)
	c := &benchConv{session: prefix + "-" + id, answer: map[int][]modelserver.Block{}}
	type msg struct {
		role   string
		blocks []map[string]any
	}
	var ms []msg
	user := func(blocks ...map[string]any) { ms = append(ms, msg{"user", blocks}) }
	text := func(s string) map[string]any { return map[string]any{"type": "text", "text": s} }
	if n%2 == 0 {
		user(text("<system-reminder>\nAs you answer the user's questions, you can use the following context:\n# claudeMd\n" +
			pb.draw(store.AgentResponse) + "\n</system-reminder>"))
	}
	user(text(pb.draw(store.UserPrompt)))
	for len(ms) < n+1 {
		// A turn: some tool calls, each answered by its result, then the
		// assistant's answer and the next prompt.
		calls := max(1, min(12, int(math.Round(3*math.Exp(0.6*pb.rng.NormFloat64())))))
		for range calls {
			var call struct {
				Tool string `json:"tool"`
			}
			input := pb.draw(store.ToolCall)
			input = input[:strings.LastIndexByte(input, '}')+1] // the corpus tags each message after its JSON
			_ = json.Unmarshal([]byte(input), &call)
			pb.tools++
			toolID := fmt.Sprintf("toolu_bench%013d", pb.tools)
			say := pb.draw(store.UserPrompt)
			if i := strings.Index(say, ". "); i > 0 {
				say = say[:i+1]
			}
			answer := []modelserver.Block{modelserver.Text(say), {Type: "tool_use", ID: toolID, Name: call.Tool, Input: json.RawMessage(input)}}
			c.answer[len(ms)] = answer
			ms = append(ms, msg{"assistant", []map[string]any{text(say),
				{"type": "tool_use", "id": toolID, "name": call.Tool, "input": json.RawMessage(input)}}})
			out := pb.draw(store.ToolResult)
			if len(out) > maxToolResult { // as Claude Code truncates long outputs
				out = out[:maxToolResult] + "\n... [output truncated]"
			}
			user(map[string]any{"type": "tool_result", "tool_use_id": toolID, "content": out})
		}
		say := pb.draw(store.AgentResponse)
		c.answer[len(ms)] = []modelserver.Block{modelserver.Text(say)}
		ms = append(ms, msg{"assistant", []map[string]any{text(say)}})
		user(text(pb.draw(store.UserPrompt)))
	}
	ms = ms[:n+1]
	for _, m := range ms {
		b, _ := json.Marshal(map[string]any{"role": m.role, "content": m.blocks})
		c.msgs = append(c.msgs, b)
		last := b
		if m.role == "user" {
			blocks := append([]map[string]any(nil), m.blocks...)
			end := map[string]any{}
			for k, v := range blocks[len(blocks)-1] {
				end[k] = v
			}
			end["cache_control"] = map[string]string{"type": "ephemeral"}
			blocks[len(blocks)-1] = end
			last, _ = json.Marshal(map[string]any{"role": m.role, "content": blocks})
		}
		c.last = append(c.last, last)
	}
	pb.mu.Lock()
	pb.convs[c.session] = c
	pb.mu.Unlock()
	return c
}

// forget drops a conversation once its session is done.
func (pb *proxyBench) forget(c *benchConv) {
	pb.mu.Lock()
	delete(pb.convs, c.session)
	pb.mu.Unlock()
}

// body is the request of c's first k messages.
func (pb *proxyBench) body(c *benchConv, k int, stream bool) []byte {
	size := len(pb.preamble) + 200
	for _, m := range c.msgs[:k] {
		size += len(m) + 1
	}
	b := make([]byte, 0, size)
	b = append(b, pb.preamble...)
	b = fmt.Appendf(b, `"stream":%t,"metadata":{"user_id":%q},"messages":[`, stream,
		`{"device_id":"bench","account_uuid":"","session_id":"`+c.session+`","bench_messages":`+strconv.Itoa(k)+`}`)
	for i, m := range c.msgs[:k] {
		if i > 0 {
			b = append(b, ',')
		}
		if i == k-1 {
			m = c.last[i]
		}
		b = append(b, m...)
	}
	return append(b, "]}"...)
}

// answer is the model's step: the next message of the request's
// conversation.
func (pb *proxyBench) answer(r *modelserver.Request) (modelserver.Response, error) {
	if r.Params == nil {
		return modelserver.Response{}, errors.New("not a Messages request")
	}
	var meta struct {
		UserID string `json:"user_id"`
	}
	var user struct {
		SessionID string `json:"session_id"`
		// Messages is how many messages the client sent: the proxy may
		// send fewer, laid out.
		Messages int `json:"bench_messages"`
	}
	if err := json.Unmarshal(r.Params.Raw["metadata"], &meta); err != nil {
		return modelserver.Response{}, fmt.Errorf("metadata: %w", err)
	}
	if err := json.Unmarshal([]byte(meta.UserID), &user); err != nil {
		return modelserver.Response{}, fmt.Errorf("metadata.user_id: %w", err)
	}
	pb.mu.Lock()
	c := pb.convs[user.SessionID]
	pb.mu.Unlock()
	if c == nil {
		return modelserver.Response{}, fmt.Errorf("no conversation for session %s", user.SessionID)
	}
	blocks, ok := c.answer[user.Messages]
	if !ok {
		return modelserver.Response{}, fmt.Errorf("session %s: no assistant message at %d", user.SessionID, user.Messages)
	}
	return modelserver.Response{Content: blocks, Pace: c.pace}, nil
}

// timing is one request as the client saw it: until the body's first
// byte, and until its end.
type timing struct {
	first, total time.Duration
	seq          int64 // the request's X-Bench-Seq
}

// send posts body to base's /v1/messages and reads the answer to its end.
func (pb *proxyBench) send(ctx context.Context, base, phase string, body []byte) (timing, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/messages", bytes.NewReader(body))
	if err != nil {
		return timing{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", "sk-ant-bench")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("User-Agent", "claude-cli/2.1.121 (external, cli)")
	req.Header.Set("X-Bench-Phase", phase)
	var t timing
	t.seq = pb.seq.Add(1)
	req.Header.Set("X-Bench-Seq", strconv.FormatInt(t.seq, 10))
	if pb.token != "" {
		req.Header.Set("X-Engram-Token", pb.token)
	}
	start := time.Now()
	resp, err := pb.client.Do(req)
	if err != nil {
		return t, err
	}
	defer resp.Body.Close()
	buf := make([]byte, 32<<10)
	var tail []byte
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if t.first == 0 {
				t.first = time.Since(start)
			}
			tail = append(tail, buf[:n]...)
			if resp.StatusCode == http.StatusOK && len(tail) > 256 {
				tail = tail[len(tail)-256:]
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return t, err
		}
	}
	t.total = time.Since(start)
	if resp.StatusCode != http.StatusOK {
		return t, fmt.Errorf("%s: %s: %s", base, resp.Status, tail)
	}
	if !bytes.Contains(tail, []byte("message_stop")) && !bytes.Contains(tail, []byte(`"stop_reason"`)) {
		return t, fmt.Errorf("%s: the answer ends without its stop: %q", base, tail)
	}
	return t, nil
}

// proxyCase is the timings of one case: each request direct, through a
// bare reverse proxy and through engram's, by index.
type proxyCase struct {
	name, phase         string
	stream              bool
	direct, bare, proxy []timing
	// own is engram's own time of each request through it: from its
	// handler's start to the request's leaving for the model (before),
	// plus from the model's answer's end to the handler's end; before
	// alone is what it adds to the first byte. Neither holds any time
	// of the network's or the model's.
	own, before []time.Duration
}

// diffs are the differences, request by request, of ts and the same
// requests sent direct.
func (c *proxyCase) diffs(ts []timing, first bool) []time.Duration {
	out := make([]time.Duration, len(c.direct))
	for i := range c.direct {
		if first {
			out[i] = ts[i].first - c.direct[i].first
		} else {
			out[i] = ts[i].total - c.direct[i].total
		}
	}
	return out
}

func totals(ts []timing, first bool) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = t.total
		if first {
			out[i] = t.first
		}
	}
	return out
}

// proxyLatency is the latency phase's result.
type proxyLatency struct {
	cases []*proxyCase
	stats proxy.Stats
	store int64
}

// benchProxyLatency times the cases against an in-process proxy.
func (a *app) benchProxyLatency(ctx context.Context, pb *proxyBench, up *modelserver.Server, fl proxyBenchFlags) (*proxyLatency, error) {
	dir, cleanup, err := benchDir("")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "proxy.db"), sqlite.Options{Logger: a.log, Search: a.searchOptions()})
	if err != nil {
		return nil, err
	}
	defer func() { _ = st.Close() }()
	eng, err := engine.New(st, a.engineOptions())
	if err != nil {
		return nil, err
	}
	windows, err := a.windowManager(eng)
	if err != nil {
		return nil, err
	}
	cat, err := a.cfg.Catalog()
	if err != nil {
		return nil, err
	}
	marks := &benchMarks{at: map[int64]*benchMark{}}
	tr := &markingTransport{base: &http.Transport{DisableCompression: true}, marks: marks}
	p, err := proxy.New(eng, windows, proxy.Options{Anthropic: up.URL(), Catalog: cat, Logger: a.log, Transport: tr, Limit: fl.window})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	// The proxy's work is labelled with the bench's phase (warm, seed,
	// steady, first) for a CPU profile (engram --cpuprofile FILE bench
	// proxy; go tool pprof -tagfocus phase=steady).
	// Its handlers are counted, so that each request is timed once the
	// proxy is done with the one before (it stores the answer after
	// passing it on), as it is in a session, where the harness runs the
	// tools between requests.
	busy := newInFlight()
	labelled := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		busy.add(1)
		seq, _ := strconv.ParseInt(r.Header.Get("X-Bench-Seq"), 10, 64)
		marks.mark(seq, func(m *benchMark) { m.start = time.Now() })
		pprof.Do(r.Context(), pprof.Labels("phase", r.Header.Get("X-Bench-Phase")), func(context.Context) { p.ServeHTTP(w, r) })
		marks.mark(seq, func(m *benchMark) { m.end = time.Now() })
		// Busy until what it stores after answering is stored; the client
		// has its answer already.
		go func() { p.Wait(); busy.add(-1) }()
	})
	srv := &http.Server{Handler: labelled, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close(); p.Wait() }()
	front := "http://" + ln.Addr().String()

	// The floor of any proxy: a bare reverse proxy (net/http/httputil),
	// which passes the request and the answer on, flushing as engram's
	// does, and does nothing else.
	bareLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	target, err := url.Parse(up.URL())
	if err != nil {
		return nil, err
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	rp.Transport = &http.Transport{DisableCompression: true}
	bareSrv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = bareSrv.Serve(bareLn) }()
	defer func() { _ = bareSrv.Close() }()
	bare := "http://" + bareLn.Addr().String()

	// pair sends a request the three ways, each first in turn, each once
	// the proxy is idle.
	pairs := 0
	pair := func(c *proxyCase, body []byte) error {
		bases := []string{up.URL(), bare, front}
		var ts [3]timing
		for j := range 3 {
			k := (pairs + j) % 3
			busy.wait()
			t, err := pb.send(ctx, bases[k], c.phase, body)
			if err != nil {
				return err
			}
			ts[k] = t
		}
		pairs++
		c.direct, c.bare, c.proxy = append(c.direct, ts[0]), append(c.bare, ts[1]), append(c.proxy, ts[2])
		busy.wait()
		m := marks.take(ts[2].seq)
		if m == nil || m.sent.IsZero() || m.eof.IsZero() || m.end.IsZero() {
			return fmt.Errorf("request %d through the proxy: no timings of its handler and upstream (%+v)", ts[2].seq, m)
		}
		c.before = append(c.before, m.sent.Sub(m.start))
		c.own = append(c.own, m.sent.Sub(m.start)+m.end.Sub(m.eof))
		return nil
	}
	// held checks that the proxy took the conversation: its window holds
	// the system prompt and the k messages of the last request.
	held := func(conv *benchConv, k int) error {
		s, err := windows.Status(ctx, store.WindowKey{SessionID: conv.session, AgentID: "claude-code"})
		if err != nil {
			return fmt.Errorf("the proxy kept no window for session %s: %w", conv.session, err)
		}
		if s.Messages+s.Evicted != k+1 {
			return fmt.Errorf("the proxy's window of session %s holds %d messages (%d evicted), want %d: it did not take the requests (see its warnings)",
				conv.session, s.Messages, s.Evicted, k+1)
		}
		return nil
	}
	steady := func(c *proxyCase, n int, progress *progress) error {
		for done := 0; done < n; {
			conv := pb.newConv("steady", fl.messages)
			k := fl.messages - 2*fl.turns
			if _, err := pb.send(ctx, front, "seed", pb.body(conv, k, c.stream)); err != nil {
				return err
			}
			for range fl.turns {
				k += 2
				if err := pair(c, pb.body(conv, k, c.stream)); err != nil {
					return err
				}
				done++
				if progress != nil {
					progress.update(int64(done))
				}
				if done == n {
					break
				}
			}
			if err := held(conv, k); err != nil {
				return err
			}
			pb.forget(conv)
		}
		return nil
	}
	firstSight := func(c *proxyCase, n int, progress *progress) error {
		for i := range n {
			conv := pb.newConv("first", fl.messages)
			if err := pair(c, pb.body(conv, fl.messages, c.stream)); err != nil {
				return err
			}
			if err := held(conv, fl.messages); err != nil {
				return err
			}
			pb.forget(conv)
			if progress != nil {
				progress.update(int64(i + 1))
			}
		}
		return nil
	}

	// Warm up: connections, the tokenizers' tables, the store's first
	// pages. Not timed.
	warm := &proxyCase{phase: "warm"}
	if err := steady(warm, min(2, fl.turns), nil); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	if err := firstSight(warm, 1, nil); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}

	lat := &proxyLatency{}
	for _, stream := range []bool{false, true} {
		form := "non-streamed"
		if stream {
			form = "streamed"
		}
		c := &proxyCase{name: "steady, " + form, phase: "steady", stream: stream}
		progress := newProgress(a.stderr, "steady state, "+form, int64(fl.n))
		if err := steady(c, fl.n, progress); err != nil {
			return nil, fmt.Errorf("steady state, %s: %w", form, err)
		}
		progress.done(fmt.Sprintf("%d pairs", fl.n))
		lat.cases = append(lat.cases, c)
	}
	for _, stream := range []bool{false, true} {
		form := "non-streamed"
		if stream {
			form = "streamed"
		}
		c := &proxyCase{name: "first sight, " + form, phase: "first", stream: stream}
		progress := newProgress(a.stderr, "first sight, "+form, int64(fl.first))
		if err := firstSight(c, fl.first, progress); err != nil {
			return nil, fmt.Errorf("first sight, %s: %w", form, err)
		}
		progress.done(fmt.Sprintf("%d pairs", fl.first))
		lat.cases = append(lat.cases, c)
	}
	busy.wait()
	lat.stats = p.Stats()
	if fl.memProfile != "" {
		if err := writeHeapProfile(fl.memProfile); err != nil {
			return nil, err
		}
	}
	if stats, err := st.Stats(ctx); err == nil {
		lat.store = stats.SizeBytes
	}
	if err := up.Err(); err != nil {
		return nil, fmt.Errorf("the model refused requests: %w", err)
	}
	return lat, nil
}

// benchMark is when a request through the proxy reached its handler,
// left for the model, had the model's answer to its end, and left the
// handler.
type benchMark struct{ start, sent, eof, end time.Time }

// benchMarks are the marks by X-Bench-Seq.
type benchMarks struct {
	mu sync.Mutex
	at map[int64]*benchMark
}

func (b *benchMarks) mark(seq int64, f func(*benchMark)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.at[seq]
	if m == nil {
		m = &benchMark{}
		b.at[seq] = m
	}
	f(m)
}

func (b *benchMarks) take(seq int64) *benchMark {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.at[seq]
	delete(b.at, seq)
	return m
}

// markingTransport is the proxy's way to the model, marking when each
// request leaves and when its answer's body ends.
type markingTransport struct {
	base  http.RoundTripper
	marks *benchMarks
}

func (t *markingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	seq, _ := strconv.ParseInt(r.Header.Get("X-Bench-Seq"), 10, 64)
	t.marks.mark(seq, func(m *benchMark) { m.sent = time.Now() })
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = &eofBody{ReadCloser: resp.Body, eof: func() { t.marks.mark(seq, func(m *benchMark) { m.eof = time.Now() }) }}
	return resp, nil
}

// eofBody calls eof when its reader reaches the end.
type eofBody struct {
	io.ReadCloser
	eof  func()
	seen bool
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.seen {
		b.seen = true
		b.eof()
	}
	return n, err
}

// inFlight counts requests being handled.
type inFlight struct {
	mu   sync.Mutex
	n    int
	idle *sync.Cond
}

func newInFlight() *inFlight {
	f := &inFlight{}
	f.idle = sync.NewCond(&f.mu)
	return f
}

func (f *inFlight) add(d int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n += d
	if f.n == 0 {
		f.idle.Broadcast()
	}
}

// wait returns when no request is being handled.
func (f *inFlight) wait() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.n > 0 {
		f.idle.Wait()
	}
}

// writeHeapProfile writes the heap's live objects, after a collection, to
// path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	return errors.Join(pprof.Lookup("heap").WriteTo(f, 0), f.Close())
}

func (a *app) printProxyLatency(lat *proxyLatency, fl proxyBenchFlags) error {
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "\t\tdirect\t\t\tthrough engram proxy\t\t\tengram's overhead\t\tbare proxy's\t\t")
	fmt.Fprintln(w, "case\tn\tp50\tp95\tp99\tp50\tp95\tp99\tp50\tp95\tp50\tp95\t")
	row := func(name string, c *proxyCase, first bool) {
		d, p := bench.Summarize(totals(c.direct, first)), bench.Summarize(totals(c.proxy, first))
		o, b := bench.Summarize(c.diffs(c.proxy, first)), bench.Summarize(c.diffs(c.bare, first))
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name, len(c.direct),
			ms(d.P50), ms(d.P95), ms(d.P99), ms(p.P50), ms(p.P95), ms(p.P99), ms(o.P50), ms(o.P95), ms(b.P50), ms(b.P95))
	}
	for _, c := range lat.cases {
		row(c.name, c, false)
		if c.stream {
			row(c.name+": first byte", c, true)
		}
	}
	fmt.Fprintln(w, "(milliseconds; overhead: through a proxy minus direct, request by request; bare: httputil.ReverseProxy)")
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(a.stdout)
	w = tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "\t\tengram's own time\t\t\tbefore forwarding\t\t\t")
	fmt.Fprintln(w, "case\tn\tp50\tp95\tp99\tp50\tp95\tp99\t")
	for _, c := range lat.cases {
		o, b := bench.Summarize(c.own), bench.Summarize(c.before)
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", c.name, len(c.own), ms(o.P50), ms(o.P95), ms(o.P99), ms(b.P50), ms(b.P95), ms(b.P99))
	}
	fmt.Fprintln(w, "(milliseconds; engram's own time in its handler, without the model's or the network's: before the request leaves for the model, and after the model's answer ends)")
	if err := w.Flush(); err != nil {
		return err
	}
	s := lat.stats
	fmt.Fprintf(a.stdout, "proxy counters: %d Messages requests, %d answers stored (%d partial), %d laid out, %d sent whole, %d failed open; store %s\n",
		s.Requests["messages"], s.Answers, s.Partial, s.Virtualized, s.Whole, s.FailedOpen, humanBytes(lat.store))
	for _, c := range lat.cases {
		if !strings.HasPrefix(c.name, "steady") {
			continue
		}
		o := bench.Summarize(c.own)
		fmt.Fprintf(a.stdout, "goal: per-turn overhead, excluding upstream time, p95 <= %v, %s: %s ms, %s\n", proxyGoalOverhead, c.name, ms(o.P95), met(o.P95 <= proxyGoalOverhead))
		if c.stream {
			f := bench.Summarize(c.before)
			fmt.Fprintf(a.stdout, "goal: first byte added p95 <= %v, %s: %s ms, %s\n", proxyGoalTTFB, c.name, ms(f.P95), met(f.P95 <= proxyGoalTTFB))
		}
	}
	return nil
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// proxyMemory is the memory phase's result: the proxy process's memory
// at each point.
type proxyMemory struct {
	started, seeded, baseline, peak, ended, settled procMemory
	allOpen                                         bool
	maxOpen                                         int
	streamTime                                      bench.Latencies
}

// procMemory is what /proc/PID/status says of a process's memory, and
// what the runtime's trace said of its last garbage collection.
type procMemory struct {
	rss, anon, hwm int64
	gc             gcTrace
}

// gcTrace is a collection as GODEBUG=gctrace=1 reports it: its number,
// the heap live after it and the next one's goal.
type gcTrace struct {
	n          int
	live, goal int64
}

// gcLine matches the heap figures of a gctrace line, such as "gc 12
// @3.201s 2%: ... 120->125->61 MB, 130 MB goal, ...".
var gcLine = regexp.MustCompile(`^gc (\d+) @.* (\d+)->(\d+)->(\d+) MB, (\d+) MB goal`)

// proxyProcess is the engram proxy the memory phase runs.
type proxyProcess struct {
	pid int
	mu  sync.Mutex
	gc  gcTrace
}

// trace reads the process's standard error until it closes (the process
// has ended), then closes exited: its gctrace lines are kept, its ready
// line dropped and other lines go to w. The runtime writes a trace line
// in pieces that can land in the middle of the program's own, so a line
// read here is no sign of readiness; the listening socket is.
func (pp *proxyProcess) trace(r io.Reader, exited chan<- struct{}, w io.Writer) {
	defer close(exited)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if m := gcLine.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			live, _ := strconv.ParseInt(m[4], 10, 64)
			goal, _ := strconv.ParseInt(m[5], 10, 64)
			pp.mu.Lock()
			pp.gc = gcTrace{n: n, live: live << 20, goal: goal << 20}
			pp.mu.Unlock()
			continue
		}
		if strings.Contains(line, "engram proxy on ") {
			continue
		}
		fmt.Fprintln(w, "engram proxy: "+line)
	}
}

// waitListening waits until addr accepts a connection, the process ends
// (exited closes) or 30 s pass.
func waitListening(ctx context.Context, addr string, exited <-chan struct{}) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("engram proxy did not listen on %s within 30 s: %w", addr, err)
		}
		select {
		case <-exited:
			return errors.New("engram proxy ended before it listened (its output is above)")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// read reads the process's memory now.
func (pp *proxyProcess) read() (procMemory, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pp.pid))
	if err != nil {
		return procMemory{}, err
	}
	var m procMemory
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "VmRSS":
			m.rss = kb << 10
		case "RssAnon":
			m.anon = kb << 10
		case "VmHWM":
			m.hwm = kb << 10
		}
	}
	if m.rss == 0 {
		return m, fmt.Errorf("no VmRSS in /proc/%d/status", pp.pid)
	}
	pp.mu.Lock()
	m.gc = pp.gc
	pp.mu.Unlock()
	return m, nil
}

// benchProxyMemory runs engram proxy as a subprocess and reads its
// memory around --streams concurrent streams.
func (a *app) benchProxyMemory(ctx context.Context, pb *proxyBench, up *modelserver.Server, exe string, fl proxyBenchFlags) (*proxyMemory, error) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		return nil, fmt.Errorf("the memory phase reads /proc (Linux): %w; --streams 0 skips it", err)
	}
	dir, cleanup, err := benchDir("")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	_ = l.Close()
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(pctx, exe, "proxy", "--addr", addr, "--anthropic", up.URL(), "--store", filepath.Join(dir, "proxy.db"),
		"--release-idle", fl.releaseIdle.String())
	pb.token = "bench-proxy-token"
	defer func() { pb.token = "" }()
	// A home of its own: no user config, so the proxy runs with the
	// defaults. The environment is otherwise this one's (GOGC, GOMEMLIMIT
	// apply), with the runtime's trace of each collection added.
	home := filepath.Join(dir, "home")
	godebug := "gctrace=1"
	if g := os.Getenv("GODEBUG"); g != "" {
		godebug = g + "," + godebug
	}
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"XDG_DATA_HOME="+filepath.Join(home, ".local", "share"), "ENGRAM_DATA_DIR="+filepath.Join(dir, "data"),
		"ENGRAM_CONFIG=", "ENGRAM_STORE=", "ENGRAM_TOKEN="+pb.token, "GODEBUG="+godebug)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s proxy: %w", exe, err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	pp := &proxyProcess{pid: cmd.Process.Pid}
	exited := make(chan struct{})
	go pp.trace(stderr, exited, a.stderr)
	if err := waitListening(ctx, addr, exited); err != nil {
		return nil, err
	}
	front := "http://" + addr
	mem := &proxyMemory{}
	if mem.started, err = pp.read(); err != nil {
		return nil, err
	}

	// Seed the sessions, streamed: the proxy takes each whole, and the
	// stream path is warm. The next request of each is the stream below.
	convs := make([]*benchConv, fl.streams)
	defer func() {
		for _, c := range convs {
			if c != nil {
				pb.forget(c)
			}
		}
	}()
	progress := newProgress(a.stderr, "memory: seeding sessions", int64(fl.streams))
	for i := range convs {
		convs[i] = pb.newConv("memory", fl.messages)
		if _, err := pb.send(ctx, front, "seed", pb.body(convs[i], fl.messages-2, true)); err != nil {
			return nil, fmt.Errorf("seed session %d: %w", i, err)
		}
		progress.update(int64(i + 1))
	}
	progress.done(fmt.Sprintf("%d sessions", fl.streams))
	if mem.seeded, err = pp.read(); err != nil {
		return nil, err
	}
	time.Sleep(time.Second)
	if mem.baseline, err = pp.read(); err != nil {
		return nil, err
	}

	// The streams, at once; the memory is read every 20 ms.
	var open atomic.Int32
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if m, err := pp.read(); err == nil && m.rss > mem.peak.rss {
				mem.peak = m
			}
			if o := int(open.Load()); o > mem.maxOpen {
				mem.maxOpen = o
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	var wg sync.WaitGroup
	times := make([]time.Duration, fl.streams)
	errs := make([]error, fl.streams)
	for i, c := range convs {
		c.pace = fl.pace
		body := pb.body(c, fl.messages, true)
		wg.Add(1)
		go func() {
			defer wg.Done()
			open.Add(1)
			defer open.Add(-1)
			t, err := pb.send(ctx, front, "streams", body)
			times[i], errs[i] = t.total, err
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	mem.allOpen = mem.maxOpen == fl.streams
	mem.streamTime = bench.Summarize(times)
	if mem.ended, err = pp.read(); err != nil {
		return nil, err
	}
	select {
	case <-time.After(fl.settle):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if mem.settled, err = pp.read(); err != nil {
		return nil, err
	}
	return mem, nil
}

func (a *app) printProxyMemory(m *proxyMemory, fl proxyBenchFlags) error {
	mib := func(n int64) string { return fmt.Sprintf("%.1f", float64(n)/(1<<20)) }
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "engram proxy	VmRSS	RssAnon	Go heap live after the last GC	GCs	")
	for _, r := range []struct {
		name string
		m    procMemory
	}{
		{"started", m.started},
		{fmt.Sprintf("%d sessions seeded", fl.streams), m.seeded},
		{"baseline, 1 s later", m.baseline},
		{fmt.Sprintf("peak, %d streams open", fl.streams), m.peak},
		{"streams ended", m.ended},
		{fmt.Sprintf("%v later", fl.settle), m.settled},
	} {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t\n", r.name, mib(r.m.rss), mib(r.m.anon), mib(r.m.gc.live), r.m.gc.n)
	}
	fmt.Fprintln(w, "(MiB)")
	if err := w.Flush(); err != nil {
		return err
	}
	per := (m.peak.rss - m.baseline.rss) / int64(fl.streams)
	fmt.Fprintf(a.stdout, "streams: %d, at most %d open at once (all: %t), each %s ms to its end (p50; p95 %s); high-water mark %s MiB\n",
		fl.streams, m.maxOpen, m.allOpen, ms(m.streamTime.P50), ms(m.streamTime.P95), mib(m.settled.hwm))
	fmt.Fprintf(a.stdout, "goal: RSS per concurrent stream <= 1 MiB: (peak - baseline) / %d = %.2f MiB, %s\n",
		fl.streams, float64(per)/(1<<20), met(per <= proxyGoalStream))
	fmt.Fprintf(a.stdout, "after the streams: %+.1f MiB over the baseline at their end, %+.1f MiB %v later\n",
		float64(m.ended.rss-m.baseline.rss)/(1<<20), float64(m.settled.rss-m.baseline.rss)/(1<<20), fl.settle)
	return nil
}
