package proxy

import (
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Stats are the proxy's counters since it started, as /metrics reports
// them.
type Stats struct {
	// Requests counts the requests the proxy forwarded, by route:
	// "messages", "count_tokens", "chat", "responses", "other".
	Requests map[string]int64
	// Virtualized counts requests sent upstream with the window's layout
	// (markers in place of evicted runs); Whole, those sent as they came
	// because the window showed everything.
	Virtualized, Whole int64
	// FailedOpen counts requests engram could not read, store or lay out,
	// forwarded unchanged.
	FailedOpen int64
	// Edits counts histories the harness changed in place that the window
	// followed; Restarts, those it changed beyond following (another
	// conversation under the same session), which start the window's
	// mapping anew.
	Edits, Restarts int64
	// Refused counts requests answered by engram itself, by reason:
	// "origin", "host", "token", "too_large", "unreadable".
	Refused map[string]int64
	// Upstream counts upstream answers by class ("2xx", "4xx", "5xx"), and
	// "unreachable" and "timeout" when none came.
	Upstream map[string]int64
	// Answers counts the assistant messages stored; Partial, those that
	// ended early (the client left, the upstream broke off, or the answer
	// did not reach its end: an error event, a failed or incomplete
	// response, no end event).
	Answers, Partial int64
}

// The routes, refusals and upstream classes Stats reports.
var (
	statRoutes   = []string{"messages", "count_tokens", "chat", "responses", "other"}
	statRefusals = []string{"origin", "host", "token", "too_large", "unreadable"}
	statUpstream = []string{"2xx", "3xx", "4xx", "5xx", "unreachable", "timeout"}
)

// counters are Stats as they are counted.
type counters struct {
	requests, refused, upstream map[string]*atomic.Int64

	virtualized, whole, failedOpen, edits, restarts, answers, partial atomic.Int64
}

func newCounters() *counters {
	c := &counters{requests: map[string]*atomic.Int64{}, refused: map[string]*atomic.Int64{}, upstream: map[string]*atomic.Int64{}}
	for _, m := range []struct {
		to   map[string]*atomic.Int64
		keys []string
	}{{c.requests, statRoutes}, {c.refused, statRefusals}, {c.upstream, statUpstream}} {
		for _, k := range m.keys {
			m.to[k] = new(atomic.Int64)
		}
	}
	return c
}

// add counts one under key of m, a key Stats reports.
func add(m map[string]*atomic.Int64, key string) {
	if c := m[key]; c != nil {
		c.Add(1)
	}
}

func snapshot(m map[string]*atomic.Int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, c := range m {
		out[k] = c.Load()
	}
	return out
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	c := p.count
	return Stats{Requests: snapshot(c.requests), Refused: snapshot(c.refused), Upstream: snapshot(c.upstream),
		Virtualized: c.virtualized.Load(), Whole: c.whole.Load(), FailedOpen: c.failedOpen.Load(),
		Edits: c.edits.Load(), Restarts: c.restarts.Load(), Answers: c.answers.Load(), Partial: c.partial.Load()}
}

// upstreamClass is the Stats class of an upstream status code.
func upstreamClass(code int) string {
	switch {
	case code >= 500:
		return "5xx"
	case code >= 400:
		return "4xx"
	case code >= 300:
		return "3xx"
	}
	return "2xx"
}

// idleRelease returns the process's free memory to the operating system
// once the proxy has been idle for a while (Options.ReleaseIdle): a burst
// of concurrent streams grows the heap, and Go's runtime keeps what it
// freed for reuse, above the heap's goal only, so the resident set would
// stay at the burst's peak.
//
// It counts what is in flight, handlers and the stores they leave behind,
// for Wait too.
type idleRelease struct {
	mu       sync.Mutex
	n        int
	idle     *sync.Cond // signalled when n drops to 0
	timer    *time.Timer
	released int64 // how many times, for tests
}

// wait returns once nothing is in flight.
func (b *idleRelease) wait() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.n > 0 {
		if b.idle == nil {
			b.idle = sync.NewCond(&b.mu)
		}
		b.idle.Wait()
	}
}

func (b *idleRelease) enter() {
	b.mu.Lock()
	b.n++
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	b.mu.Unlock()
}

func (b *idleRelease) leave(after time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n--
	if b.n > 0 {
		return
	}
	if b.idle != nil {
		b.idle.Broadcast()
	}
	if after < 0 {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(after, func() {
		b.mu.Lock()
		if b.n > 0 || b.timer != t {
			b.mu.Unlock()
			return // busy again
		}
		b.timer = nil
		b.released++
		b.mu.Unlock()
		debug.FreeOSMemory()
	})
	b.timer = t
}
