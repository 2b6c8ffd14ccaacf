package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"image"
	"strings"

	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/window"
)

// Stored content is kept byte for byte, pictures and PDFs included: a
// raw block (window.Block.Raw) holds its media as base64, hundreds of
// KB of it. Read back as text, for a model or a person, that is noise
// that fills a budget, so the texts of retrieve_context, get_turn_range
// and a window's messages show each piece of media as a placeholder
// (window.Media.Placeholder) that says what it is and how to read it
// whole; what the block holds besides, a tool result's text, is shown as
// it is. Where the bytes themselves are asked for (retrieve_context's
// raw, engram show, a window's messages in JSON) nothing is replaced.
//
// A front end that can send pictures beside a text (MCP: an image
// content) asks retrieve_context for them (RetrieveIn.Pictures): each
// image in PNG, JPEG, GIF or WebP that the text shows whole comes back
// decoded (RetrieveOut.Pictures), its placeholder saying which picture
// it is, as many as its room allows (pictures).

// mediaOf is the media of an entry: none for an indexed file, which is
// read as it is, a fixture of JSON with a picture in it too.
func mediaOf(e store.Entry) []window.Media {
	if e.Type == store.CodeFile {
		return nil
	}
	return window.FindMedia(e.Content)
}

// readWhole says how to read the media of the entry id whole.
func readWhole(id string) string {
	return "whole: retrieve_context content_ids " + id + " raw true"
}

// always says how to read every piece of media: how.
func always(how string) func(window.Media) string {
	return func(window.Media) string { return how }
}

// inJSON says where the media of a text of messages is whole: the same
// messages in JSON (--json, or the HTTP API's answer).
const inJSON = "whole in the messages' JSON"

// shown is a span of stored content as text, its media as placeholders.
type shown struct {
	text string
	// segs map the text back to the content: segment i is text from
	// at[i] on, content from from[i] on; a placeholder's segment is
	// marked, so that a place within it maps to the payload's start.
	segs []segment
}

type segment struct {
	text, content int // where the segment starts in each
	placeholder   bool
}

// showSpan is content, bytes start to start+len(content) of an entry
// whose media are ms (at the entry's offsets), with each piece of media
// it holds, whole or in part, shown as its placeholder.
func showSpan(content []byte, start int, ms []window.Media, how func(window.Media) string) shown {
	var s shown
	var b strings.Builder
	at, end := 0, start+len(content)
	for _, m := range ms {
		from, to := max(m.Start, start)-start, min(m.End, end)-start
		if from >= to {
			continue
		}
		s.segs = append(s.segs, segment{text: b.Len(), content: at})
		b.Write(content[at:from])
		s.segs = append(s.segs, segment{text: b.Len(), content: from, placeholder: true})
		b.WriteString(m.Placeholder(how(m)))
		at = to
	}
	s.segs = append(s.segs, segment{text: b.Len(), content: at})
	b.Write(content[at:])
	s.text = b.String()
	return s
}

// contentLen is how many bytes of the content the first n bytes of the
// text show: a cut within a placeholder shows none of its payload.
func (s shown) contentLen(n int) int {
	for i := len(s.segs) - 1; i >= 0; i-- {
		g := s.segs[i]
		if n < g.text {
			continue
		}
		if g.placeholder {
			return g.content
		}
		return g.content + n - g.text
	}
	return n
}

// ShowHits shows the media in the hits' chunks as placeholders, in
// place, for a search's snippets; how says how to read the media of
// entry id whole (nil: with retrieve_context).
func (o *Ops) ShowHits(ctx context.Context, hits []retrieve.Hit, how func(id string) string) error {
	if how == nil {
		how = readWhole
	}
	ps := make([]piece, len(hits))
	for i, h := range hits {
		t := h.Chunk.Text
		ps[i] = piece{id: h.Chunk.EntryID, typ: string(h.Occurrence.Type), content: []byte(t),
			edge: strings.HasSuffix(t, `"`) || strings.HasSuffix(t, ",") || strings.HasPrefix(t, `"`)}
	}
	if err := o.findMedia(ctx, ps); err != nil {
		return err
	}
	for i, p := range ps {
		if len(p.media) == 0 {
			continue
		}
		c := &hits[i].Chunk
		h := how(p.id[:min(12, len(p.id))])
		text := showSpan(p.content, c.Start, p.media, always(h)).text
		// The engine leaves a piece's payload out of every chunk (it is
		// neither indexed nor embedded), so a chunk ends where one
		// begins, or begins where one ends: the snippet shows it there.
		for _, m := range p.media {
			switch {
			case m.Start == c.End:
				text += m.Placeholder(h)
			case m.End == c.Start:
				text = m.Placeholder(h) + text
			}
		}
		c.Text = text
	}
	return nil
}

// Picture is an image of stored content, decoded, for a front end to send
// beside the text that shows it as a placeholder.
type Picture struct {
	// Type is its media type (image/png, image/jpeg, image/gif or
	// image/webp), read from its header.
	Type string
	Data []byte
	// Tokens is what it costs a model (window.Media.Tokens).
	Tokens int
}

// pictures chooses the pictures a retrieve_context sends beside its text:
// in the order the text shows them, each while it fits the tokens and
// the bytes (as base64) left.
type pictures struct {
	tokens, bytes int // left
	sent          []Picture
	// ends are where the payloads of sent end in their entries: a
	// picture whose item is cut before its end is not sent.
	ends []int
}

// how decides whether the image m of the entry id, its payload at
// m.Start-start in content (bytes start on of the entry), is sent, and
// returns what its placeholder says: which picture it is, or why it is
// not sent and where to read it.
func (ps *pictures) how(content []byte, start int, id string) func(window.Media) string {
	return func(m window.Media) string {
		if m.Start < start || m.End > start+len(content) {
			return readWhole(id) // a part of it: sent whole or not at all
		}
		at := m
		at.Start, at.End = m.Start-start, m.End-start
		data, typ, err := at.Picture(content)
		if err != nil {
			return readWhole(id) // a PDF, or an image no vendor takes
		}
		tokens, size := m.Tokens(), base64.StdEncoding.EncodedLen(len(data))
		switch {
		case tokens > ps.tokens:
			return fmt.Sprintf("not sent: its %d tokens are over the %d left of max_tokens for pictures; raise max_tokens, or its base64: engram show %s", tokens, ps.tokens, id)
		case size > ps.bytes:
			return fmt.Sprintf("not sent: its %s of base64 are over the %s a result has left for pictures; its base64: engram show %s", window.SizeOf(size), window.SizeOf(ps.bytes), id)
		}
		// The header read; the picture must decode whole too. A picture
		// cut short (a tool's output clipped mid-file) passed, and Claude
		// Code, failing to resize it, replaced the whole tool result,
		// engram's text and all, with its error; a vendor refuses the
		// turn. (The decoders are window's: PNG, JPEG, GIF, WebP.)
		if _, _, err := image.Decode(bytes.NewReader(data)); err != nil {
			return fmt.Sprintf("not sent: the picture does not decode (%v); its base64: engram show %s", err, id)
		}
		ps.tokens -= tokens
		ps.bytes -= size
		ps.sent = append(ps.sent, Picture{Type: typ, Data: data, Tokens: tokens})
		ps.ends = append(ps.ends, m.End)
		return fmt.Sprintf("picture %d, sent below", len(ps.sent))
	}
}

// keep keeps the pictures from the mark on (those of one item) whose
// payloads end by end, the entry's bytes the item shows, and gives the
// room of the others back.
func (ps *pictures) keep(mark, end int) {
	for i := len(ps.sent) - 1; i >= mark && ps.ends[i] > end; i-- {
		ps.tokens += ps.sent[i].Tokens
		ps.bytes += base64.StdEncoding.EncodedLen(len(ps.sent[i].Data))
		ps.sent, ps.ends = ps.sent[:i], ps.ends[:i]
	}
}
