package window

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image"
	_ "image/gif"  // DecodeConfig reads GIF's size
	_ "image/jpeg" // and JPEG's
	_ "image/png"  // and PNG's
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	_ "golang.org/x/image/webp" // and WebP's, the fourth format the vendors take
)

// A block of media (an image, a PDF, a recording) costs a model what its
// vendor charges for it, not what its bytes would as text: a screenshot
// of 600 KB is 800 KB of base64, about half a million tokens counted as
// text, where Anthropic charges at most 1,600 for it. Counted as text,
// one image would fill a window, and its eviction would take the picture
// from the model on the very next turn. So a block that carries media is
// counted as the vendors say they count it, from the image's size in
// pixels, read from its header, from a PDF's pages, or from a
// recording's length (audio.go); what the block holds besides (a tool
// result's text) is counted as text.
const (
	// claudeImageMax is Anthropic's most for an image: a larger one is
	// scaled down to about 1.15 megapixels (tokens = pixels / 750).
	claudeImageMax = 1600
	// claudeLongEdge is the longest edge Anthropic keeps.
	claudeLongEdge = 1568
	// openAIImageBase and openAIImageTile are OpenAI's charge for an
	// image in high detail (low detail is the base alone): the image
	// fits 2,048 × 2,048, its short side is brought to 768, and each
	// 512-pixel tile costs a tile's tokens.
	openAIImageBase = 85
	openAIImageTile = 170
	// openAIImageMax is the most the tiling can come to (2,048 × 768:
	// eight tiles), for an image whose size is not known.
	openAIImageMax = openAIImageBase + 8*openAIImageTile
	// pdfPageTokens is a PDF page's cost, its text and its picture, the
	// top of the 1,500 to 3,000 Anthropic gives for a page: an estimate
	// over the mark evicts a little early; one under it could take a
	// request over the model's limit.
	pdfPageTokens = 3000
	// pdfBytesPerPage is a PDF's size per page, for a PDF whose pages
	// cannot be counted (its page objects compressed).
	pdfBytesPerPage = 50 << 10
	// audioTokensPerSecond is OpenAI's charge for a user's audio: a
	// token per 100 ms (its Realtime cost guide; Chat Completions takes
	// the same models' input_audio).
	audioTokensPerSecond = 10
	// audioBytesPerSecond is the rate assumed of audio whose header
	// cannot be read: 16 kbit/s, under what speech is recorded at, so
	// that its length is estimated over the mark rather than under.
	audioBytesPerSecond = 2000
)

// mediaType finds the blocks that may carry media, so that other raw
// blocks are counted as text without being decoded.
var mediaType = regexp.MustCompile(`"type"\s*:\s*"(?:image|document|image_url|input_image|input_file|file|computer_screenshot|input_audio)"`)

// holdsMedia reports whether the raw block raw may hold media.
func holdsMedia(raw []byte) bool {
	return len(raw) > 0 && mediaType.Match(raw)
}

// RawTokens is what a raw block (Block.Raw, as the vendor sent it) costs
// the model: its media at the vendor's rates, the rest counted as text
// by count.
func RawTokens(raw []byte, count func(string) int) int {
	if !holdsMedia(raw) {
		return count(string(raw))
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return count(string(raw))
	}
	n := 0
	rest, err := json.Marshal(withoutMedia(v, &n))
	if err != nil {
		return count(string(raw))
	}
	return n + count(string(rest))
}

// withoutMedia returns v with each piece of media in it replaced by an
// empty object, adding the media's tokens to n.
func withoutMedia(v any, n *int) any {
	switch v := v.(type) {
	case []any:
		for i := range v {
			v[i] = withoutMedia(v[i], n)
		}
		return v
	case map[string]any:
		if t, ok := mediaTokens(v); ok {
			*n += t
			return map[string]any{}
		}
		for k := range v {
			v[k] = withoutMedia(v[k], n)
		}
		return v
	}
	return v
}

// mediaTokens reports whether the object o is a piece of media in one of
// the vendors' shapes (see pieceOf), and what it costs.
func mediaTokens(o map[string]any) (int, bool) {
	p, ok := pieceOf(o)
	switch {
	case !ok:
		return 0, false
	case p.kind == "document" && p.b64 == "":
		return pdfPageTokens, true // given by URL or file: its pages unknown here, one
	case p.kind == "document":
		return pdfTokens(p.b64), true
	case p.kind == "audio":
		return audioTokens(audioLength(p.b64), len(p.b64)), true
	case p.openAI:
		w, h := imageSize(p.b64)
		return openAIImageTokens(w, h, p.detail), true
	}
	w, h := imageSize(p.b64)
	return claudeImageTokens(w, h), true
}

// piece is a piece of media as a vendor's block gives it.
type piece struct {
	kind   string // "image", "document" or "audio"
	openAI bool   // in one of OpenAI's shapes, charged at its rates
	detail string // an OpenAI image's detail
	typ    string // its media type, "" when the block does not say
	// b64 is its base64, payload the string that holds it as the block
	// writes it (the data, or the data: URL); both "" for media given
	// by URL or by a file's id.
	b64, payload string
}

// pieceOf reports whether the object o is a piece of media in one of the
// vendors' shapes, and what it is:
//
//	Anthropic: {"type": "image", "source": {"type": "base64", "data": …} or a url or file}
//	           {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": …} or a url or file}
//	OpenAI:    {"type": "image_url", "image_url": {"url": "data:…", "detail": …}}
//	           {"type": "file", "file": {"file_data": "data:application/pdf;base64,…"}}
//	           {"type": "input_audio", "input_audio": {"data": …, "format": "wav" or "mp3"}}
//	Responses: {"type": "input_image", "image_url": "data:…", "detail": …}
//	           {"type": "input_file", "file_data": "data:application/pdf;base64,…"}
//	           {"type": "computer_screenshot", "image_url": "data:…"} (a computer call's output)
//
// A document of text (Anthropic's source of type "text" or "content") is
// no media: its text is counted and shown as text.
func pieceOf(o map[string]any) (piece, bool) {
	str := func(m map[string]any, k string) string { s, _ := m[k].(string); return s }
	fromURL := func(kind, u, detail string) (piece, bool) {
		p := piece{kind: kind, openAI: true, detail: detail}
		if p.b64 = dataURL(u); p.b64 != "" {
			p.payload = u
			p.typ, _, _ = strings.Cut(strings.TrimPrefix(u, "data:"), ";")
		}
		return p, true
	}
	switch kind := str(o, "type"); kind {
	case "image", "document":
		src, ok := o["source"].(map[string]any)
		if !ok {
			return piece{}, false
		}
		p := piece{kind: kind, typ: str(src, "media_type")}
		switch str(src, "type") {
		case "base64":
			p.b64 = str(src, "data")
			p.payload = p.b64
		case "url", "file":
		default:
			if kind == "document" {
				return piece{}, false
			}
		}
		return p, true
	case "image_url":
		img, ok := o["image_url"].(map[string]any)
		if !ok {
			return piece{}, false
		}
		return fromURL("image", str(img, "url"), str(img, "detail"))
	case "input_image", "computer_screenshot":
		return fromURL("image", str(o, "image_url"), str(o, "detail"))
	case "input_audio":
		a, ok := o["input_audio"].(map[string]any)
		if !ok {
			return piece{}, false
		}
		p := piece{kind: "audio", openAI: true, b64: str(a, "data")}
		p.payload = p.b64
		switch f := str(a, "format"); f {
		case "":
		case "mp3":
			p.typ = "audio/mpeg"
		default:
			p.typ = "audio/" + f
		}
		return p, true
	case "file":
		f, ok := o["file"].(map[string]any)
		if !ok {
			return piece{}, false
		}
		return fromURL("document", str(f, "file_data"), "")
	case "input_file":
		return fromURL("document", str(o, "file_data"), "")
	}
	return piece{}, false
}

// dataURL returns the base64 payload of a data: URL, or "" for another
// URL (or a data: URL not in base64).
func dataURL(u string) string {
	meta, data, ok := strings.Cut(strings.TrimPrefix(u, "data:"), ",")
	if !ok || !strings.HasPrefix(u, "data:") || !strings.HasSuffix(meta, ";base64") {
		return ""
	}
	return data
}

// imageSize reads an image's size in pixels from its header, its
// base64 decoded as far as the header needs (a JPEG's may come after a
// long EXIF block); 0, 0 when it cannot be read.
func imageSize(b64 string) (w, h int) {
	for _, n := range []int{64 << 10, len(b64)} {
		n = min(n, len(b64)) &^ 3
		raw, err := base64.StdEncoding.DecodeString(b64[:n])
		if err != nil {
			return 0, 0
		}
		if c, _, err := image.DecodeConfig(bytes.NewReader(raw)); err == nil {
			return c.Width, c.Height
		}
		if n == len(b64)&^3 {
			break
		}
	}
	return 0, 0
}

// claudeImageTokens is Anthropic's charge for a w × h image: pixels over
// 750, once the long edge is at most 1,568, and at most 1,600.
func claudeImageTokens(w, h int) int {
	if w <= 0 || h <= 0 {
		return claudeImageMax
	}
	fw, fh := float64(w), float64(h)
	if long := max(fw, fh); long > claudeLongEdge {
		fw, fh = fw*claudeLongEdge/long, fh*claudeLongEdge/long
	}
	return min(int(math.Ceil(fw*fh/750)), claudeImageMax)
}

// openAIImageTokens is OpenAI's charge for a w × h image at detail (its
// GPT-4o family's tiling; "auto", or none, counted as high).
func openAIImageTokens(w, h int, detail string) int {
	if detail == "low" {
		return openAIImageBase
	}
	if w <= 0 || h <= 0 {
		return openAIImageMax
	}
	fw, fh := float64(w), float64(h)
	if long := max(fw, fh); long > 2048 {
		fw, fh = fw*2048/long, fh*2048/long
	}
	if short := min(fw, fh); short > 768 {
		fw, fh = fw*768/short, fh*768/short
	}
	tiles := int(math.Ceil(fw/512) * math.Ceil(fh/512))
	return openAIImageBase + openAIImageTile*tiles
}

// pdfPage finds a PDF's page objects (not its /Pages tree).
var pdfPage = regexp.MustCompile(`/Type\s*/Page\b`)

// pdfTokens estimates a base64 PDF's cost: its pages (counted, or from
// its size when its page objects are compressed) at pdfPageTokens.
func pdfTokens(b64 string) int {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) == 0 {
		return pdfPageTokens
	}
	pages := len(pdfPage.FindAllIndex(raw, -1))
	if pages == 0 {
		pages = max(1, (len(raw)+pdfBytesPerPage-1)/pdfBytesPerPage)
	}
	return pages * pdfPageTokens
}

// Media is a piece of media a raw block holds in base64: what it is, and
// where its payload lies in the block, bytes Start to End (the JSON
// string's contents, a data: URL whole).
type Media struct {
	// Kind is "image", "document" or "audio".
	Kind string
	// Type is its media type (image/png, application/pdf, audio/wav), ""
	// when the block does not say.
	Type string
	// Width and Height are an image's size in pixels, read from its
	// header; Pages a PDF's pages, counted from its page objects. 0 when
	// not known.
	Width, Height, Pages int
	// Length is audio's, read from its header (a WAV's or an MP3's); 0
	// when not known.
	Length time.Duration
	// Sum is the start of the payload's SHA-256, in hex: pieces of media
	// with the same one are the same.
	Sum string
	// Size is its base64's length in bytes.
	Size       int
	Start, End int
}

// FindMedia returns the pieces of media given in base64 that the raw
// block raw holds, in the vendors' shapes (see pieceOf), in the
// order they come; none when it holds none, or is not JSON. A piece
// given by URL or by a file's id is not one: it is short, and its text
// says what it is.
func FindMedia(raw []byte) []Media {
	if !holdsMedia(raw) {
		return nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil
	}
	type found struct {
		m       Media
		payload string
	}
	var all []found
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case []any:
			for _, x := range v {
				walk(x)
			}
		case map[string]any:
			if m, payload, ok := mediaPayload(v); ok {
				all = append(all, found{m, payload})
				return
			}
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)
	// Where each payload is: its JSON string, as written (a / escaped or
	// not), the next one of the same payload after the last found.
	next := map[string]int{}
	out := make([]Media, 0, len(all))
	for _, f := range all {
		from := next[f.payload]
		for _, lit := range []string{f.payload, strings.ReplaceAll(f.payload, "/", `\/`)} {
			i := bytes.Index(raw[from:], []byte(`"`+lit+`"`))
			if i < 0 {
				continue
			}
			m := f.m
			m.Start = from + i + 1
			m.End = m.Start + len(lit)
			next[f.payload] = m.End
			out = append(out, m)
			break
		}
	}
	slices.SortFunc(out, func(a, b Media) int { return a.Start - b.Start })
	return out
}

// mediaPayload reports whether o is a piece of media given in base64,
// and returns what it is and its payload as the block writes it (the
// data, or the data: URL).
func mediaPayload(o map[string]any) (Media, string, bool) {
	p, ok := pieceOf(o)
	if !ok || p.payload == "" {
		return Media{}, "", false
	}
	return describe(p.kind, p.typ, p.b64), p.payload, true
}

// describe says what the base64 b64 of a piece of media of kind is.
func describe(kind, typ, b64 string) Media {
	m := Media{Kind: kind, Type: typ, Size: len(b64)}
	sum := sha256.Sum256([]byte(b64))
	m.Sum = hex.EncodeToString(sum[:4])
	switch kind {
	case "image":
		m.Width, m.Height = imageSize(b64)
		return m
	case "audio":
		m.Length = audioLength(b64)
		return m
	}
	if raw, err := base64.StdEncoding.DecodeString(b64); err == nil {
		m.Pages = len(pdfPage.FindAllIndex(raw, -1))
	}
	return m
}

// Placeholder is what a text shows of m in place of its base64: what it
// is, and how to read it whole (how, when not empty). It holds no " or
// \, so that it stands in a JSON string as it is.
func (m Media) Placeholder(how string) string {
	var b strings.Builder
	b.WriteString("[" + m.Kind + ":")
	if m.Type != "" {
		b.WriteString(" " + m.Type + ",")
	}
	switch {
	case m.Width > 0:
		fmt.Fprintf(&b, " %d×%d,", m.Width, m.Height)
	case m.Pages == 1:
		b.WriteString(" 1 page,")
	case m.Pages > 1:
		fmt.Fprintf(&b, " %d pages,", m.Pages)
	case m.Length > 0:
		fmt.Fprintf(&b, " %.1f s,", m.Length.Seconds())
	}
	fmt.Fprintf(&b, " %s of base64, sha256 %s", SizeOf(m.Size), m.Sum)
	if how != "" {
		b.WriteString("; " + how)
	}
	b.WriteString("]")
	return strings.NewReplacer(`"`, "'", `\`, "/").Replace(b.String())
}

// SizeOf writes n bytes for a reader: 920 B, 78 KB, 1.2 MB.
func SizeOf(n int) string {
	switch {
	case n < 1000:
		return fmt.Sprintf("%d B", n)
	case n < 1000*1000:
		return fmt.Sprintf("%d KB", (n+500)/1000)
	}
	return fmt.Sprintf("%.1f MB", float64(n)/1e6)
}

// ShowMedia is the raw block raw as text for a model or a person: each
// piece of media in it given in base64 replaced by its Placeholder, the
// rest as it is. The block's bytes are not changed: this is a text of
// them.
func ShowMedia(raw []byte, how string) string {
	ms := FindMedia(raw)
	if len(ms) == 0 {
		return string(raw)
	}
	var b strings.Builder
	at := 0
	for _, m := range ms {
		b.Write(raw[at:m.Start])
		b.WriteString(m.Placeholder(how))
		at = m.End
	}
	b.Write(raw[at:])
	return b.String()
}

// Tokens is what m costs a model: an image at the dearer of the vendors'
// rates for its size (Anthropic's or OpenAI's in high detail, each at
// its most when the size is not known), a PDF at pdfPageTokens a page
// (its pages from its size when they could not be counted), audio at
// OpenAI's rate for its length.
func (m Media) Tokens() int {
	switch m.Kind {
	case "image":
		return max(claudeImageTokens(m.Width, m.Height), openAIImageTokens(m.Width, m.Height, ""))
	case "audio":
		return audioTokens(m.Length, m.Size)
	}
	if m.Pages > 0 {
		return m.Pages * pdfPageTokens
	}
	return max(1, (m.Size*3/4+pdfBytesPerPage-1)/pdfBytesPerPage) * pdfPageTokens
}

// pictureTypes are the types of image every vendor takes, by the name
// image.DecodeConfig gives their format.
var pictureTypes = map[string]string{"png": "image/png", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp"}

// Picture decodes the payload of an image m (raw[m.Start:m.End] of the
// block FindMedia read it from: base64, or a data: URL) and returns its
// bytes and their type, read from its header, not from what the block
// says. It fails for a PDF, for base64 that does not decode, and for an
// image in a format not all the vendors take (PNG, JPEG, GIF and WebP).
func (m Media) Picture(raw []byte) (data []byte, typ string, err error) {
	if m.Kind != "image" {
		return nil, "", fmt.Errorf("a %s is no picture", m.Kind)
	}
	if m.Start < 0 || m.End > len(raw) || m.Start > m.End {
		return nil, "", fmt.Errorf("payload at bytes %d to %d of a block of %d", m.Start, m.End, len(raw))
	}
	payload := strings.ReplaceAll(string(raw[m.Start:m.End]), `\/`, "/")
	if b64 := dataURL(payload); b64 != "" {
		payload = b64
	}
	data, err = base64.StdEncoding.DecodeString(payload)
	if err != nil {
		return nil, "", fmt.Errorf("decode the image's base64: %w", err)
	}
	_, format, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return nil, "", fmt.Errorf("read the image's header: %w", err)
	}
	typ, ok := pictureTypes[format]
	if !ok {
		return nil, "", fmt.Errorf("an image in %s, which not every vendor takes", format)
	}
	return data, typ, nil
}
