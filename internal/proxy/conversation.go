package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// maxWindows bounds the windows the proxy keeps in memory; past it, the
// one used least recently is dropped (and read back from the store if its
// conversation comes back).
var maxWindows = 4096

// maxRestarts bounds the windows one session's conversations map to
// (agent, agent-2, agent-3, ...), so that a harness that starts over on
// every request cannot make the proxy open windows without end.
const maxRestarts = 64

// manyRestarts is when a session's restarts are worth a warning.
const manyRestarts = 8

// resizeTokens is how much the tool schemas may grow or shrink before the
// window is sized anew.
const resizeTokens = 1000

// exchange is a request the proxy took: its window, and the body to send
// upstream when the window rewrote it (nil: the request as it came).
type exchange struct {
	key  store.WindowKey
	body []byte
	// later, when set, appends the turn's messages once the request is on
	// its way; it holds the conversation's lock until it is done.
	later func(context.Context)
}

// winState is what the proxy keeps of a session's conversations with one
// agent: the windows they map to (the agent's, then agent-2, agent-3, ...
// for each time the harness started over: a /compact, a rewind, a side
// request of its own), and a lock that keeps the requests in order.
type winState struct {
	mu     sync.Mutex
	wins   []*held
	loaded bool // the windows the store holds are in wins
	used   time.Time
	// known notes each message by a hash of its bytes as sent (128 bits
	// of two seeded maphashes: fast, and kept in this process only).
	known map[[2]uint64]msgInfo
	// renamed is set once the user was told that a header's name was
	// stored under its digest.
	renamed bool
}

// knownSeeds seed the hashes that know a message by its bytes.
var knownSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

// maxMessages bounds the messages of a request a window takes at once:
// laying out a history it has not seen grows faster than its length
// (measured by a probe: 0.7 s for 5,000 messages, 5 s for 20,000, over
// 47 s for 100,000), and no harness's first request holds that many. A request with more new messages is forwarded
// as it came (fail open); a history the window holds grows past it.
const maxMessages = 10_000

// maxKnown bounds the messages a conversation's state remembers by their
// bytes.
const maxKnown = 1 << 16

// msgInfo is what the proxy knows of a message: its hash and form (see
// MessageHash, formOf), its role, and the tool calls it makes and answers.
type msgInfo struct {
	hash, form     string
	role           window.Role
	calls, results []string
	// leads is a message that must go with the one after it (see
	// window.Message.LeadsNext).
	leads bool
}

// learn fills c.info: of a message whose bytes the conversation sent
// before, from what the proxy noted then; of another, by decoding it.
// The harness resends its whole history every turn, so only the new tail
// is decoded, and a turn costs the same however long the history.
func (st *winState) learn(c *conversation, redact bool) error {
	if st.known == nil || len(st.known) > maxKnown {
		st.known = map[[2]uint64]msgInfo{}
	}
	c.info = make([]msgInfo, len(c.raws))
	for i, raw := range c.raws {
		sum := [2]uint64{maphash.Bytes(knownSeeds[0], raw), maphash.Bytes(knownSeeds[1], raw)}
		if in, ok := st.known[sum]; ok {
			c.info[i] = in
			continue
		}
		m, err := c.decode(i)
		if err != nil {
			return err
		}
		// Named as the window stores it, secrets redacted, so that the
		// history read back after a restart names the same messages.
		named := *m
		if redact {
			named = m.Redacted()
		}
		h := messageHash(named)
		in := msgInfo{hash: h, form: formOf(m), role: m.Role, calls: m.Calls(), results: m.Results(), leads: m.LeadsNext()}
		st.known[sum], c.info[i] = in, in
	}
	return nil
}

// held is what the proxy knows of a window: the hash and the form of each
// message it holds, in order.
type held struct {
	key store.WindowKey
	// hashes name each held message; forms are their roles and tool ids,
	// which an edit in place keeps.
	hashes, forms []string
	// tools is the tool schemas' tokens the window was sized for; -1
	// before it was; toolsSum the hash of the schemas last counted.
	tools    int
	toolsSum [32]byte
	// model is the model it was sized for: a switch keeps the window,
	// sized anew.
	model string
	// instructions is the hash of the system prompt a stateful request
	// (Responses' instructions beside previous_response_id) last stored
	// in the window; "" when none.
	instructions string
	// version is the window's version (store.Window) that hashes are
	// of; 0 when the proxy does not know it.
	version int64
	// toldSmall: the user was told that the window is too small for its
	// harness's system prompt (virtualize). Kept here, it goes with the
	// window when the proxy drops it from memory (maxWindows): kept
	// apart, for every window ever told, it grew without end.
	toldSmall bool
}

// wrote notes an append the window took: w holds the messages it held
// and those appended (hashes and forms are set), as of the window's
// version after it when they are all the window holds. Otherwise (an
// append made before, at its first try or by another server; a message
// another writer appended meanwhile) the window is read again at the
// next request.
func (w *held) wrote(res window.AppendResult) {
	w.version = 0
	if st := res.Status; !res.Replayed && st.Messages+st.Evicted == len(w.hashes) {
		w.version = st.Version
	}
}

// take maps a request to its window, appends the messages the window
// does not hold yet, and lays the request out with the window's context.
// count_tokens takes without storing (store false): laid out as the
// window it follows would send it, or as it came.
func (p *Proxy) take(ctx context.Context, proto protocol, h http.Header, body []byte, store bool) (*exchange, error) {
	c, err := proto.read(body, h)
	if err != nil {
		return nil, err
	}
	base := keyOf(h, c)
	if err := base.Validate(); err != nil {
		return nil, err
	}
	st := p.state(base)
	st.mu.Lock()
	handed := false // the lock goes with the exchange's later
	defer func() {
		if !handed {
			st.mu.Unlock()
		}
	}()
	if !st.renamed {
		st.renamed = p.sayRenamed(h, base)
	}
	if err := st.learn(c, !p.eng.KeepsSecrets()); err != nil {
		return nil, err
	}
	hashes := make([]string, len(c.info))
	forms := make([]string, len(c.info))
	for i, in := range c.info {
		hashes[i], forms[i] = in.hash, in.form
	}
	late, err := p.current(ctx, st, base, c, hashes, forms)
	if err != nil {
		return nil, err
	}
	if late != nil {
		// Another server stored this request already, and more: a copy
		// of it that came late (a load balancer's retry). Nothing to
		// append; it goes as the window lays it out.
		return p.layout(ctx, proto, late, body, c), nil
	}
	if !store {
		if w := followed(st.wins, c, hashes, forms); w != nil && len(w.hashes) > 0 {
			return p.layout(ctx, proto, w, body, c), nil
		}
		return nil, nil // a conversation engram does not hold: counted as it came
	}
	// The body was split, not decoded: it is validated before anything of
	// it is stored; after the request has left when the window has room
	// (below), before any write otherwise.
	valid := false
	validate := func() error {
		if !valid {
			if !json.Valid(body) {
				return errors.New("the request's body is not valid JSON")
			}
			valid = true
		}
		return nil
	}
	c.toolsSum = sha256.Sum256(c.tools)
	if w := followed(st.wins, c, hashes, forms); w == nil || w.tools < 0 || w.model != c.model || c.toolsSum != w.toolsSum {
		if err := validate(); err != nil { // find and size write
			return nil, err
		}
	}
	w, err := p.find(ctx, st, base, c, hashes, forms)
	if err != nil {
		return nil, err
	}
	unseen := len(c.raws) // a stateful request lists only what is new
	if !c.stateful {
		unseen -= len(w.hashes)
	}
	if unseen > maxMessages {
		return nil, fmt.Errorf("%d messages the window has not seen, more than the proxy takes at once (%d)", unseen, maxMessages)
	}
	if err := p.size(ctx, w, c); err != nil {
		return nil, err
	}
	if c.stateful {
		// The server holds the history: what the request lists is new. The
		// instructions come with every request, and are stored when they
		// are new or changed, as the stateless path keeps the system
		// prompt it holds.
		if err := validate(); err != nil {
			return nil, err
		}
		from := 0
		if c.off > 0 && w.instructions == hashes[0] {
			from = c.off
		}
		msgs, err := c.decodeFrom(from)
		if err != nil {
			return nil, err
		}
		if len(msgs) > 0 {
			if err := p.add(ctx, st, w, c, from, hashes, forms); err != nil {
				return nil, err
			}
		}
		if c.off > 0 {
			w.instructions = hashes[0]
		}
		return &exchange{key: w.key}, nil
	}
	k := 0
	for k < len(w.hashes) && w.hashes[k] == hashes[k] {
		k++
	}
	// edit takes the harness's changes to messages it sent before, in
	// place (Claude Code clears old tool results): the window keeps what
	// it stored, the edit goes upstream as the harness sent it, and the
	// proxy knows the messages by the harness's bytes (add).
	n := len(w.hashes)
	edit := func() {
		if k < n {
			p.count.edits.Add(1)
			p.log.Info("following the harness's edit of its history", "session", w.key.SessionID, "from", k, "held", n)
		}
	}
	if n < len(c.raws) {
		msgs, err := c.decodeFrom(n)
		if err != nil {
			return nil, err
		}
		if p.room(ctx, w.key, msgs) {
			// Nothing will be evicted: the window's layout is what it is,
			// with the new messages as they came, so the request goes now
			// and the append follows, holding the lock until it is done.
			ex := p.layout(ctx, proto, w, body, c)
			handed = true
			ex.later = func(ctx context.Context) {
				defer st.mu.Unlock()
				err := validate()
				if err == nil {
					err = p.add(ctx, st, w, c, n, hashes, forms)
				}
				if err != nil {
					st.forget()
					p.count.failedOpen.Add(1)
					p.log.Warn("cannot store the turn's messages", "session", w.key.SessionID, "err", err)
					return
				}
				edit()
			}
			return ex, nil
		}
	}
	if err := validate(); err != nil {
		return nil, err
	}
	edit()
	if n < len(c.raws) {
		if err := p.add(ctx, st, w, c, n, hashes, forms); err != nil {
			return nil, err
		}
	} else {
		copy(w.hashes, hashes)
	}
	return p.layout(ctx, proto, w, body, c), nil
}

// maxConflicts bounds how many times add reads a window again because
// another server appended at the place it was appending to.
const maxConflicts = 8

// add appends to window w the messages of a request from place from of
// its list on: of a request that continues w, at the same place of the
// window; of a stateful one, after what w holds. The append's key is
// that place in the conversation (appendKey), so that another server
// appending there meanwhile (a load balancer sent it the same request,
// or the next one before this one's append was in) makes this append a
// replay, written once, or a conflict: then add reads the window again
// and appends what it still lacks, nothing when it holds the request
// already. After an error, what the proxy holds of the session's windows
// is dropped. st.mu is held.
func (p *Proxy) add(ctx context.Context, st *winState, w *held, c *conversation, from int, hashes, forms []string) error {
	// retaken is the window's version when the key of this place was
	// found to be an append the window no longer holds.
	retaken := int64(-1)
	for attempt := 0; ; attempt++ {
		place := from
		if c.stateful {
			place = len(w.hashes)
		}
		msgs, err := c.decodeFrom(from)
		if err != nil {
			st.forget()
			return err
		}
		key := appendKey(place)
		if retaken >= 0 {
			key += "-v" + strconv.FormatInt(retaken, 10)
		}
		res, err := p.windows.AppendOnce(ctx, w.key, key, msgs)
		if err == nil {
			if c.stateful {
				w.hashes, w.forms = append(w.hashes, hashes[from:]...), append(w.forms, forms[from:]...)
			} else {
				w.hashes, w.forms = slices.Clone(hashes), slices.Clone(forms)
			}
			w.wrote(res)
			return nil
		}
		var conflict *store.ConflictError
		if !errors.As(err, &conflict) {
			st.forget()
			return err
		}
		if attempt == maxConflicts {
			st.forget()
			return fmt.Errorf("other servers kept appending to window %s meanwhile (%d tries); the next request appends what it lacks: %w",
				w.key, attempt+1, err)
		}
		// Another server appended at this place: what does the window
		// hold now?
		if err := p.reload(ctx, w); err != nil {
			st.forget()
			return err
		}
		switch {
		case c.stateful && w.holds(c, hashes[from:], forms[from:]), !c.stateful && w.holds(c, hashes, forms):
			p.log.Debug("another server appended the request's messages", "session", w.key.SessionID, "window", w.key.AgentID)
			return nil
		case c.stateful:
		case w.follows(hashes, forms):
			from = len(w.hashes)
		default:
			st.forget()
			return fmt.Errorf("another server appended other messages to window %s at place %d: %w", w.key, place, err)
		}
		if !conflict.Busy && len(w.hashes) <= place {
			// The window holds nothing from this place on, yet an append
			// took its key: its messages were forgotten since (engram
			// forget). The place is free again under a key of the
			// window's version, which another server appending there
			// meanwhile reads too.
			retaken = w.version
		}
	}
}

// holds reports whether window w holds a request's messages already
// (hashes and forms name them; of a stateful request, its new ones), as
// another server stored them: it lists at least as many, the request's
// in the same forms and with the same prompts (a stateful request's as
// its last, the same).
func (w *held) holds(c *conversation, hashes, forms []string) bool {
	if c.stateful {
		return len(w.hashes) >= len(hashes) && slices.Equal(w.hashes[len(w.hashes)-len(hashes):], hashes)
	}
	return (&held{hashes: hashes, forms: forms}).follows(w.hashes, w.forms)
}

// current makes what the proxy holds of the session's windows what the
// store holds: another server over the same store (several engram
// proxies behind a load balancer) may have appended to the window the
// request continues, or opened the window of a conversation that started
// over. The window's version (one row read) says so, and the window is
// read again, so that the proxy appends what the window lacks now, not
// what it lacked when this proxy last wrote, and lays the request out
// from where the messages are. It returns the window when it holds the
// request and more, as another server stored them: a copy of the request
// that came late (a stateful request, which lists only what is new, is
// never taken for one). st.mu is held.
func (p *Proxy) current(ctx context.Context, st *winState, base store.WindowKey, c *conversation, hashes, forms []string) (*held, error) {
	if !st.loaded {
		return nil, nil // find reads them
	}
	w := followed(st.wins, c, hashes, forms)
	key := base
	if w != nil {
		key = w.key
	} else if n := len(st.wins); n > 0 {
		key.AgentID = window.NextAgent(st.wins[n-1].key.AgentID)
	}
	head, err := p.eng.Store().Window(ctx, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		if w != nil {
			st.forget() // forgotten (engram forget): find opens it again
		}
		return nil, nil
	case err != nil:
		return nil, err
	case w == nil:
		// Another server gave the conversation its window: find reads
		// the session's windows again.
		st.forget()
		return nil, nil
	case head.Version != w.version:
		if err := p.reload(ctx, w); err != nil {
			return nil, err
		}
		// Only what another server stored is taken for a copy come
		// late: a harness that sends what this proxy stored again (a
		// rewind, a prompt asked again) starts a conversation over.
		if !c.stateful && len(w.hashes) > len(hashes) && w.holds(c, hashes, forms) {
			return w, nil
		}
	}
	return nil, nil
}

// reload reads the messages window w holds from the store.
func (p *Proxy) reload(ctx context.Context, w *held) error {
	status, msgs, _, err := p.windows.Messages(ctx, w.key)
	if err != nil {
		return err
	}
	w.hashes, w.forms, w.instructions = make([]string, len(msgs)), make([]string, len(msgs)), ""
	for i := range msgs {
		w.forms[i] = formOf(&msgs[i])
		w.hashes[i] = messageHash(msgs[i])
		if instructions(&msgs[i]) {
			w.instructions = w.hashes[i]
		}
	}
	w.version = status.Version
	return nil
}

// forget drops what the proxy holds of the session's windows after an
// append failed: the store may have taken it all the same (a commit whose
// answer was lost), and the next request reads the windows again from
// their ledgers rather than append what they hold. st.mu is held.
func (st *winState) forget() {
	st.wins, st.loaded = nil, false
}

// appendKey is the key of an append at place n of a conversation's
// window: the place only, the same for every server. A write whose
// answer was lost (the store committed, the connection dropped) leaves
// the proxy's record of the window behind, and the same request again
// appends the same messages at the same place, which the window then
// takes once (window.Manager.AppendOnce); so does the same request sent
// to two servers at once. Other messages at a place another append took
// (two servers each appending the turn it was sent: one of them was
// behind) are a *store.ConflictError, and nothing is written twice. (An
// append whose messages were forgotten since keeps its key for
// store.AppendKeyTTL: add then appends at its place under a key of the
// window's version.)
func appendKey(n int) string {
	return "proxy-at-" + strconv.Itoa(n)
}

// room reports whether the request can go before the window takes its
// new messages: with them as they came, the window's layout stays within
// its budget (their tokens counted as the window counts them, a little
// over: JSON's escapes in raw blocks), and they take under a quarter of
// it (over it, a window may clip its newest unit). The window may evict
// when it takes them, past its threshold: the next request has the new
// layout.
func (p *Proxy) room(ctx context.Context, key store.WindowKey, msgs []window.Message) bool {
	st, err := p.windows.Status(ctx, key)
	if err != nil {
		return false
	}
	enc, err := tokens.Get(st.Settings.Encoding)
	if err != nil {
		return false
	}
	n := 0
	for i := range msgs {
		n += 8
		for _, b := range msgs[i].Blocks {
			n += enc.Count(b.Name)
			switch {
			case len(b.Raw) > 0:
				n += window.RawTokens(b.Raw, enc.Count)
			case b.Type == window.BlockToolUse:
				n += enc.Count(string(b.Input))
			default:
				n += enc.Count(b.Text)
			}
		}
	}
	return st.Used+n <= st.Budget && n < st.Budget/4
}

// layout is the exchange with the request laid out as window w's
// context; its body nil when the window shows everything or engram could
// not lay it out. The caller holds the lock of w's state.
func (p *Proxy) layout(ctx context.Context, proto protocol, w *held, body []byte, c *conversation) *exchange {
	key := w.key
	ex := &exchange{key: key}
	virtual, err := p.virtualize(ctx, proto, w, body, c)
	if err != nil {
		p.count.failedOpen.Add(1)
		p.log.Warn("sending the request whole: engram could not lay it out", "session", key.SessionID, "err", err)
		return ex
	}
	ex.body = virtual
	return ex
}

// keyOf is a request's window: the session of X-Engram-Session, else the
// session the request names (Claude Code's metadata or its
// X-Claude-Code-Session-Id header, Codex's cache key),
// else a hash of the conversation's start, which every later request of it
// repeats; the agent of X-Engram-Agent, else the harness the request
// comes from, else "proxy". A session or agent named so that is no valid
// ID (over store.MaxIdentifierBytes, not UTF-8, a control character) is
// named by its digest: the same name always finds the same window.
func keyOf(h http.Header, c *conversation) store.WindowKey {
	k := store.WindowKey{SessionID: h.Get("X-Engram-Session"), AgentID: h.Get("X-Engram-Agent")}
	if k.SessionID == "" {
		k.SessionID = c.session
	}
	if k.SessionID != "" && (store.WindowKey{SessionID: k.SessionID, AgentID: "x"}).Validate() != nil {
		k.SessionID = digest(k.SessionID)
	}
	if k.AgentID != "" && (store.WindowKey{SessionID: "x", AgentID: k.AgentID}).Validate() != nil {
		k.AgentID = digest(k.AgentID)
	}
	if k.SessionID == "" {
		sum := sha256.New()
		for _, raw := range c.raws[:min(2, len(c.raws))] {
			var b bytes.Buffer
			if json.Compact(&b, raw) == nil {
				sum.Write(b.Bytes())
			} else {
				sum.Write(raw)
			}
			sum.Write([]byte{0})
		}
		k.SessionID = "conv-" + hex.EncodeToString(sum.Sum(nil)[:8])
	}
	if k.AgentID == "" {
		k.AgentID = c.agent
	}
	if k.AgentID == "" {
		k.AgentID = "proxy"
	}
	return k
}

// sayRenamed warns when the session or agent a header names is no valid
// ID and the conversation is stored under its digest (see keyOf), so that
// it can be found; it reports whether it did.
func (p *Proxy) sayRenamed(h http.Header, key store.WindowKey) bool {
	said := false
	for _, hd := range []struct{ header, id string }{{"X-Engram-Session", key.SessionID}, {"X-Engram-Agent", key.AgentID}} {
		if v := h.Get(hd.header); v != "" && v != hd.id {
			said = true
			p.log.Warn("a header names no valid ID (UTF-8 without control characters, at most max_bytes): stored under its digest",
				"header", hd.header, "bytes", len(v), "max_bytes", store.MaxIdentifierBytes, "as", hd.id)
		}
	}
	return said
}

// digest names a session or agent that is no valid ID.
func digest(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "conv-" + hex.EncodeToString(sum[:8])
}

// state is the conversation's state, made on first sight; the proxy keeps
// the maxWindows used last.
func (p *Proxy) state(base store.WindowKey) *winState {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.states[base]
	if !ok {
		if len(p.states) >= maxWindows {
			var oldest store.WindowKey
			var at time.Time
			for k, s := range p.states {
				if at.IsZero() || s.used.Before(at) {
					oldest, at = k, s.used
				}
			}
			delete(p.states, oldest)
		}
		st = &winState{}
		p.states[base] = st
	}
	st.used = time.Now()
	return st
}

// instructions reports whether m is a Responses request's instructions
// as responsesAPI.read stores them: a system message with no type.
func instructions(m *window.Message) bool {
	return m.Role == window.RoleSystem && m.Shape != nil && m.Shape.Vendor == window.Responses && m.Shape.NoType && !m.Shape.Developer
}

// formOf is what an edit in place keeps of a message: its role and the
// ids of the tool calls it makes and answers.
func formOf(m *window.Message) string {
	return string(m.Role) + "|" + strings.Join(m.Calls(), ",") + "|" + strings.Join(m.Results(), ",")
}

// follows reports whether a request (its messages' hashes and forms)
// continues what window w holds: it lists at least as many messages, the
// held ones in the same forms, and the user's prompts unchanged. The
// content of the others may have changed in place: Claude Code clears old
// tool results, a system prompt names a new date. A prompt that changed
// is a question asked again in other words (a rewind, an edited prompt):
// a conversation of its own, never an edit that would leave the window
// with the prompt the answer no longer answers.
func (w *held) follows(hashes, forms []string) bool {
	if len(forms) < len(w.forms) {
		return false
	}
	for i := range w.forms {
		if w.forms[i] != forms[i] {
			return false
		}
		if forms[i] == promptForm && w.hashes[i] != hashes[i] {
			return false
		}
	}
	return true
}

// promptForm is the form of a user's prompt: a user message that answers
// no tool call.
var promptForm = string(window.RoleUser) + "||"

// followed is the window of wins the request continues, the one it
// repeats most of when several; nil when none. A stateful request
// continues the latest.
func followed(wins []*held, c *conversation, hashes, forms []string) *held {
	if c.stateful {
		if len(wins) == 0 {
			return nil
		}
		return wins[len(wins)-1]
	}
	var best *held
	most := -1
	for _, w := range wins {
		if !w.follows(hashes, forms) {
			continue
		}
		same := 0
		for same < len(w.hashes) && w.hashes[same] == hashes[same] {
			same++
		}
		if same > most {
			best, most = w, same
		}
	}
	return best
}

// find is the window a request maps to: of the session's windows for the
// agent, the one it continues; else a new one (agent-2, agent-3, ...)
// when the harness started over (a /compact, a rewind, a request on the
// side with a conversation of its own).
func (p *Proxy) find(ctx context.Context, st *winState, base store.WindowKey, c *conversation, hashes, forms []string) (*held, error) {
	if !st.loaded {
		for key := base; len(st.wins) < maxRestarts; key.AgentID = window.NextAgent(key.AgentID) {
			w := &held{key: key, tools: -1}
			err := p.reload(ctx, w)
			if errors.Is(err, store.ErrNotFound) {
				break
			}
			if err != nil {
				return nil, err
			}
			st.wins = append(st.wins, w)
		}
		st.loaded = true
	}
	if w := followed(st.wins, c, hashes, forms); w != nil {
		return w, nil
	}
	key := base
	if n := len(st.wins); n > 0 {
		if n >= maxRestarts {
			return nil, fmt.Errorf("session %s: the harness started over more than %d times", base.SessionID, maxRestarts)
		}
		key.AgentID = window.NextAgent(st.wins[n-1].key.AgentID)
		p.count.restarts.Add(1)
		p.log.Info("the harness started a conversation over: a window of its own", "session", key.SessionID, "window", key.AgentID)
		if n == manyRestarts {
			p.log.Warn("a session started over many times: if its harness rewrites old prompts every turn, each turn stores the history again",
				"session", key.SessionID, "windows", n+1, "bound", maxRestarts)
		}
	}
	w := &held{key: key, tools: -1}
	st.wins = append(st.wins, w)
	return w, nil
}

// size opens the window, or sizes it anew when the tool schemas changed:
// its context is the model's (or --window), less the tool schemas, which
// the harness sends with every request outside the messages.
func (p *Proxy) size(ctx context.Context, w *held, c *conversation) error {
	sum := c.toolsSum
	if w.tools >= 0 && sum == w.toolsSum && c.model == w.model {
		return nil // the same model and schemas as last time
	}
	model, known := p.catalog.Lookup(c.model)
	enc := tokens.O200kBase
	if known {
		enc = model.Encoding
	}
	e, err := tokens.Get(enc)
	if err != nil {
		return err
	}
	tools := 0
	if present(c.tools) {
		tools = e.Count(string(c.tools))
	}
	w.toolsSum = sum
	if w.tools >= 0 && abs(tools-w.tools) < resizeTokens && c.model == w.model {
		return nil
	}
	limit := defaultLimit
	if known {
		limit = model.ContextWindow
	}
	if p.opts.Limit > 0 {
		limit = p.opts.Limit
	}
	o := window.OpenOptions{Role: p.opts.Role, Limit: limit, Safety: int(window.DefaultSafety*float64(limit)) + tools}
	if known && p.opts.Limit <= 0 {
		o.Model = model.Name
	}
	if _, err := p.windows.Open(ctx, w.key, o); err != nil {
		return err
	}
	w.tools, w.model = tools, c.model
	return nil
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// markerNote leads the first markers of a rewritten request.
const markerNote = "[engram: earlier parts of this conversation are stored whole and shown here as markers; to read one, call engram's retrieve_context tool with its ref_id (and a query, to get only the parts that match)]"

// virtualize is the request with the window's layout of its history: the
// messages the window shows whole as the harness sent them this time
// (their cache_control breakpoints where the harness put them), and a
// user message with the markers where evicted runs stood. nil when the
// window shows everything: the request goes as it came. The caller holds
// the lock of w's state.
func (p *Proxy) virtualize(ctx context.Context, proto protocol, w *held, body []byte, c *conversation) ([]byte, error) {
	key := w.key
	// Most turns of a conversation under its threshold: the window's
	// status says so without reading its content back.
	st, serr := p.windows.Status(ctx, key)
	if serr == nil && st.Evicted == 0 && st.Refs == 0 {
		p.count.whole.Add(1)
		return nil, nil
	}
	items, err := p.windows.Context(ctx, key)
	if err != nil {
		return nil, err
	}
	// A system prompt the request holds apart goes as the harness sent
	// it, whatever the window shows of it: in a window too small for it
	// (a --window of little more than the harness's tool schemas), the
	// requests pass the window by what it clipped. Said once a window
	// (again if the proxy dropped it from memory and it comes back).
	if serr == nil && c.off > 0 && len(items) > 0 && items[0].Pos == 0 && items[0].Message == nil {
		if !w.toldSmall {
			w.toldSmall = true
			p.log.Warn("the window is too small for the harness's system prompt, which goes whole: requests pass the window by what it cannot hold; raise --window (by default, the model's context)",
				"session", key.SessionID, "agent", key.AgentID, "budget", st.Budget)
		}
	}
	whole := true
	for _, it := range items {
		if it.Message == nil {
			whole = false
			break
		}
	}
	if whole {
		p.count.whole.Add(1)
		return nil, nil
	}
	var msgs []json.RawMessage
	var notes []string
	told := false
	flush := func() {
		if len(notes) == 0 {
			return
		}
		if !told {
			notes = append([]string{markerNote}, notes...)
			told = true
		}
		msgs = append(msgs, proto.note(strings.Join(notes, "\n")))
		notes = notes[:0]
	}
	// The turn's own messages go whole whatever the window did: the last,
	// and, when it answers tool calls, the results before it and the
	// assistant's messages that made the calls (with their signed
	// thinking or reasoning).
	protect := len(c.raws) - 1
	for protect > c.off && len(c.info[protect].results) > 0 {
		protect--
	}
	if protect < len(c.raws)-1 {
		for protect > c.off && c.info[protect-1].role == window.RoleAssistant {
			protect--
		}
	}
	// Which messages go as the harness sent them: those the window shows
	// whole, the turn's own, and what the window does not hold (a request
	// counted, not stored); then, until none is missing, the results of
	// every call that goes and the call of every result that goes, so
	// that the request stays valid whatever the window kept of them. An
	// excerpt the window keeps of a message that does not go (a clipped
	// message's head and tail, a digest's lines) goes among the markers.
	//
	// held is one past the last message the window holds: the last item's
	// place, or, when the window ends under a marker (a call of over
	// ClipCallTokens that a tool loop's window clips, with its results),
	// the last place the marker stands for. Counted to the marker's first
	// place only, the messages after it were taken for ones the window
	// does not hold, and went whole again, over what it had laid out.
	held := 0
	for _, it := range items {
		held = max(held, it.Pos+1)
		if it.Marker != "" {
			if m, err := ctxref.Parse(it.Marker); err == nil && m.TurnTo > 0 {
				held = max(held, m.TurnTo)
			}
		}
	}
	sent := make([]bool, len(c.raws))
	for _, it := range items {
		if it.Message != nil && it.Pos >= c.off && it.Pos < protect {
			if it.Pos >= len(c.raws) {
				return nil, fmt.Errorf("the window shows message %d of a request of %d", it.Pos, len(c.raws))
			}
			sent[it.Pos] = true
		}
	}
	tail := max(c.off, min(protect, held))
	for i := tail; i < len(c.raws); i++ {
		sent[i] = true
	}
	pair(c.info, sent)
	emitted := make([]bool, len(c.raws))
	emit := func(pos int) {
		if !emitted[pos] {
			flush()
			msgs = append(msgs, c.raws[pos])
			emitted[pos] = true
		}
	}
	next := c.off // messages before it are emitted or noted
	for _, it := range items {
		if it.Pos >= tail {
			break
		}
		// A message that goes with one that goes, from inside a marker's
		// run: in its place, after the marker.
		for ; next < it.Pos; next++ {
			if sent[next] {
				emit(next)
			}
		}
		next = max(next, it.Pos+1)
		switch {
		case it.Pos < c.off:
			// The system prompt is the request's own.
		case it.Pos < len(sent) && sent[it.Pos]:
			emit(it.Pos)
		case it.Excerpt != "":
			notes = append(notes, it.Excerpt)
		case it.Marker != "":
			notes = append(notes, it.Marker)
		}
	}
	for ; next < tail; next++ {
		if sent[next] {
			emit(next)
		}
	}
	flush()
	msgs = append(msgs, c.raws[tail:]...)
	// The body as the harness sent it, byte for byte, but for its list.
	list := c.list
	at := cap(body) - cap(list) // list is a slice of body
	if len(list) == 0 || at < 0 || at+len(list) > len(body) {
		return nil, fmt.Errorf("no %s list in the request", proto.field())
	}
	out := make([]byte, 0, len(body))
	out = append(out, body[:at]...)
	out = append(out, '[')
	for i, m := range msgs {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, m...)
	}
	out = append(out, ']')
	out = append(out, body[at+len(list):]...)
	p.count.virtualized.Add(1)
	return out, nil
}

// pair marks, in sent, the messages that must go with those it marks: the
// results of the calls they make, the calls of the results they hold, the
// message after a reasoning item and the reasoning item before a message.
func pair(msgs []msgInfo, sent []bool) {
	callAt, resultsAt := map[string]int{}, map[string][]int{}
	for i := range msgs {
		for _, id := range msgs[i].calls {
			callAt[id] = i
		}
		for _, id := range msgs[i].results {
			resultsAt[id] = append(resultsAt[id], i)
		}
	}
	for changed := true; changed; {
		changed = false
		mark := func(i int) {
			if !sent[i] {
				sent[i], changed = true, true
			}
		}
		for i := range msgs {
			if !sent[i] {
				continue
			}
			for _, id := range msgs[i].calls {
				for _, j := range resultsAt[id] {
					mark(j)
				}
			}
			for _, id := range msgs[i].results {
				if j, ok := callAt[id]; ok {
					mark(j)
				}
			}
			if msgs[i].leads && i+1 < len(msgs) {
				mark(i + 1)
			}
			if i > 0 && msgs[i-1].leads {
				mark(i - 1)
			}
		}
	}
}

// MessageHash names a message by its vendor's form as engram writes it
// (equal JSON values give equal bytes), so that a message read back from
// the window and the same message resent by the harness agree; what a
// harness changes in a message it resends without changing the message is
// left out: the cache_control breakpoints (Claude Code moves them to the
// newest messages every turn) and Claude Code's billing header in the
// system prompt (a hash of the request, new every time).
func MessageHash(m window.Message) (string, error) {
	var b []byte
	var err error
	switch vendor(m) {
	case window.OpenAI:
		b, err = window.ToOpenAI(m)
	case window.Responses:
		b, err = window.ToResponses(m)
	default:
		b, err = window.ToAnthropic(m)
	}
	if err != nil {
		return "", err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return "", err
	}
	b, err = json.Marshal(Stable(v))
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), nil
}

// messageHash is MessageHash, or for a message no vendor's form can hold
// (a tool call's input that redaction left no JSON object: a private key's
// header redacted to the end of the input) a digest of its parts, the same
// for the message the harness sends, redacted, and the one the window
// stored.
func messageHash(m window.Message) string {
	if h, err := MessageHash(m); err == nil {
		return h
	}
	sum := sha256.New()
	sum.Write([]byte(m.Role))
	for _, b := range m.Blocks {
		for _, part := range []string{string(b.Type), b.ID, b.ToolUseID, b.Name, b.Text, string(b.Input), string(b.Raw)} {
			sum.Write([]byte{0})
			sum.Write([]byte(part))
		}
	}
	return "parts-" + hex.EncodeToString(sum.Sum(nil)[:16])
}

func vendor(m window.Message) string {
	if m.Shape == nil {
		return window.Anthropic
	}
	return m.Shape.Vendor
}

// Stable drops from a decoded JSON value what a harness moves between
// requests without changing the prompt: cache_control breakpoints and
// Claude Code's billing header (a text block of its own). What is left is
// what a provider's prompt cache compares.
func Stable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		delete(x, "cache_control")
		for k, e := range x {
			x[k] = Stable(e)
		}
	case []any:
		out := x[:0]
		for _, e := range x {
			if b, ok := e.(map[string]any); ok {
				if t, _ := b["text"].(string); strings.HasPrefix(t, "x-anthropic-billing-header:") {
					continue
				}
			}
			out = append(out, Stable(e))
		}
		return out
	}
	return v
}

// sessionPattern finds the session in Claude Code's older user_id format
// (user_<hash>_account_<uuid>_session_<uuid>).
var sessionPattern = regexp.MustCompile(`session_([0-9A-Fa-f-]{36})`)

// claudeSession reads the session from Claude Code's metadata.user_id,
// whatever of its known shapes it has (a JSON object with session_id in
// 2.1; an underscored string before); "" when none.
func claudeSession(userID string) string {
	if userID == "" {
		return ""
	}
	var obj struct {
		SessionID string `json:"session_id"`
	}
	if json.Unmarshal([]byte(userID), &obj) == nil && obj.SessionID != "" && len(obj.SessionID) <= store.MaxIdentifierBytes {
		return obj.SessionID
	}
	if m := sessionPattern.FindStringSubmatch(userID); m != nil {
		return m[1]
	}
	return ""
}
