package assemble

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/llm"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// A Summarizer writes a summary of a run of a conversation in about
// budget tokens: the rolling summaries of a multi-level history, when a
// model is configured. Without one, the Assembler quotes the messages
// (extractive), with no model.
type Summarizer interface {
	// Name says what makes the summaries (a model's name).
	Name() string
	Summarize(ctx context.Context, msgs []window.Message, budget int) (string, error)
}

// Extractive names the summaries the Assembler makes with no model.
const Extractive = "extractive"

// fallbackBy names a summary quoted in place of a model's, which failed
// on its chunk tries times: unlike one quoted with no model configured
// (Extractive), it is the model's failure, reported as such, and asked
// of it again up to maxSummaryTries. failures reads tries back: 0 for
// any other maker.
func fallbackBy(tries int) string {
	if tries <= 1 {
		return fallbackPrefix
	}
	return fmt.Sprintf("%s %d times", fallbackPrefix, tries)
}

const fallbackPrefix = Extractive + ", model failed"

func failures(by string) int {
	rest, ok := strings.CutPrefix(by, fallbackPrefix)
	switch {
	case !ok:
		return 0
	case rest == "":
		return 1
	}
	n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(rest, " "), " times"))
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// maxSummaryTries is how many times the model is given a chunk: one
// that failed (a timeout, an outage, an unusable answer) is given again
// on a later turn, one batch of a window's at a time, until it has failed
// this many times; its quoted summary then stays. The count is kept with
// the summary, so a restart, or a command's one turn, does not start it
// over.
const maxSummaryTries = 3

// DefaultSummaryTimeout bounds a Summarizer's work on one window's
// summaries.
const DefaultSummaryTimeout = 60 * time.Second

// SummaryReport says how a multi-level history's rolling summaries were
// made for a turn.
type SummaryReport struct {
	// By is what makes them: "extractive" or the configured model.
	By string `json:"by,omitempty"`
	// Chunks is how many the turn used; Stored how many of them the store
	// held, Made how many the turn made, Pending how many a model is still
	// making (the turn quoted those chunks meanwhile).
	Chunks  int `json:"chunks"`
	Stored  int `json:"stored"`
	Made    int `json:"made"`
	Pending int `json:"pending,omitempty"`
	// Stale is how many summaries made for the turn were not written
	// because another writer moved the window's summaries on (their epoch
	// changed): the newer ones were used.
	Stale int `json:"stale,omitempty"`
	// Fallback says why the model's summaries were not used, when they
	// were not (a timeout, an unusable answer).
	Fallback string `json:"fallback,omitempty"`
}

// chunkBudget is what the rolling summary of a chunk of whole tokens
// takes: a fifth, within 60 to 400 tokens.
func chunkBudget(whole int) int { return min(400, max(60, whole/5)) }

// digest names the stored content of messages [a, b).
func (c *conv) digest(a, b int) string {
	h := sha256.New()
	for _, it := range c.items[a:b] {
		for _, id := range it.EntryIDs {
			h.Write([]byte(id))
			h.Write([]byte{0})
		}
		h.Write([]byte{1})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// rolling returns the level-1 summaries of chunks, in order: the store's
// where it holds them for the same content, else made now, extractive, and
// written if no model is configured (with the epoch read, so a summarizer
// that started earlier never overwrites them, nor they a newer one). With
// a model configured, the chunks it has not summarized yet (none stored,
// or quoted before it was configured) are given to it in the background
// and quoted for this turn; those it failed on stay quoted, reported.
func (a *Assembler) rolling(ctx context.Context, c *conv, chunks [][2]int, rep *SummaryReport) ([]store.WindowSummary, error) {
	rep.By, rep.Chunks = Extractive, len(chunks)
	if a.Summarizer != nil {
		rep.By = a.Summarizer.Name()
	}
	if len(chunks) == 0 {
		return nil, nil
	}
	epoch, stored, err := a.summaries(ctx, c, chunks)
	if err != nil {
		return nil, err
	}
	have := map[int]store.WindowSummary{}
	for _, s := range stored {
		if s.Level == 1 {
			have[s.From] = s
		}
	}
	out := make([]store.WindowSummary, len(chunks))
	// missing are the chunks whose summaries are made now, ask those
	// the model is to make.
	var missing, ask []int
	failed, spent := 0, 0
	for i, ch := range chunks {
		want := store.WindowSummary{Level: 1, From: c.items[ch[0]].Pos, To: c.items[ch[1]-1].Pos + 1, Digest: c.digest(ch[0], ch[1])}
		if s, ok := have[want.From]; ok && s.To == want.To && s.Digest == want.Digest {
			out[i] = s
			rep.Stored++
			switch n := failures(s.By); {
			case a.Summarizer == nil:
			case n >= maxSummaryTries:
				failed++
				spent++
			case n > 0:
				// Asked again: the failure may have passed.
				failed++
				ask = append(ask, i)
			case s.By == Extractive:
				// Quoted with no model configured: the model's to make.
				ask = append(ask, i)
			}
			continue
		}
		want.Text = a.extract(c, ch[0], ch[1], chunkBudget(c.whole(ch[0], ch[1])))
		want.Tokens, want.By = a.countText(c.enc, want.Text), Extractive
		out[i] = want
		missing = append(missing, i)
		ask = append(ask, i)
	}
	rep.Made = len(missing)
	if failed > 0 {
		// The model failed on them (now or before a restart): their
		// extractive summaries stand.
		why := a.fallback(c.key)
		if why == "" {
			why = "an earlier run"
		}
		rep.Fallback = fmt.Sprintf("%d of the chunks' summaries are quoted, the model having failed on them (%s)", failed, why)
		if again := failed - spent; again > 0 {
			rep.Fallback += fmt.Sprintf("; %d asked of it again", again)
		}
		if spent > 0 {
			rep.Fallback += fmt.Sprintf("; %d stay quoted, after %d failures", spent, maxSummaryTries)
		}
	}
	if a.Summarizer != nil {
		if len(ask) == 0 {
			return out, nil
		}
		rep.Pending = len(ask)
		jobs := make([]summaryJob, 0, len(ask))
		for _, i := range ask {
			ch := chunks[i]
			jobs = append(jobs, summaryJob{enc: c.enc, sum: out[i], msgs: slices.Clone(c.msgs[ch[0]:ch[1]]), budget: chunkBudget(c.whole(ch[0], ch[1])),
				tries: failures(out[i].By)})
		}
		if a.unpurged(ctx, c.purges) {
			// Not messages a purge may have removed since: to the model.
			a.summarizeLater(c.key, epoch, c.purges, jobs)
		}
		return out, nil
	}
	if len(missing) == 0 {
		return out, nil
	}
	var put []store.WindowSummary
	for _, i := range missing {
		put = append(put, out[i])
	}
	a.forgetSummaries(c.key)
	if !a.unpurged(ctx, c.purges) {
		// Made from what a forget or a redaction may have removed since:
		// shown this turn (which Assemble lays out again), never kept.
		return out, nil
	}
	// Extractive summaries are a function of the chunks' messages (their
	// digest names them): derived data, written without waiting for the
	// disk (store.Derived); a model's, which cost a call, are synced.
	next, err := a.Engine.Store().PutWindowSummaries(store.Derived(ctx), c.key, epoch, put)
	if err == nil {
		a.keepSummaries(c, next, stored, put)
	}
	if errors.Is(err, store.ErrStaleEpoch) {
		// Another turn wrote meanwhile: its summaries are the newer.
		rep.Stale = len(put)
		_, stored, err := a.Engine.Store().WindowSummaries(ctx, c.key)
		if err != nil {
			return nil, err
		}
		for _, s := range stored {
			for i := range out {
				if s.Level == 1 && s.From == out[i].From && s.To == out[i].To && s.Digest == out[i].Digest {
					out[i] = s
				}
			}
		}
	} else if err != nil {
		return nil, err
	}
	return out, nil
}

// summaries returns the window's stored summaries and their epoch, as
// last read or written by this Assembler: the store is read only for a
// window it has not seen, or whose last write failed. The summaries of a
// chunk done since are missing from them, and rolling writes those at
// the epoch it was given: if another process (a model's summaries) wrote
// meanwhile, the write is stale, and the turn reads what it wrote.
func (a *Assembler) summaries(ctx context.Context, c *conv, chunks [][2]int) (int64, []store.WindowSummary, error) {
	a.mu.Lock()
	cached, ok := a.sums[c.key]
	a.mu.Unlock()
	if ok {
		return cached.epoch, cached.sums, nil
	}
	epoch, stored, err := a.Engine.Store().WindowSummaries(ctx, c.key)
	if err != nil {
		return 0, nil, err
	}
	a.mu.Lock()
	if a.cacheable(c.purges) {
		if a.sums == nil || len(a.sums) >= maxCachedWindows {
			a.sums = map[store.WindowKey]cachedSummaries{}
		}
		a.sums[c.key] = cachedSummaries{epoch, stored}
	}
	a.mu.Unlock()
	return epoch, stored, nil
}

// cachedSummaries are a window's summaries as last read.
type cachedSummaries struct {
	epoch int64
	sums  []store.WindowSummary
}

// maxCachedWindows bounds the windows whose summaries an Assembler keeps.
const maxCachedWindows = 1024

// forgetSummaries drops a window's cached summaries: they are written.
// keepSummaries keeps a window's summaries as written: stored, as read at
// the epoch the write was made at, with put replacing those of their
// level and place, at the write's epoch.
func (a *Assembler) keepSummaries(c *conv, epoch int64, stored, put []store.WindowSummary) {
	key := c.key
	type place struct{ level, from int }
	byPlace := map[place]store.WindowSummary{}
	for _, s := range stored {
		byPlace[place{s.Level, s.From}] = s
	}
	for _, s := range put {
		byPlace[place{s.Level, s.From}] = s
	}
	sums := slices.SortedFunc(maps.Values(byPlace), func(x, y store.WindowSummary) int {
		return cmp.Or(cmp.Compare(x.Level, y.Level), cmp.Compare(x.From, y.From))
	})
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.cacheable(c.purges) {
		return
	}
	if a.sums == nil || len(a.sums) >= maxCachedWindows {
		a.sums = map[store.WindowKey]cachedSummaries{}
	}
	a.sums[key] = cachedSummaries{epoch, sums}
}

func (a *Assembler) forgetSummaries(key store.WindowKey) {
	a.mu.Lock()
	delete(a.sums, key)
	a.mu.Unlock()
}

// extract is the extractive summary of messages [from, to) in about n
// tokens: the lines quoted from them that tell most (their static score,
// the chunk's first and last message), in order. It depends on the
// messages alone, so that it can be kept.
func (a *Assembler) extract(c *conv, from, to, n int) string {
	picked := a.pick(c, from, to, n, true, func(i int) float64 {
		s := a.staticScore(c, i)
		if i == from || i == to-1 {
			s += 15
		}
		return s
	})
	lines := make([]string, len(picked))
	for k, p := range picked {
		lines[k] = p.line
	}
	return strings.Join(lines, "\n")
}

// summaryJob is a chunk a Summarizer is to summarize, and how many times
// it failed to.
type summaryJob struct {
	enc    *tokens.Encoding
	sum    store.WindowSummary
	msgs   []window.Message
	budget int
	tries  int
}

// summarizeLater has the Summarizer summarize jobs in the background, one
// batch per window at a time, and writes the summaries if the window's
// summaries are still at epoch. A summary the model fails to make (a
// timeout, an unusable answer) is written extractive, by fallbackBy, and
// the failure is reported by the window's next turns.
func (a *Assembler) summarizeLater(key store.WindowKey, epoch int64, purges uint64, jobs []summaryJob) {
	a.mu.Lock()
	if a.pending == nil {
		a.pending = map[store.WindowKey]bool{}
	}
	if a.pending[key] {
		a.mu.Unlock()
		return
	}
	a.pending[key] = true
	a.wg.Add(1)
	a.mu.Unlock()
	go func() {
		defer a.wg.Done()
		defer func() {
			a.mu.Lock()
			delete(a.pending, key)
			a.mu.Unlock()
		}()
		timeout := a.SummaryTimeout
		if timeout <= 0 {
			timeout = DefaultSummaryTimeout
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		var put []store.WindowSummary
		var failed error
		for _, j := range jobs {
			s := j.sum
			text, err := a.Summarizer.Summarize(ctx, j.msgs, j.budget)
			// Lines end in "\n" in a history (its levels are cut by line).
			text = strings.ReplaceAll(text, "\r\n", "\n")
			n := 0
			if err == nil {
				n = j.enc.Count(text)
				err = usable(text, j.budget, n, j.msgs)
			}
			if err != nil {
				failed = err // the extractive summary stands
				s.By = fallbackBy(j.tries + 1)
			} else {
				s.Text, s.Tokens, s.By = text, n, a.Summarizer.Name()
			}
			put = append(put, s)
		}
		a.setFallback(key, failed)
		// The write has its own time: the summarizer's may be spent.
		wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		defer a.forgetSummaries(key)
		if !a.unpurged(wctx, purges) {
			return // made from what a purge may have removed
		}
		if _, err := a.Engine.Store().PutWindowSummaries(wctx, key, epoch, put); err != nil {
			a.logger().Info("rolling summaries not written", "window", key.String(), "err", err)
		}
	}()
}

// usable checks a model's summary of msgs: text, UTF-8, with no control
// character but tabs and line feeds, at most twice its budget (a model
// that ignores the budget would crowd out the history), and every
// [CTX-REF] in it a marker that msgs show (see refsOf). A summary is
// shown to models and printed to terminals (engram window assemble): an
// ANSI escape, a BEL or a carriage return there is garbage at best, a
// rewrite of what the terminal shows at worst.
func usable(text string, budget, tokens int, msgs []window.Message) error {
	control := strings.IndexFunc(text, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' })
	switch {
	case strings.TrimSpace(text) == "":
		return fmt.Errorf("%w: an empty summary", llm.ErrBadAnswer)
	case !utf8.ValidString(text) || strings.ContainsRune(text, 0):
		return fmt.Errorf("%w: a summary that is not text", llm.ErrBadAnswer)
	case control >= 0:
		r, _ := utf8.DecodeRuneInString(text[control:])
		return fmt.Errorf("%w: a summary with a control character (%U at byte %d)", llm.ErrBadAnswer, r, control)
	case tokens > 2*budget:
		return fmt.Errorf("%w: a summary of ~%d tokens for a budget of %d", llm.ErrBadAnswer, tokens, budget)
	}
	return refsOf(text, msgs)
}

// refsOf checks the [CTX-REF] markers of a model's summary of msgs. The
// model sees no reference but those its messages show (a handoff's, one
// an agent quoted), so a marker it writes is one of theirs, copied, or
// one it made up: a made-up ID, or a marker that does not parse, shown
// among the history's real markers, would send retrieve_context to
// nothing, or to another run than the one summarized.
func refsOf(text string, msgs []window.Message) error {
	if !strings.Contains(text, ctxref.Prefix) {
		return nil
	}
	shown := map[string]bool{}
	for i := range msgs {
		for _, b := range msgs[i].Blocks {
			for _, l := range ctxref.Find(b.Readable()) { // a marker retrieve_context answered, in MCP's blocks
				shown[l.Marker.ID] = true
			}
		}
	}
	at := map[int]string{}
	for _, l := range ctxref.Find(text) {
		at[l.Start] = l.Marker.ID
	}
	for i := 0; ; i++ {
		k := strings.Index(text[i:], ctxref.Prefix)
		if k < 0 {
			return nil
		}
		i += k
		id, ok := at[i]
		switch {
		case !ok:
			return fmt.Errorf("%w: a summary with a [CTX-REF] marker that does not parse", llm.ErrBadAnswer)
		case !shown[id]:
			return fmt.Errorf("%w: a summary with a [CTX-REF] marker (%q) that none of its messages shows", llm.ErrBadAnswer, id)
		}
	}
}

func (a *Assembler) setFallback(key store.WindowKey, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failures == nil {
		a.failures = map[store.WindowKey]string{}
	}
	if err == nil {
		delete(a.failures, key)
		return
	}
	a.failures[key] = err.Error()
}

func (a *Assembler) fallback(key store.WindowKey) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.failures[key]
}

// Wait waits for the Assembler's work in the background: the summaries
// being made, the zones laid out ahead (see prepare).
func (a *Assembler) Wait() { a.wg.Wait() }

func (a *Assembler) logger() *slog.Logger {
	if a.Logger != nil {
		return a.Logger
	}
	return slog.Default()
}

// Model is a Summarizer over a chat model: seed 004's compaction prompt.
type Model struct {
	Client *llm.Client
}

// Name implements Summarizer.
func (m Model) Name() string { return m.Client.Model() }

// Summarize implements Summarizer.
func (m Model) Summarize(ctx context.Context, msgs []window.Message, budget int) (string, error) {
	var b strings.Builder
	for i := range msgs {
		line, _ := quote(&msgs[i])
		if text := textOf(&msgs[i]); text != "" && !strings.Contains(line, "called ") {
			line = "[" + string(msgs[i].Role) + "]: " + strings.TrimSpace(text)
		}
		b.WriteString(line)
		b.WriteString("\n\n")
	}
	sys := fmt.Sprintf(`Compress this conversation segment into a dense summary.

CONSTRAINTS:
- Maximum ~%d tokens (about %d characters)
- Preserve: key decisions, technical details, file paths, code changes, unresolved questions
- Use bullet points, one fact per line
- Mark any unresolved question with [OPEN]

Start with a one-sentence overview, then the bullet points.`, budget, budget*7/2)
	raw, err := m.Client.Call(ctx, []llm.Message{{Role: "system", Content: sys}, {Role: "user", Content: b.String()}}, llm.Tool{
		Name: "summary", Description: "Record the summary of the conversation segment",
		Parameters: map[string]any{"type": "object", "required": []string{"summary"},
			"properties": map[string]any{"summary": map[string]any{"type": "string"}}},
	})
	if err != nil {
		return "", err
	}
	var out struct {
		Summary string `json:"summary"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return "", fmt.Errorf("%w: %v", llm.ErrBadAnswer, err)
	}
	return out.Summary, nil
}

// unpurged reports whether the store's purge count is still n, the one a
// summary's messages were read at: a summary made from what a forget or
// a redaction removed since must not be written, where the next turn
// would find it by its digest (of entry IDs, which a redaction keeps).
// An error reading the count says no.
func (a *Assembler) unpurged(ctx context.Context, n uint64) bool {
	m, err := a.Engine.Store().Purges(ctx)
	return err == nil && m == n
}
