package window

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	_ "image/gif"  // DecodeConfig reads GIF's size
	_ "image/jpeg" // and JPEG's
	_ "image/png"  // and PNG's
	"math"
	"regexp"
	"strings"

	_ "golang.org/x/image/webp" // and WebP's, the fourth format the vendors take
)

// A block of media (an image, a PDF) costs a model what its vendor
// charges for it, not what its bytes would as text: a screenshot of 600
// KB is 800 KB of base64, about half a million tokens counted as text,
// where Anthropic charges at most 1,600 for it. Counted as text, one
// image would fill a window, and its eviction would take the picture
// from the model on the very next turn. So a block that carries media is
// counted as the vendors say they count it, from the image's size in
// pixels, read from its header, or from a PDF's pages; what the block
// holds besides (a tool result's text) is counted as text.
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
)

// mediaType finds the blocks that may carry media, so that other raw
// blocks are counted as text without being decoded.
var mediaType = regexp.MustCompile(`"type"\s*:\s*"(?:image|document|image_url|input_image|input_file|file)"`)

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
// the vendors' shapes, and what it costs:
//
//	Anthropic: {"type": "image", "source": {"type": "base64", "data": …} or a url or file}
//	           {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": …}}
//	OpenAI:    {"type": "image_url", "image_url": {"url": "data:…", "detail": …}}
//	           {"type": "file", "file": {"file_data": "data:application/pdf;base64,…"}}
//	Responses: {"type": "input_image", "image_url": "data:…", "detail": …}
//	           {"type": "input_file", "file_data": "data:application/pdf;base64,…"}
//
// A document of text (Anthropic's source of type "text" or "content") is
// no media: its text is counted as text.
func mediaTokens(o map[string]any) (int, bool) {
	str := func(m map[string]any, k string) string { s, _ := m[k].(string); return s }
	switch str(o, "type") {
	case "image":
		src, ok := o["source"].(map[string]any)
		if !ok {
			return 0, false
		}
		w, h := imageSize(str(src, "data"))
		return claudeImageTokens(w, h), true
	case "document":
		src, ok := o["source"].(map[string]any)
		if !ok {
			return 0, false
		}
		switch str(src, "type") {
		case "base64":
			return pdfTokens(str(src, "data")), true
		case "url", "file":
			return pdfPageTokens, true // its pages unknown here: one
		}
		return 0, false
	case "image_url":
		img, ok := o["image_url"].(map[string]any)
		if !ok {
			return 0, false
		}
		w, h := imageSize(dataURL(str(img, "url")))
		return openAIImageTokens(w, h, str(img, "detail")), true
	case "input_image":
		w, h := imageSize(dataURL(str(o, "image_url")))
		return openAIImageTokens(w, h, str(o, "detail")), true
	case "file":
		f, ok := o["file"].(map[string]any)
		if !ok {
			return 0, false
		}
		return pdfTokens(dataURL(str(f, "file_data"))), true
	case "input_file":
		return pdfTokens(dataURL(str(o, "file_data"))), true
	}
	return 0, false
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
