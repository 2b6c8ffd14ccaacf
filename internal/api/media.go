package api

import (
	"context"
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
func showSpan(content []byte, start int, ms []window.Media, how string) shown {
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
		b.WriteString(m.Placeholder(how))
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
		text := showSpan(p.content, c.Start, p.media, h).text
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
