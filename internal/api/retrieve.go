package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/secrets"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/window"
)

// RetrieveIn asks for stored content back, byte for byte. What to read
// is named by ref_id or content_ids, or found by query; how much of it,
// by query (the chunks that match) or a line range (one entry).
type RetrieveIn struct {
	RefID      string   `json:"ref_id,omitempty" jsonschema:"a [CTX-REF] marker, whole, or its ref id"`
	ContentIDs []string `json:"content_ids,omitempty" jsonschema:"entry ids (or prefixes)"`
	Query      string   `json:"query,omitempty" jsonschema:"words to match"`
	StartLine  int      `json:"start_line,omitempty" jsonschema:"first line to read, of one entry (1-based)"`
	EndLine    int      `json:"end_line,omitempty" jsonschema:"last line, inclusive (default start_line+199)"`
	StartByte  int      `json:"start_byte,omitempty" jsonschema:"of one entry: read from this byte, as next says after a line too long to fit"`
	MaxTokens  int      `json:"max_tokens,omitempty" jsonschema:"most tokens returned, 100-8000 (default 4000)"`
	Raw        bool     `json:"raw,omitempty" jsonschema:"images and PDFs as their base64, not a placeholder"`
	// Pictures, set by a front end that can send pictures beside the
	// text (MCP), asks for them (RetrieveOut.Pictures), unless Raw: the
	// images the text shows whole, as many as fit max_tokens (apart from
	// the text's) and PictureBytes. Neither is an argument a client gives.
	Pictures bool `json:"-"`
	// PictureBytes is the most bytes the pictures may take, as base64.
	PictureBytes int `json:"-"`
}

// SpanOut is a piece of stored content, byte for byte: lines StartLine
// to EndLine of an entry, which are bytes StartByte to EndByte (end
// exclusive) of its content. Media in it (an image or a PDF a raw
// block holds in base64) is shown as a placeholder unless raw was asked
// for: StartByte and EndByte are still the stored bytes'.
type SpanOut struct {
	ID string `json:"id"`
	// Where is the file the content is, or the session and turn it was
	// seen in.
	Where     string `json:"where,omitempty"`
	Type      string `json:"type,omitempty"`
	StartLine int    `json:"start_line"`
	EndLine   int    `json:"end_line"`
	StartByte int    `json:"start_byte"`
	EndByte   int    `json:"end_byte"`
	Tokens    int    `json:"tokens"`
	// Score ranks the chunks that match a query: search's fused score,
	// or with content_ids their BM25 among those entries' chunks.
	Score   float64 `json:"score,omitempty"`
	Content string  `json:"content"`
	// ContentBase64 holds the bytes instead of Content when they are not
	// UTF-8 text.
	ContentBase64 string `json:"content_base64,omitempty"`
	// Truncated is set when the item was cut to max_tokens: at a line, or
	// within a line too long to fit, at a character.
	Truncated bool `json:"truncated,omitempty"`
	// Next is the call that reads on: the lines of the item left out by
	// the cut, or the page of lines after a range.
	Next *RetrieveIn `json:"next,omitempty"`
}

// RetrieveOut is what retrieve_context returns.
type RetrieveOut struct {
	Items  []SpanOut `json:"items"`
	Tokens int       `json:"tokens"`
	// More counts the items left out by max_tokens.
	More int `json:"more,omitempty"`
	// Message says why there are no items, when nothing matched.
	Message string `json:"message,omitempty"`
	// Pictures are the images the items show whole, in the order of
	// their placeholders, which say "picture N, sent below"; only when
	// RetrieveIn.Pictures asks for them. They go beside the text, never
	// in its JSON.
	Pictures []Picture `json:"-"`
}

// Defaults of RetrieveContext.
const (
	// retrieveHits is how many chunks a query finds: 20 chunks of up to
	// 400 tokens fill the largest max_tokens.
	retrieveHits = 20
	// defaultPage is how many lines a range with no end reads.
	defaultPage = 200
	// nextRoom is the room kept for the note that says where to read on.
	nextRoom = 40
	// MaxContentIDs is the most entries one call names.
	MaxContentIDs = 100
)

// piece is what RetrieveContext writes of one entry.
type piece struct {
	id         string // the entry's ID
	where, typ string
	sp         engine.Span
	content    []byte         // the span's bytes
	media      []window.Media // the entry's, at its offsets
	// edge: the span may end where a piece of media begins, or begin
	// where one ends (a chunk: the engine leaves media out of them).
	edge        bool
	tokens      int // -1 when not known
	score       float64
	page, lines int // a range read: its length, and the entry's lines
}

// RetrieveContext returns stored content byte for byte, with where each
// piece lies in its entry (lines and bytes):
//   - query alone: the chunks that match it best, as search ranks them;
//   - content_ids or ref_id with a query: their chunks that hold the
//     query's words, best first;
//   - one entry with start_line or end_line: those lines;
//   - content_ids or ref_id alone: the entries, from their first line.
//
// Everything fits in max_tokens: an item that does not fit whole is cut
// at a line, and says the call that reads on (next). Images and PDFs
// are shown as placeholders (media.go) unless in.Raw; with in.Pictures,
// the images are sent beside the text as well.
func (o *Ops) RetrieveContext(ctx context.Context, in RetrieveIn) (RetrieveOut, string, error) {
	maxTokens, err := MaxTokensRange.Check(in.MaxTokens)
	if err != nil {
		return RetrieveOut{}, "", err
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"start_line", in.StartLine}, {"end_line", in.EndLine}} {
		if _, err := LinesRange.CheckAs(f.name, f.v); err != nil {
			return RetrieveOut{}, "", err
		}
	}
	if in.StartByte < 0 {
		return RetrieveOut{}, "", bad("start_byte is %d; it must be 0 or more", in.StartByte)
	}
	ids, err := o.retrieveIDs(ctx, in)
	if err != nil {
		return RetrieveOut{}, "", err
	}
	if in.RefID != "" {
		// A marker read back: the same expansion as GET /v1/refs/{id}.
		o.Metrics.RefExpanded()
	}
	query := strings.TrimSpace(in.Query)
	ranged := in.StartLine > 0 || in.EndLine > 0 || in.StartByte > 0
	var ps []piece
	mayCut := true
	switch {
	case ranged && len(ids) == 0:
		return RetrieveOut{}, "", bad("start_line and end_line read one entry: name it with content_ids")
	case ranged && query != "":
		return RetrieveOut{}, "", bad("give a query or a line range, not both")
	case ranged && len(ids) != 1:
		return RetrieveOut{}, "", bad("a line range reads one entry, and %d are named", len(ids))
	case in.StartLine > 0 && in.StartByte > 0:
		return RetrieveOut{}, "", bad("give start_line or start_byte, not both")
	case ranged:
		if ps, err = o.rangePiece(ctx, ids[0], in.StartLine, in.EndLine, in.StartByte); err != nil {
			return RetrieveOut{}, "", err
		}
	case len(ids) > 0 && query != "":
		if ps, err = o.matchPieces(ctx, ids, query); err != nil {
			return RetrieveOut{}, "", err
		}
		if len(ps) == 0 {
			msg := "no chunk of these entries holds the query's words: read them by lines (start_line, end_line)"
			return RetrieveOut{Items: []SpanOut{}, Message: msg}, msg, nil
		}
		mayCut = false
	case len(ids) > 0:
		if ps, err = o.entryPieces(ctx, ids); err != nil {
			return RetrieveOut{}, "", err
		}
	case query != "":
		if ps, err = o.searchPieces(ctx, query); err != nil {
			return RetrieveOut{}, "", err
		}
		if len(ps) == 0 {
			msg := "nothing matches the query"
			return RetrieveOut{Items: []SpanOut{}, Message: msg}, fmt.Sprintf("nothing found for %q", clip(query, 200)), nil
		}
		mayCut = false
	default:
		return RetrieveOut{}, "", bad("give ref_id, content_ids or query")
	}
	if in.Raw {
		for i := range ps {
			ps[i].media = nil
		}
	}
	var pics *pictures
	if in.Pictures && !in.Raw {
		pics = &pictures{tokens: maxTokens, bytes: in.PictureBytes}
	}
	out, text := o.writePieces(ps, maxTokens, mayCut, in.Raw, pics)
	return out, text, nil
}

// retrieveIDs returns the entry IDs that ref_id or content_ids name, or
// none.
func (o *Ops) retrieveIDs(ctx context.Context, in RetrieveIn) ([]string, error) {
	switch {
	case in.RefID != "" && len(in.ContentIDs) > 0:
		return nil, bad("give ref_id or content_ids, not both")
	case in.RefID != "":
		m, err := ctxref.Parse(in.RefID)
		if err != nil {
			return nil, bad("ref_id: %v", err)
		}
		ref, err := o.Eng.Store().Reference(ctx, m.ID)
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("no reference %s: %w", m.ID, store.ErrNotFound)
		}
		return ref.ContentIDs, err
	}
	if len(in.ContentIDs) > MaxContentIDs {
		return nil, bad("%d content_ids; at most %d a call", len(in.ContentIDs), MaxContentIDs)
	}
	var ids []string
	for _, p := range in.ContentIDs {
		id, err := o.Eng.Store().ResolveID(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("content id %s: %w", p, err)
		}
		if !slices.Contains(ids, id) { // an entry named twice is read once
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// searchPieces are the chunks that match query best, as search ranks
// them.
func (o *Ops) searchPieces(ctx context.Context, query string) ([]piece, error) {
	res, err := o.Eng.Retrieve(ctx, retrieve.Query{Text: query, Limit: retrieveHits})
	if err != nil {
		return nil, err
	}
	o.Metrics.Search(res.Lexical, res.Vector, res.Degraded, res.Elapsed)
	ps := make([]piece, 0, len(res.Hits))
	for _, h := range res.Hits {
		c := h.Chunk
		ps = append(ps, piece{id: c.EntryID, where: where(h.Occurrence), typ: string(h.Occurrence.Type),
			sp:      engine.Span{Start: c.Start, End: c.End, StartLine: c.StartLine, EndLine: c.EndLine},
			content: []byte(c.Text), tokens: c.TokenCount, score: h.Score})
	}
	return ps, o.findMedia(ctx, ps)
}

// findMedia sets the media of pieces of entries that hold some, reading
// the entries of those whose text may be base64.
func (o *Ops) findMedia(ctx context.Context, ps []piece) error {
	var ids []string
	for _, p := range ps {
		if p.typ != string(store.CodeFile) && (p.edge || mayBeBase64(p.content)) && !slices.Contains(ids, p.id) {
			ids = append(ids, p.id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	ents, err := o.Eng.Store().Entries(ctx, ids)
	if err != nil {
		return err
	}
	media := map[string][]window.Media{}
	for _, e := range ents {
		media[e.ID] = mediaOf(e)
	}
	for i := range ps {
		ps[i].media = media[ps[i].id]
	}
	return nil
}

// mayBeBase64 reports whether b holds a run of base64 long enough to be
// a piece of media's: 100 bytes with no space.
func mayBeBase64(b []byte) bool {
	n := 0
	for _, c := range b {
		if secrets.Base64Letter(c) || c == '=' {
			if n++; n >= 100 {
				return true
			}
			continue
		}
		n = 0
	}
	return false
}

// matchPieces are the chunks of the entries ids that hold the query's
// words, best first.
func (o *Ops) matchPieces(ctx context.Context, ids []string, query string) ([]piece, error) {
	ms, err := o.Eng.MatchChunks(ctx, ids, query)
	if err != nil || len(ms) == 0 {
		return nil, err
	}
	ents, err := o.Eng.Store().Entries(ctx, uniq(ids))
	if err != nil {
		return nil, err
	}
	occ := map[string]store.Occurrence{}
	media := map[string][]window.Media{}
	for _, e := range ents {
		occ[e.ID] = e.Occurrence
		media[e.ID] = mediaOf(e)
	}
	ps := make([]piece, 0, len(ms))
	for _, m := range ms {
		c := m.Chunk
		ps = append(ps, piece{id: c.EntryID, where: where(occ[c.EntryID]), typ: string(occ[c.EntryID].Type),
			sp:      engine.Span{Start: c.Start, End: c.End, StartLine: c.StartLine, EndLine: c.EndLine},
			content: []byte(c.Text), tokens: c.TokenCount, score: m.Score, media: media[c.EntryID]})
	}
	return ps, nil
}

// entryPieces are whole entries.
func (o *Ops) entryPieces(ctx context.Context, ids []string) ([]piece, error) {
	ents, err := o.Eng.Store().Entries(ctx, ids)
	if err != nil {
		return nil, err
	}
	ps := make([]piece, 0, len(ents))
	for _, e := range ents {
		n := engine.CountLines(e.Content)
		ps = append(ps, piece{id: e.ID, where: where(e.Occurrence), typ: string(e.Type),
			sp: engine.Span{End: len(e.Content), StartLine: 1, EndLine: n}, content: e.Content, tokens: e.TokenCount,
			media: mediaOf(e)})
	}
	return ps, nil
}

// rangePiece is lines from to to of an entry, or from byte at, within
// its line, to line to; to defaults to a page.
func (o *Ops) rangePiece(ctx context.Context, id string, from, to, at int) ([]piece, error) {
	ents, err := o.Eng.Store().Entries(ctx, []string{id})
	if err != nil {
		return nil, err
	}
	e := ents[0]
	if at > 0 {
		switch {
		case at >= len(e.Content):
			return nil, bad("start_byte %d: entry %s has %d bytes", at, id[:12], len(e.Content))
		case utf8.Valid(e.Content) && !utf8.RuneStart(e.Content[at]):
			return nil, bad("start_byte %d is inside a character of entry %s", at, id[:12])
		}
		from = bytes.Count(e.Content[:at], []byte{'\n'}) + 1
	}
	from = max(from, 1)
	if to == 0 {
		to = from + defaultPage - 1
	}
	if to < from {
		return nil, bad("end_line %d is before start_line %d", to, from)
	}
	sp, err := engine.LineSpan(e.Content, from, to)
	if err != nil {
		return nil, bad("entry %s %v", id[:12], err)
	}
	if at > 0 {
		sp.Start = at
	}
	return []piece{{id: e.ID, where: where(e.Occurrence), typ: string(e.Type), sp: sp, content: e.Content[sp.Start:sp.End],
		tokens: -1, page: to - from + 1, lines: engine.CountLines(e.Content), media: mediaOf(e)}}, nil
}

// writePieces writes pieces, in order, within maxTokens. Only the first
// may be cut unless mayCut. The calls that read on ask for raw content
// if raw. The images shown whole go in pics, if not nil, as far as they
// fit it.
func (o *Ops) writePieces(ps []piece, maxTokens int, mayCut, raw bool, pics *pictures) (RetrieveOut, string) {
	enc := o.Eng.Encoding()
	tb := newTextBudget(enc, maxTokens)
	out := RetrieveOut{Items: []SpanOut{}}
	for i, p := range ps {
		id := p.id[:min(12, len(p.id))]
		it := SpanOut{ID: id, Where: p.where, Type: p.typ, StartLine: p.sp.StartLine, EndLine: p.sp.EndLine,
			StartByte: p.sp.Start, EndByte: p.sp.End, Score: round(p.score)}
		content, text := string(p.content), utf8.Valid(p.content)
		if !text {
			content = base64.StdEncoding.EncodeToString(p.content)
		}
		tokens := p.tokens
		// Its media, if any, as placeholders: the text maps back to the
		// content's bytes for a cut.
		sh := shown{}
		mark := 0 // the item's first picture
		if pics != nil {
			mark = len(pics.sent)
		}
		if text && len(p.media) > 0 {
			how := always(readWhole(id))
			if pics != nil {
				how = pics.how(p.content, p.sp.Start, id)
			}
			sh = showSpan(p.content, p.sp.Start, p.media, how)
			content, tokens = sh.text, -1
		}
		if tokens < 0 || !text {
			tokens = enc.Count(content)
		}
		var page *RetrieveIn
		whole := 0
		if p.page > 0 && p.sp.EndLine < p.lines {
			page = &RetrieveIn{ContentIDs: []string{id}, StartLine: p.sp.EndLine + 1, EndLine: min(p.lines, p.sp.EndLine+p.page), Raw: raw}
			whole = enc.Count(nextLine(page) + "\n")
		}
		header := func(kept string, tokens int, cut bool) string {
			last := p.sp.EndLine
			if cut {
				last = p.sp.StartLine + engine.CountLines([]byte(kept)) - 1
			}
			w := ""
			if p.where != "" {
				w = " " + p.where
			}
			return fmt.Sprintf("--- %s%s lines %d-%d (%d tokens%s)\n", id, w, p.sp.StartLine, last, tokens, cutNote(cut))
		}
		kept, n, cut, ok := tb.fit(budgetItem{header: header, content: content, tokens: tokens,
			mayCut: text && (mayCut || i == 0), whole: whole, cut: nextRoom})
		if !ok {
			if pics != nil {
				pics.keep(mark, p.sp.Start)
			}
			out.More = len(ps) - i
			break
		}
		it.Tokens = n
		if text {
			it.Content = kept
		} else {
			it.ContentBase64 = kept
		}
		if cut {
			it.Truncated = true
			it.EndByte = p.sp.Start + sh.contentLen(len(kept))
			it.EndLine = p.sp.StartLine + engine.CountLines(p.content[:it.EndByte-p.sp.Start]) - 1
			it.Next = &RetrieveIn{ContentIDs: []string{id}, StartLine: it.EndLine + 1, EndLine: p.sp.EndLine, Raw: raw}
			if it.EndByte-p.sp.Start == 0 || p.content[it.EndByte-p.sp.Start-1] != '\n' {
				// Cut within a line too long to fit: read on from the
				// byte where it stops.
				it.Next = &RetrieveIn{ContentIDs: []string{id}, StartByte: it.EndByte, EndLine: p.sp.EndLine, Raw: raw}
			}
		} else {
			it.Next = page
		}
		if it.Next != nil {
			tb.note(nextLine(it.Next))
		}
		if pics != nil {
			pics.keep(mark, it.EndByte)
		}
		out.Items = append(out.Items, it)
	}
	if pics != nil {
		out.Pictures = pics.sent
	}
	out.Tokens = tb.used
	return out, tb.text(out.More)
}

// nextLine says the call that reads on.
func nextLine(n *RetrieveIn) string {
	from := ", start_line " + strconv.Itoa(n.StartLine)
	if n.StartByte > 0 {
		from = ", start_byte " + strconv.Itoa(n.StartByte)
	}
	raw := ""
	if n.Raw {
		raw = ", raw true"
	}
	return "(read on: content_ids " + strings.Join(n.ContentIDs, ",") + from + ", end_line " + strconv.Itoa(n.EndLine) + raw + ")"
}

// where says where an occurrence was seen: the file, or the session and
// turn.
func where(o store.Occurrence) string {
	if o.Type == store.CodeFile && len(o.Files) > 0 {
		return o.Files[0]
	}
	var parts []string
	if o.SessionID != "" {
		parts = append(parts, "session "+o.SessionID)
		if o.Turn > 0 {
			parts = append(parts, "turn "+strconv.Itoa(o.Turn))
		}
	}
	return strings.Join(parts, " ")
}

func uniq(ids []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
