package assemble

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/terms"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// Strategy is how a turn's history is shown within its allocation: seed
// 004's progressive compaction, chosen by how many times the conversation
// overflows the room.
type Strategy string

// The strategies, by the ratio of the conversation's tokens to the room.
const (
	// Full shows every message (ratio <= 1).
	Full Strategy = "full"
	// Windowed shows the newest messages whole within 70 % of the room and
	// summarizes the older ones in the rest (ratio <= 2.5).
	Windowed Strategy = "windowed"
	// Compacted cuts the conversation in three zones by message count: the
	// oldest 40 % summarized in 10 % of the room, the newest 25 % as the
	// window shows them in 65 %, the middle 35 % as key messages in what
	// they leave, at least 25 % (ratio <= 8).
	Compacted Strategy = "compacted"
	// WindowLayout is a tool loop's window's own layout (the window
	// package's, measured on agent runs): the newest steps whole, the
	// older under markers with a digest of their output's lines.
	WindowLayout Strategy = "window"
	// MultiLevel cuts the conversation in chunks of about 20 messages,
	// each summarized once (the rolling summaries); the chunks before the
	// newest three are summarized again by groups of five, the first 30 %
	// of a conversation of ten chunks or more once more; the newest chunk
	// is shown as the window shows it (ratio > 8).
	MultiLevel Strategy = "multi_level"
)

// StrategyFor is the strategy for a conversation of whole tokens in room
// tokens (seed 004's thresholds).
func StrategyFor(whole, room int) Strategy {
	if room <= 0 {
		room = 1
		if whole > 0 {
			return MultiLevel
		}
	}
	r := float64(whole) / float64(room)
	switch {
	case r <= 1:
		return Full
	case r <= 2.5:
		return Windowed
	case r <= 8:
		return Compacted
	}
	return MultiLevel
}

// The zones' shares of the history's room (seed 004).
const (
	windowedRecent = 0.70
	compactedA     = 0.10 // the oldest 40 % of the messages, summarized
	compactedB     = 0.25 // the middle 35 %, key messages
	compactedAEnd  = 0.40
	compactedBEnd  = 0.75
	levelRecent    = 0.70 // multi-level: the newest chunk, as the window shows it
	level1Share    = 0.15 // the three chunks before it, their rolling summaries
	level2Share    = 0.10 // older chunks, summarized again by groups of five
	level3Share    = 0.05 // the first 30 % of ten chunks or more
	chunkMessages  = 20
	level2Group    = 5
	level1Chunks   = 3
)

// A Zone is a run of the conversation shown one way.
type Zone struct {
	// Form is how: "whole", "recent" (as the window shows it: the newest
	// whole, markers for the rest), "summary" (markers, and lines quoted
	// from the messages), "key" (the key messages whole, markers for the
	// gaps), "level1", "level2", "level3" (markers, and the rolling
	// summaries of its chunks, summarized again by level).
	Form string `json:"form"`
	// From and To are the ledger places of its first message and one past
	// its last.
	From     int `json:"from"`
	To       int `json:"to"`
	Messages int `json:"messages"`
	// Budget is what the zone was given, Tokens what it takes, counted as
	// text.
	Budget int `json:"budget"`
	Tokens int `json:"tokens"`
}

// Compaction is a turn's conversation as its history layer shows it:
// how it was compacted.
type Compaction struct {
	Strategy Strategy
	// Items are what it shows, in order: messages whole, markers, and text
	// (excerpts, summaries) in Excerpt.
	Items []window.Item
	// Tokens is what the items take, counted as text; Whole what the
	// messages take whole.
	Tokens, Whole int
	// Messages is how many messages it covers, Shown how many it shows
	// whole, Quoted how many more a summary quotes whole, Refs how many
	// markers stand for the rest.
	Messages, Shown, Quoted, Refs int
	Zones                         []Zone
	// Summaries is how the rolling summaries of a multi-level history
	// were made, and why a configured summarizer's were not used.
	Summaries SummaryReport
	// quoted are the messages a summary quotes whole, by ledger place.
	quoted map[int]bool
}

// shown reports the ledger places of the messages the history shows whole
// or quotes whole.
func (h *Compaction) shown() map[int]bool {
	s := map[int]bool{}
	for _, it := range h.Items {
		if it.Message != nil {
			s[it.Pos] = true
		}
	}
	for p := range h.quoted {
		s[p] = true
	}
	return s
}

// conv is what composing a history works on: the window's messages with
// their ledger items, the run [from, to) to show, its units, and the
// turn's message for scoring.
type conv struct {
	key store.WindowKey
	// purges is the store's purge count when the turn began.
	purges uint64
	// win is the window as read for the turn.
	win      *window.Turn
	enc      *tokens.Encoding
	msgs     []window.Message
	items    []store.WindowItem
	from, to int
	units    []window.Unit // of msgs[from:to], in msgs' indexes
	// chunkList are the rolling summaries' chunks (see chunks).
	chunkList [][2]int
	query     *terms.Counter
	qterms    int
	// loop: a tool loop's window, laid out by its own layout.
	loop bool
	// view is the recent zone the turn's history showed last: messages
	// [from, to) in n tokens (see prepare).
	view struct{ from, to, n int }
}

func (c *conv) whole(a, b int) int {
	n := 0
	for i := a; i < b; i++ {
		n += c.msgs[i].Tokens
	}
	return n
}

// place is the ledger place a zone of messages [a, b) reports.
func (c *conv) zone(form string, a, b, budget, used int) Zone {
	z := Zone{Form: form, Messages: b - a, Budget: budget, Tokens: used}
	if a < b {
		z.From, z.To = c.items[a].Pos, c.items[b-1].Pos+1
	}
	return z
}

// history lays out the conversation [from, to) within n tokens, as
// text, by the strategy its size calls for.
func (a *Assembler) history(ctx context.Context, c *conv, n int) (Compaction, error) {
	units, err := window.Units(c.msgs[c.from:c.to])
	if err != nil {
		return Compaction{}, err
	}
	c.units = c.units[:0]
	for _, u := range units {
		c.units = append(c.units, window.Unit{From: u.From + c.from, To: u.To + c.from, Open: u.Open})
	}
	c.chunkList = c.chunks()
	// A composition over n (markers that nothing may drop, in a small
	// room) gives way to a simpler strategy, down to the window's own
	// layout of the whole, which never is.
	var h Compaction
	if c.loop {
		h = Compaction{Strategy: WindowLayout, Whole: c.whole(c.from, c.to), Messages: c.to - c.from}
		if err := a.recent(ctx, c, &h, c.from, c.to, n, "recent"); err != nil {
			return Compaction{}, err
		}
		h.count(a, c)
		return h, nil
	}
	for s := StrategyFor(c.whole(c.from, c.to), n); ; s = simpler(s) {
		h = Compaction{Strategy: s, Whole: c.whole(c.from, c.to), Messages: c.to - c.from}
		switch s {
		case Full:
			err = a.recent(ctx, c, &h, c.from, c.to, n, "whole")
		case Windowed:
			err = a.windowed(ctx, c, &h, n)
		case Compacted:
			err = a.compacted(ctx, c, &h, n)
		case MultiLevel:
			err = a.multiLevel(ctx, c, &h, n)
		default:
			h.Strategy = Windowed
			err = a.recent(ctx, c, &h, c.from, c.to, n, "recent")
		}
		if err != nil {
			return Compaction{}, err
		}
		h.count(a, c)
		if h.Tokens <= n || s == Full || s == "" {
			break
		}
	}
	return h, nil
}

// count sums what a history shows.
func (h *Compaction) count(a *Assembler, c *conv) {
	for _, it := range h.Items {
		switch {
		case it.Message != nil:
			h.Shown++
			h.Tokens += it.Message.Tokens
		case it.Marker != "":
			h.Refs++
			h.Tokens += a.countLine(c.enc, it.Marker)
		default:
			h.Tokens += a.countText(c.enc, it.Excerpt)
		}
	}
	h.Quoted = len(h.quoted)
}

// simpler is the strategy a composition over its room gives way to; ""
// is the window's own layout of the whole conversation.
func simpler(s Strategy) Strategy {
	switch s {
	case MultiLevel:
		return Compacted
	case Compacted:
		return Windowed
	}
	return ""
}

// countText counts a text of lines, each counted once (a line break does
// not merge with its neighbours' tokens in the encodings engram counts
// with).
func (a *Assembler) countText(enc *tokens.Encoding, s string) int {
	n := 0
	for line := range strings.SplitSeq(s, "\n") {
		n += a.countLine(enc, line)
	}
	return n
}

// unitAt is the index of the first unit that starts at or after message
// i.
func (c *conv) unitAt(i int) int {
	k, _ := slices.BinarySearchFunc(c.units, i, func(u window.Unit, at int) int { return cmp.Compare(u.From, at) })
	return k
}

// chunkStart is the start of the rolling summaries' chunk holding message
// i (c.to past the last): zones cut there change only when a chunk is
// done, so that their markers (references the store must hold) are the
// same from turn to turn.
func (c *conv) chunkStart(i int) int {
	start := c.from
	for _, ch := range c.chunkList {
		if ch[0] > i {
			break
		}
		start = ch[0]
	}
	return start
}

// recent shows messages [a, b) within n tokens as the window shows them:
// whole when they fit, else the newest whole and markers for the rest.
func (a *Assembler) recent(ctx context.Context, c *conv, h *Compaction, from, to, n int, form string) error {
	if from >= to {
		return nil
	}
	view := c.win.View
	if c.loop {
		view = c.win.LaidOut
	}
	v, err := view(ctx, from, to, n)
	if err != nil {
		return err
	}
	c.view.from, c.view.to, c.view.n = from, to, n
	h.Items = append(h.Items, v.Items...)
	if v.Shown < v.Messages && form == "whole" {
		form = "recent"
	}
	h.Zones = append(h.Zones, c.zone(form, from, to, n, v.Tokens))
	return nil
}

// windowed: the newest chunks that fit in 70 % of the room, whole; the
// older ones summarized in what is left. What the summary leaves goes to
// the newest, once: the cut moves back.
func (a *Assembler) windowed(ctx context.Context, c *conv, h *Compaction, n int) error {
	recent := int(windowedRecent * float64(n))
	for pass := 0; ; pass++ {
		// The cut falls between chunks (see chunkStart).
		cut, used := c.to, 0
		for k := len(c.chunkList) - 1; k >= 0; k-- {
			w := c.whole(c.chunkList[k][0], c.to)
			if w > recent {
				break
			}
			cut, used = c.chunkList[k][0], w
		}
		if cut == c.to { // the newest chunk alone is larger: the window lays it out
			cut = c.chunkList[len(c.chunkList)-1][0]
			used = min(c.whole(cut, c.to), recent)
		}
		var older Compaction
		sum, err := a.summary(ctx, c, &older, c.from, cut, n-used, "summary")
		if err != nil {
			return err
		}
		if left := n - sum - used; pass == 0 && left > n/20 && cut > c.from {
			recent = used + left
			continue
		}
		h.Items, h.Zones, h.quoted = older.Items, older.Zones, older.quoted
		return a.recent(ctx, c, h, cut, c.to, n-sum, "recent")
	}
}

// compacted: the oldest 40 % of the messages summarized in 10 % of the
// room, the newest 25 % as the window shows them in 65 %, and the middle
// 35 % as key messages in what they leave (at least 25 %).
func (a *Assembler) compacted(ctx context.Context, c *conv, h *Compaction, n int) error {
	count := c.to - c.from
	aEnd := c.chunkStart(c.from + int(compactedAEnd*float64(count)))
	bEnd := c.chunkStart(c.from + int(compactedBEnd*float64(count)))
	used, err := a.summary(ctx, c, h, c.from, aEnd, int(compactedA*float64(n)), "summary")
	if err != nil {
		return err
	}
	var newest Compaction
	if err := a.recent(ctx, c, &newest, bEnd, c.to, n-used-int(compactedB*float64(n)), "recent"); err != nil {
		return err
	}
	k := 0
	for _, it := range newest.Items {
		if it.Message != nil {
			k += it.Message.Tokens
		} else {
			k += a.countLine(c.enc, it.Marker) + a.countText(c.enc, it.Excerpt)
		}
	}
	// What the newest leave goes to the key messages, in steps of a
	// sixteenth of the room: the choice changes with the room, and so
	// less from turn to turn.
	step := max(1, n/16)
	if _, err := a.keyMessages(ctx, c, h, aEnd, bEnd, max(int(compactedB*float64(n)), (n-used-k)/step*step)); err != nil {
		return err
	}
	h.Items = append(h.Items, newest.Items...)
	h.Zones = append(h.Zones, newest.Zones...)
	return nil
}

// chunks cuts messages [from, to) into runs of whole units of at least
// chunkMessages messages (the last may be shorter): the rolling
// summaries' chunks, the same for a conversation whatever is appended
// after them.
func (c *conv) chunks() [][2]int {
	var out [][2]int
	start := c.from
	for _, u := range c.units {
		if u.To-start >= chunkMessages {
			out = append(out, [2]int{start, u.To})
			start = u.To
		}
	}
	if start < c.to {
		out = append(out, [2]int{start, c.to})
	}
	return out
}

// multiLevel: the newest chunk as the window shows it; the three chunks
// before it by their rolling summaries; older chunks by their summaries
// summarized again by groups of five; in a conversation of ten chunks or
// more, the first 30 % once more.
func (a *Assembler) multiLevel(ctx context.Context, c *conv, h *Compaction, n int) error {
	chunks := c.chunkList
	last := len(chunks) - 1
	sums, err := a.rolling(ctx, c, chunks[:last], &h.Summaries)
	if err != nil {
		return err
	}
	l1 := max(0, last-level1Chunks)
	l3 := 0
	if len(chunks) >= 10 {
		l3 = int(0.3 * float64(len(chunks)))
	}
	used := 0
	for _, lv := range []struct {
		form   string
		from   int
		to     int
		share  float64
		groups int
	}{
		{"level3", 0, l3, level3Share, len(chunks)}, // one group
		{"level2", l3, l1, level2Share, level2Group},
		{"level1", l1, last, level1Share, 1},
	} {
		if lv.from >= lv.to {
			continue
		}
		var texts []string
		for g := lv.from; g < lv.to; g += lv.groups {
			var group []string
			for i := g; i < min(g+lv.groups, lv.to); i++ {
				group = append(group, sums[i].Text)
			}
			texts = append(texts, strings.Join(group, "\n"))
		}
		k, err := a.levelZone(ctx, c, h, chunks[lv.from][0], chunks[lv.to-1][1], int(lv.share*float64(n)), lv.form, texts)
		if err != nil {
			return err
		}
		used += k
	}
	return a.recent(ctx, c, h, chunks[last][0], c.to, n-used, "recent")
}

// levelZone shows messages [from, to) as markers and the summaries texts,
// each cut to an equal share of what the markers leave of n (whole lines
// kept; at least its first line). It returns what it takes.
func (a *Assembler) levelZone(ctx context.Context, c *conv, h *Compaction, from, to, n int, form string, texts []string) (int, error) {
	marks, used, err := a.markers(ctx, c, from, to, n)
	if err != nil {
		return 0, err
	}
	h.Items = append(h.Items, marks...)
	header := fmt.Sprintf("Summary of messages %d to %d (%s):", c.items[from].Pos+1, c.items[to-1].Pos+1, levelName(form))
	used += a.countLine(c.enc, header)
	lines := []string{header}
	share := (n - used) / max(len(texts), 1)
	for _, t := range texts {
		got := 0
		for i, line := range strings.Split(t, "\n") {
			k := a.countLine(c.enc, line)
			if i > 0 && got+k > share {
				break
			}
			lines = append(lines, line)
			got += k
		}
		used += got
	}
	h.Items = append(h.Items, window.Item{Pos: c.items[from].Pos, Excerpt: strings.Join(lines, "\n")})
	h.Zones = append(h.Zones, c.zone(form, from, to, n, used))
	return used, nil
}

func levelName(form string) string {
	switch form {
	case "level1":
		return "each part summarized once"
	case "level2":
		return "summarized again, by groups of five parts"
	}
	return "summarized once more"
}

// markerTokens is about what a marker takes, with its entities and hint.
const markerTokens = 70

// markers returns the markers standing for messages [from, to), and what
// they take: runs of at most the window's cap on a reference, or larger
// ones when that many markers would take more than half of n.
func (a *Assembler) markers(ctx context.Context, c *conv, from, to, n int) ([]window.Item, int, error) {
	most := max(1, n/2/markerTokens)
	marks, err := c.win.Refer(ctx, from, to, max(window.DefaultMaxRefTokens, (c.whole(from, to)+most-1)/most))
	if err != nil {
		return nil, 0, err
	}
	used := 0
	for _, m := range marks {
		used += a.countLine(c.enc, m.Marker)
	}
	return marks, used, nil
}

// summary shows messages [from, to) within n tokens as the markers that
// stand for them and, in the room they leave, the lines quoted from them
// that score highest (see score), in order. It returns what it takes: at
// least the markers, which nothing may drop.
func (a *Assembler) summary(ctx context.Context, c *conv, h *Compaction, from, to, n int, form string) (int, error) {
	if from >= to {
		return 0, nil
	}
	marks, used, err := a.markers(ctx, c, from, to, n)
	if err != nil {
		return 0, err
	}
	h.Items = append(h.Items, marks...)
	header := fmt.Sprintf("Quoted from messages %d to %d (the lines that tell most, in order):", c.items[from].Pos+1, c.items[to-1].Pos+1)
	picked := a.pick(c, from, to, n-used-a.countLine(c.enc, header), false, func(i int) float64 { return a.score(c, i) })
	if len(picked) > 0 {
		lines := []string{header}
		used += a.countLine(c.enc, header)
		for _, p := range picked {
			lines = append(lines, p.line)
			used += p.cost
			if p.whole {
				if h.quoted == nil {
					h.quoted = map[int]bool{}
				}
				h.quoted[c.items[p.i].Pos] = true
			}
		}
		h.Items = append(h.Items, window.Item{Pos: c.items[from].Pos, Excerpt: strings.Join(lines, "\n")})
	}
	h.Zones = append(h.Zones, c.zone(form, from, to, n, used))
	return used, nil
}

// quoted is a line quoted from message i: whole when the line is the
// message's whole text.
type quoted struct {
	i     int
	line  string
	whole bool
	cost  int
}

// pick returns the lines quoted from messages [from, to) that score
// highest and fit in room tokens, in order; with one, the best line even
// when it does not fit.
func (a *Assembler) pick(c *conv, from, to, room int, one bool, score func(i int) float64) []quoted {
	type cand struct {
		quoted
		score float64
	}
	var cands []cand
	for i := from; i < to; i++ {
		line, whole := a.quoteOf(c, i)
		if line == "" {
			continue
		}
		cands = append(cands, cand{quoted{i, line, whole, a.countLine(c.enc, line)}, score(i)})
	}
	slices.SortStableFunc(cands, func(x, y cand) int { return cmp.Compare(y.score, x.score) })
	var picked []quoted
	for _, cd := range cands {
		if cd.cost <= room || (one && len(picked) == 0) {
			picked = append(picked, cd.quoted)
			room -= cd.cost
		}
	}
	slices.SortFunc(picked, func(x, y quoted) int { return cmp.Compare(x.i, y.i) })
	return picked
}

// keyMessages shows messages [from, to) within n tokens as the markers
// standing for them all, then the units that score highest, whole, in
// order, with a short note where others are left out (seed 004's gap
// markers: the way back to them is the zone's marker, which does not
// change with the turn's message as the choice does, so that turns do not
// write a reference for every gap they open). It returns what it takes: at
// least the markers.
func (a *Assembler) keyMessages(ctx context.Context, c *conv, h *Compaction, from, to, n int) (int, error) {
	if from >= to {
		return 0, nil
	}
	marks, used, err := a.markers(ctx, c, from, to, n)
	if err != nil {
		return 0, err
	}
	h.Items = append(h.Items, marks...)
	type cand struct {
		k     int // unit
		score float64
		cost  int
	}
	var cands []cand
	for k := c.unitAt(from); k < len(c.units) && c.units[k].From < to; k++ {
		u := c.units[k]
		s := 0.0
		for i := u.From; i < u.To; i++ {
			s = max(s, a.score(c, i))
		}
		cands = append(cands, cand{k, s, c.whole(u.From, u.To)})
	}
	slices.SortStableFunc(cands, func(x, y cand) int { return cmp.Compare(y.score, x.score) })
	// Each unit kept may open a gap, whose note takes ~noteTokens.
	const noteTokens = 16
	room := n - used - noteTokens
	keep := map[int]bool{}
	for _, cd := range cands {
		if cd.cost+noteTokens <= room {
			keep[cd.k] = true
			room -= cd.cost + noteTokens
		}
	}
	gap := 0
	note := func() {
		if gap > 0 {
			text := fmt.Sprintf("[… %s left out]", plural(gap, "message"))
			h.Items = append(h.Items, window.Item{Pos: -1, Excerpt: text})
			used += a.countLine(c.enc, text)
			gap = 0
		}
	}
	for k := c.unitAt(from); k < len(c.units) && c.units[k].From < to; k++ {
		u := c.units[k]
		if !keep[k] {
			gap += u.To - u.From
			continue
		}
		note()
		for i := u.From; i < u.To; i++ {
			msg := c.msgs[i]
			h.Items = append(h.Items, window.Item{Pos: c.items[i].Pos, Message: &msg})
			used += msg.Tokens
		}
	}
	note()
	h.Zones = append(h.Zones, c.zone("key", from, to, n, used))
	return used, nil
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// maxQuoteTokens is the most a summary's line quotes of one message.
const maxQuoteTokens = 80

// quote is a summary's line for a message: its role and its text, whole
// when it is one line of at most ~maxQuoteTokens (whole reports it), else
// its first line cut, and its calls by name.
func quote(m *window.Message) (string, bool) {
	var b strings.Builder
	whole := true
	for _, bl := range m.Blocks {
		var s string
		switch bl.Type {
		case window.BlockText:
			s = bl.Readable()
		case window.BlockToolUse:
			s = "called " + bl.Name + " " + string(bl.Input)
			whole = false
		case window.BlockToolResult:
			s = "result: " + bl.Readable() // an MCP tool's blocks too
			whole = false
		default:
			continue
		}
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s, whole = strings.TrimSpace(s[:i])+" …", false
		}
		if len(s) > 4*maxQuoteTokens {
			s, whole = validUTF8Prefix(s, 4*maxQuoteTokens)+" …", false
		}
		if b.Len() > 0 {
			b.WriteString(" / ")
			whole = false
		}
		b.WriteString(s)
	}
	if b.Len() == 0 {
		return "", false
	}
	return "- " + string(m.Role) + ": " + b.String(), whole
}

// validUTF8Prefix is s cut to at most n bytes at a rune boundary.
func validUTF8Prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

var (
	decisionWords = regexp.MustCompile(`(?i)\b(decided|decision|let's go with|we'll use|agreed|final|conclusion|solution|answer|resolved)\b`)
	problemWords  = regexp.MustCompile(`(?i)\b(error|bug|issue|problem|failed|broken|fix|crash|exception|panic|undefined)\b`)
)

// score is how telling message i is, with no model: seed 004's key
// message heuristics (recency, substance, code, questions, decisions,
// problems, the user's word, the first and last message), and, beyond
// the seed, the share of the turn's message's words it shares (worth up
// to 40): the history is assembled for that message, and a heuristic blind
// to it keeps what the seed thinks important in general rather than what
// the turn needs.
func (a *Assembler) score(c *conv, i int) float64 {
	m := &c.msgs[i]
	s := a.staticScore(c, i)
	total := c.to - c.from
	s += float64(i-c.from) / float64(max(total, 1)) * 20
	if i == c.from || i == c.to-1 {
		s += 15
	}
	if c.qterms > 0 {
		s += 40 * float64(c.query.Distinct(textOf(m))) / float64(c.qterms)
	}
	return s
}

// quoteOf is quote of message i, kept under the message's stored content
// between turns (a summary quotes the same messages turn after turn).
func (a *Assembler) quoteOf(c *conv, i int) (string, bool) {
	k := a.messageKey(c, i)
	a.mu.Lock()
	q, ok := a.quotes[k]
	a.mu.Unlock()
	if ok {
		return q.line, q.whole
	}
	q.line, q.whole = quote(&c.msgs[i])
	a.mu.Lock()
	if a.quotes == nil || len(a.quotes) >= maxCachedLines {
		a.quotes = map[scoreKey]quotedLine{}
	}
	a.quotes[k] = q
	a.mu.Unlock()
	return q.line, q.whole
}

// quotedLine is a message's quote (see quote).
type quotedLine struct {
	line  string
	whole bool
}

// messageKey is what the Assembler keeps a message's static score and
// quote under: its stored content, and the names of the tools it calls
// (a call's input is stored, its tool's name is not).
func (a *Assembler) messageKey(c *conv, i int) scoreKey {
	m := &c.msgs[i]
	k := scoreKey{role: m.Role}
	calls := false
	for _, b := range m.Blocks {
		calls = calls || b.Type == window.BlockToolUse
	}
	if ids := c.items[i].EntryIDs; len(ids) == 1 && !calls {
		k.content = ids[0] // most messages: no string to build
		return k
	}
	var b strings.Builder
	for _, id := range c.items[i].EntryIDs {
		b.WriteString(id)
		b.WriteByte(',')
	}
	for _, bl := range m.Blocks {
		if bl.Type == window.BlockToolUse {
			b.WriteString(bl.Name)
			b.WriteByte(0)
		}
	}
	k.content = b.String()
	return k
}

// scoreKey is what a message's static score is kept under: its stored
// content and its role.
type scoreKey struct {
	content string
	role    window.Role
}

// staticScore is the part of a message's score that depends on it alone,
// cached by its stored content.
func (a *Assembler) staticScore(c *conv, i int) float64 {
	m := &c.msgs[i]
	k := a.messageKey(c, i)
	a.mu.Lock()
	v, ok := a.scores[k]
	a.mu.Unlock()
	if ok {
		return v
	}
	text := textOf(m)
	s := math.Min(25, math.Log2(float64(len(strings.Fields(text))+1))*5)
	s += float64(strings.Count(text, "```")/2) * 15
	s += math.Min(15, float64(strings.Count(text, "?"))*5)
	s += float64(len(decisionWords.FindAllStringIndex(text, -1))) * 10
	s += math.Min(15, float64(len(problemWords.FindAllStringIndex(text, -1)))*5)
	if m.Role == window.RoleUser {
		s += 5
	}
	a.mu.Lock()
	if a.scores == nil || len(a.scores) >= maxCachedLines {
		a.scores = map[scoreKey]float64{}
	}
	a.scores[k] = s
	a.mu.Unlock()
	return s
}
