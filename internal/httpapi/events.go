package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
)

// The event stream, GET /v1/events/stream: server-sent events that tell a
// page what changed, so that it re-reads it through the JSON API instead
// of polling everything. One hub per handler polls the store while any
// stream is open, and fans what changed out to every stream: the store is
// the only truth (several servers may share it, and nothing caches its
// state), so a change made through another server shows up as well.
//
// Events (each data line is JSON):
//
//	hello    {"server","version","poll_ms"}: sent first on every connection;
//	         server names the process, so a page sees a restart and re-reads
//	         everything
//	windows  {"windows":[{"session","agent","version"}],"removed":[...]}:
//	         windows opened, changed (appends, evictions, readmits, settings)
//	         or gone since the last poll
//	archive  {"events":[...],"more":bool}: the archivalist's new events, as
//	         GET /v1/events gives them (more: there were more than these)
//	index    {"chunks","embedded"}: the index's or embeddings' size changed
//
// and a comment every 15 s, so that proxies keep the connection.

// streamRoute is the event stream's route.
const streamRoute = "GET /v1/events/stream"

// Event stream defaults.
const (
	// DefaultEventPoll is how often the hub reads the store.
	DefaultEventPoll = time.Second
	// maxStreams bounds the event streams open at once, and
	// maxStreamsEach those of one credential (an agent's key, a
	// browser's sign-in, the token), so that one cannot take them all;
	// agents' keys together hold at most maxStreams-maxStreamsEach.
	maxStreams     = 64
	maxStreamsEach = 16
	// maxStreamLife is the longest a stream stays open: the page
	// reconnects, its credential checked again then (as at every
	// heartbeat).
	maxStreamLife = 30 * time.Minute
	// indexEvery: the index's counts are read every this many polls (they
	// count rows, where windows and events read an index's head).
	indexEvery = 5
	// heartbeat is the comment interval.
	heartbeat = 15 * time.Second
	// writeWait bounds each write of an event to a stream.
	writeWait = 10 * time.Second
	// streamBuffer is how many events a slow stream may lag behind
	// before it is closed (the browser reconnects and re-reads).
	streamBuffer = 64
)

// streamEvent is one server-sent event.
type streamEvent struct {
	name string
	data []byte
}

// windowVersion names a window and its version.
type windowVersion struct {
	Session string `json:"session"`
	Agent   string `json:"agent"`
	Version int64  `json:"version"`
}

// hub polls the store for what the page shows and fans changes out.
type hub struct {
	eng     *engine.Engine
	log     *slog.Logger
	poll    time.Duration
	version string
	server  string

	// valid reports whether a stream's credential still holds (a sign-out
	// or an agent's new key ends its streams); done, closed when the
	// server shuts down, ends them all.
	valid func(*http.Request) bool
	done  <-chan struct{}

	mu      sync.Mutex
	subs    map[chan streamEvent]struct{}
	each    map[string]int // streams open per credential
	agents  int            // streams open with agents' keys
	running bool
}

func newHub(eng *engine.Engine, poll time.Duration, version string, log *slog.Logger, valid func(*http.Request) bool, done <-chan struct{}) *hub {
	if poll <= 0 {
		poll = DefaultEventPoll
	}
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	return &hub{eng: eng, log: log, poll: poll, version: version, server: hex.EncodeToString(id), valid: valid, done: done,
		subs: map[chan streamEvent]struct{}{}, each: map[string]int{}}
}

// subscribe adds a stream of credential who; why is set when it may not:
// maxStreams are open, or maxStreamsEach of who's. The poller runs while
// there is a stream.
func (h *hub) subscribe(who string) (ch chan streamEvent, cancel func(), why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.subs) >= maxStreams {
		return nil, nil, fmt.Sprintf("%d event streams are open, the most this server keeps", maxStreams)
	}
	if h.each[who] >= maxStreamsEach {
		return nil, nil, fmt.Sprintf("%d event streams are open with this credential, the most one keeps: close one", maxStreamsEach)
	}
	agent := strings.HasPrefix(who, "agent:")
	if agent && h.agents >= maxStreams-maxStreamsEach {
		// Agents' keys together leave room for the dashboards.
		return nil, nil, fmt.Sprintf("%d event streams are open with agents' keys, the most they keep together", h.agents)
	}
	ch = make(chan streamEvent, streamBuffer)
	h.subs[ch] = struct{}{}
	h.each[who]++
	if agent {
		h.agents++
	}
	if !h.running {
		// The baseline is read before the stream's hello, which a page
		// answers by reading everything: a change after it is an event.
		p := &poller{}
		if err := p.init(context.Background(), h.eng); err != nil {
			h.log.Warn("event stream: first read of the store", "err", err)
		}
		h.running = true
		go h.run(p)
	}
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.subs[ch]; ok {
			delete(h.subs, ch)
			close(ch)
		}
		if h.each[who]--; h.each[who] <= 0 {
			delete(h.each, who)
		}
		if agent {
			h.agents--
		}
	}, ""
}

// broadcast sends ev to every stream; a stream too far behind is closed.
func (h *hub) broadcast(ev streamEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- ev:
		default:
			delete(h.subs, ch)
			close(ch)
		}
	}
}

// run polls until the last stream is gone.
func (h *hub) run(p *poller) {
	ctx := context.Background()
	t := time.NewTicker(h.poll)
	defer t.Stop()
	for n := 1; ; n++ {
		<-t.C
		h.mu.Lock()
		if len(h.subs) == 0 {
			h.running = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		evs, err := p.changes(ctx, h.eng, n%indexEvery == 0)
		if err != nil {
			h.log.Warn("event stream: read the store", "err", err)
			continue
		}
		for _, ev := range evs {
			h.broadcast(ev)
		}
	}
}

// poller remembers what the last poll saw.
type poller struct {
	windows  map[store.WindowKey]int64
	seq      int64
	chunks   int64
	embedded int64
}

func (p *poller) init(ctx context.Context, eng *engine.Engine) error {
	p.windows = map[store.WindowKey]int64{}
	ws, err := eng.Store().Windows(ctx, "")
	if err != nil {
		return err
	}
	for _, w := range ws {
		p.windows[w.WindowKey] = w.Version
	}
	last, err := eng.Store().ArchiveEvents(ctx, -1, 1)
	if err != nil {
		return err
	}
	if len(last) > 0 {
		p.seq = last[0].Seq
	}
	p.chunks, p.embedded, err = indexCounts(ctx, eng)
	return err
}

func indexCounts(ctx context.Context, eng *engine.Engine) (chunks, embedded int64, err error) {
	s, err := eng.EmbedStatus(ctx)
	return s.Chunks, s.Embedded, err
}

// changes returns the events of what changed since the last poll.
func (p *poller) changes(ctx context.Context, eng *engine.Engine, index bool) ([]streamEvent, error) {
	var out []streamEvent
	ws, err := eng.Store().Windows(ctx, "")
	if err != nil {
		return nil, err
	}
	changed := []windowVersion{}
	seen := make(map[store.WindowKey]bool, len(ws))
	for _, w := range ws {
		seen[w.WindowKey] = true
		if v, ok := p.windows[w.WindowKey]; !ok || v != w.Version {
			changed = append(changed, windowVersion{Session: w.SessionID, Agent: w.AgentID, Version: w.Version})
			p.windows[w.WindowKey] = w.Version
		}
	}
	removed := []windowVersion{}
	for k := range p.windows {
		if !seen[k] {
			removed = append(removed, windowVersion{Session: k.SessionID, Agent: k.AgentID})
			delete(p.windows, k)
		}
	}
	if len(changed)+len(removed) > 0 {
		out = append(out, event("windows", map[string]any{"windows": changed, "removed": removed}))
	}
	const batch = 100
	evs, err := eng.Store().ArchiveEvents(ctx, p.seq, batch+1)
	if err != nil {
		return nil, err
	}
	if len(evs) > 0 {
		more := len(evs) > batch
		if more {
			evs = evs[:batch]
		}
		p.seq = evs[len(evs)-1].Seq
		out = append(out, event("archive", map[string]any{"events": evs, "more": more}))
	}
	if index {
		chunks, embedded, err := indexCounts(ctx, eng)
		if err != nil {
			return nil, err
		}
		if chunks != p.chunks || embedded != p.embedded {
			p.chunks, p.embedded = chunks, embedded
			out = append(out, event("index", map[string]int64{"chunks": chunks, "embedded": embedded}))
		}
	}
	return out, nil
}

func event(name string, v any) streamEvent {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // maps of plain values
	}
	return streamEvent{name: name, data: b}
}

// stream serves GET /v1/events/stream.
func (h *hub) stream(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	who := "operator"
	if p, ok := principalOf(r.Context()); ok {
		who = p.streamer()
	}
	ch, cancel, why := h.subscribe(who)
	if why != "" {
		w.Header().Set("Retry-After", "10")
		writeError(w, http.StatusServiceUnavailable, "overloaded", why)
		return
	}
	defer cancel()
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return // the stream is there; a HEAD reads no body
	}
	hello := event("hello", map[string]any{"server": h.server, "version": h.version, "poll_ms": h.poll.Milliseconds()})
	if writeEvent(w, rc, streamEvent{name: "retry"}) != nil || writeEvent(w, rc, hello) != nil {
		return
	}
	beat := time.NewTicker(heartbeat)
	defer beat.Stop()
	life := time.NewTimer(maxStreamLife)
	defer life.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-h.done:
			return // the server is shutting down
		case <-life.C:
			return // the page reconnects, its credential checked anew
		case ev, open := <-ch:
			if !open {
				return // too far behind: the browser reconnects and re-reads
			}
			if h.valid != nil && !h.valid(r) {
				return
			}
			if writeEvent(w, rc, ev) != nil {
				return
			}
		case <-beat.C:
			if h.valid != nil && !h.valid(r) {
				return // signed out, expired, or a key replaced: the reconnection gets the 401
			}
			if writeEvent(w, rc, streamEvent{name: "ping"}) != nil {
				return
			}
		}
	}
}

// writeEvent writes one event and flushes it; the "retry" pseudo-event
// tells the browser to reconnect after 2 s.
func writeEvent(w http.ResponseWriter, rc *http.ResponseController, ev streamEvent) error {
	// A client that stops reading would hold its connection (and this
	// handler) for good, no longer counted by the hub once dropped.
	if err := rc.SetWriteDeadline(time.Now().Add(writeWait)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	var err error
	switch ev.name {
	case "retry":
		_, err = fmt.Fprint(w, "retry: 2000\n\n")
	case "ping":
		_, err = fmt.Fprint(w, ": ping\n\n")
	default:
		_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.name, ev.data)
	}
	if err != nil {
		return err
	}
	return rc.Flush()
}
