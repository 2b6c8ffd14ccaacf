package window_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image"
	"image/jpeg"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/pictest"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// exifJPEG is a w × h JPEG whose size comes after 80 KB of an APP1
// segment, as a camera's EXIF can put it: its base64.
func exifJPEG(t testing.TB, w, h int) string {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, image.NewGray(image.Rect(0, 0, w, h)), nil); err != nil {
		t.Fatal(err)
	}
	j := b.Bytes()
	var out bytes.Buffer
	out.Write(j[:2]) // SOI
	for range 2 {
		seg := make([]byte, 40<<10)
		out.Write([]byte{0xFF, 0xE1})
		_ = binary.Write(&out, binary.BigEndian, uint16(len(seg)+2))
		out.Write(seg)
	}
	out.Write(j[2:])
	return base64.StdEncoding.EncodeToString(out.Bytes())
}

// losslessWebP is the header of a lossless WebP of w × h, as much as its
// size needs.
func losslessWebP(w, h int) string {
	var b bytes.Buffer
	b.WriteString("RIFF")
	_ = binary.Write(&b, binary.LittleEndian, uint32(4+8+5))
	b.WriteString("WEBPVP8L")
	_ = binary.Write(&b, binary.LittleEndian, uint32(5))
	b.WriteByte(0x2f)
	bits := uint32(w-1) | uint32(h-1)<<14
	_ = binary.Write(&b, binary.LittleEndian, bits)
	b.WriteByte(0)
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

// A block of media is counted as its vendor charges for it, from the
// image's size or the PDF's pages, never as the text of its base64; what
// the block holds besides is counted as text.
// mp3Base64 is frames frames of MPEG-1 Layer III at 128 kbit/s, 44.1
// kHz, stereo (1,152 samples, 417 bytes each) after an ID3v2 tag, the
// first a Xing header's with the count of frames (a variable bit
// rate's) when xing is not 0: its base64.
func mp3Base64(frames, xing int) string {
	var b bytes.Buffer
	b.Write([]byte{'I', 'D', '3', 4, 0, 0, 0, 0, 1, 0}) // a tag of 128 bytes
	b.Write(make([]byte, 128))
	for i := range frames {
		frame := make([]byte, 417)
		copy(frame, []byte{0xff, 0xfb, 0x90, 0x00})
		if i == 0 && xing > 0 {
			copy(frame[36:], "Xing")
			binary.BigEndian.PutUint32(frame[40:], 1) // frames given
			binary.BigEndian.PutUint32(frame[44:], uint32(xing))
		}
		b.Write(frame)
	}
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

func TestRawTokens(t *testing.T) {
	enc, err := tokens.Get(tokens.O200kBase)
	if err != nil {
		t.Fatal(err)
	}
	count := enc.Count
	wide := pictest.NoisePNGBase64(1000, 500)
	big := pictest.NoisePNGBase64(3000, 2000)
	pdf := base64.StdEncoding.EncodeToString([]byte("%PDF-1.4\n1 0 obj << /Type /Pages /Kids [2 0 R 3 0 R 4 0 R] /Count 3 >> endobj\n" +
		"2 0 obj << /Type /Page /Parent 1 0 R >> endobj\n3 0 obj << /Type/Page /Parent 1 0 R >> endobj\n4 0 obj << /Type /Page >> endobj\n%%EOF\n"))
	result := `{"type": "tool_result", "tool_use_id": "toolu_01", "content": [{"type": "text", "text": "the screenshot"}, ` +
		`{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "` + wide + `"}}]}`
	cases := []struct {
		name     string
		raw      string
		min, max int // the media's tokens, and the count of what is not media: within a few tokens
	}{
		// 1000 × 500 / 750 = 667.
		{"anthropic image", `{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "` + wide + `"}}`, 667, 667 + 25},
		// Scaled to 1568 × 1045, over 1,600: 1,600.
		{"anthropic large image", `{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "` + big + `"}}`, 1600, 1600 + 25},
		{"anthropic image by url", `{"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}`, 1600, 1600 + 25},
		{"anthropic JPEG, its size past 80 KB", `{"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "` + exifJPEG(t, 750, 300) + `"}}`, 300, 300 + 25},
		{"anthropic WebP", `{"type": "image", "source": {"type": "base64", "media_type": "image/webp", "data": "` + losslessWebP(1500, 500) + `"}}`, 1000, 1000 + 25},
		{"anthropic PDF of three pages", `{"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "` + pdf + `"}}`, 9000, 9000 + 25},
		{"a tool result with text and an image", result, 667 + 2, 667 + 40},
		// OpenAI: 1000 × 500 is 2 × 1 tiles: 85 + 340.
		{"openai image_url", `{"type": "image_url", "image_url": {"url": "data:image/png;base64,` + wide + `"}}`, 425, 425 + 25},
		{"openai image_url, low detail", `{"type": "image_url", "image_url": {"url": "data:image/png;base64,` + wide + `", "detail": "low"}}`, 85, 85 + 25},
		// 3000 × 2000 fits 2048 × 1365, its short side 768: 1152 × 768, 3 × 2 tiles.
		{"responses input_image", `{"type": "input_image", "image_url": "data:image/png;base64,` + big + `", "detail": "high"}`, 85 + 6*170, 85 + 6*170 + 25},
		{"responses input_file", `{"type": "input_file", "filename": "a.pdf", "file_data": "data:application/pdf;base64,` + pdf + `"}`, 9000, 9000 + 25},
		{"openai file", `{"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,` + pdf + `"}}`, 9000, 9000 + 25},
		// A computer call's screenshot: 1000 × 500 in high detail.
		{"responses computer_screenshot", `{"type": "computer_call_output", "call_id": "call_1", "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,` + wide + `"}}`, 425, 425 + 40},
		// Audio at 10 tokens a second: 12 seconds of WAV (as text, its
		// 512 KB of base64 are about 350,000 tokens), 26 of MP3 by its
		// Xing header, 2.6 of MP3 by its size at its bit rate.
		{"openai input_audio, WAV", `{"type": "input_audio", "input_audio": {"data": "` + pictest.NoiseWAVBase64(12, 16000, 16) + `", "format": "wav"}}`, 120, 120 + 25},
		{"openai input_audio, MP3 with a Xing header", `{"type": "input_audio", "input_audio": {"data": "` + mp3Base64(10, 1000) + `", "format": "mp3"}}`, 262, 262 + 25},
		{"openai input_audio, MP3 at a constant rate", `{"type": "input_audio", "input_audio": {"data": "` + mp3Base64(100, 0) + `", "format": "mp3"}}`, 27, 27 + 25},
		// Not read: its size at 2,000 bytes a second, 24,000 bytes: 12 s.
		{"openai input_audio, not WAV nor MP3", `{"type": "input_audio", "input_audio": {"data": "` + base64.StdEncoding.EncodeToString(make([]byte, 24000)) + `", "format": "wav"}}`, 120, 120 + 25},
		// Not media: counted as text.
		{"a document of text", `{"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "the quartermaster counts the crates"}}`, 10, 40},
		{"a thinking block", `{"type": "thinking", "thinking": "look first", "signature": "abc"}`, 5, 25},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !json.Valid([]byte(c.raw)) {
				t.Fatal("the case is not JSON")
			}
			n := window.RawTokens([]byte(c.raw), count)
			if n < c.min || n > c.max {
				t.Errorf("%d tokens, want %d to %d (as text: %d)", n, c.min, c.max, count(c.raw))
			}
		})
	}
	// An image whose data is no image is counted at the vendor's most.
	bad := fmt.Sprintf(`{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": %q}}`, base64.StdEncoding.EncodeToString([]byte("not a picture")))
	if n := window.RawTokens([]byte(bad), count); n < 1600 || n > 1625 {
		t.Errorf("an image that does not decode: %d tokens, want 1,600 and its framing", n)
	}
}

// ShowMedia gives a text of a raw block with each piece of media in
// base64 as a placeholder (what it is, its size, how to read it whole),
// and the rest of the block as it is, in every vendor's shape; media
// given by URL, and blocks holding none, are shown as they are.
func TestShowMedia(t *testing.T) {
	shot := pictest.NoisePNGBase64(300, 200)
	pdf := base64.StdEncoding.EncodeToString([]byte("%PDF-1.4\n1 0 obj << /Type /Pages /Kids [2 0 R 3 0 R] /Count 2 >> endobj\n" +
		"2 0 obj << /Type /Page >> endobj\n3 0 obj << /Type /Page >> endobj\n%%EOF\n"))
	sum := func(b64 string) string { s := sha256.Sum256([]byte(b64)); return hex.EncodeToString(s[:4]) }
	img := fmt.Sprintf("[image: image/png, 300×200, %d KB of base64, sha256 %s; engram show abc]", (len(shot)+500)/1000, sum(shot))
	doc := fmt.Sprintf("[document: application/pdf, 2 pages, %d B of base64, sha256 %s; engram show abc]", len(pdf), sum(pdf))
	wav := pictest.NoiseWAVBase64(2.5, 8000, 8)
	sound := fmt.Sprintf("[audio: audio/wav, 2.5 s, %d KB of base64, sha256 %s; engram show abc]", (len(wav)+500)/1000, sum(wav))
	for _, c := range []struct{ name, raw, want string }{
		{"anthropic tool result",
			`{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"the page \"/login\"\n"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + shot + `"}}]}`,
			`{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"the page \"/login\"\n"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + img + `"}}]}`},
		{"anthropic image, its slashes escaped",
			`{"source": {"data": "` + strings.ReplaceAll(shot, "/", `\/`) + `", "media_type": "image/png", "type": "base64"}, "type": "image"}`,
			`{"source": {"data": "` + img + `", "media_type": "image/png", "type": "base64"}, "type": "image"}`},
		{"the same image twice",
			`[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + shot + `"}},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + shot + `"}}]`,
			`[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + img + `"}},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + img + `"}}]`},
		{"anthropic PDF",
			`{"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "` + pdf + `"}, "title": "spec"}`,
			`{"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "` + doc + `"}, "title": "spec"}`},
		{"openai image_url",
			`{"type": "image_url", "image_url": {"url": "data:image/png;base64,` + shot + `", "detail": "high"}}`,
			`{"type": "image_url", "image_url": {"url": "` + img + `", "detail": "high"}}`},
		{"responses input_image", `{"type": "input_image", "image_url": "data:image/png;base64,` + shot + `"}`,
			`{"type": "input_image", "image_url": "` + img + `"}`},
		{"openai file", `{"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,` + pdf + `"}}`,
			`{"type": "file", "file": {"filename": "a.pdf", "file_data": "` + doc + `"}}`},
		{"responses input_file", `{"type": "input_file", "filename": "a.pdf", "file_data": "data:application/pdf;base64,` + pdf + `"}`,
			`{"type": "input_file", "filename": "a.pdf", "file_data": "` + doc + `"}`},
		{"responses computer_screenshot", `{"type": "computer_screenshot", "image_url": "data:image/png;base64,` + shot + `"}`,
			`{"type": "computer_screenshot", "image_url": "` + img + `"}`},
		{"openai input_audio", `{"type": "input_audio", "input_audio": {"data": "` + wav + `", "format": "wav"}}`,
			`{"type": "input_audio", "input_audio": {"data": "` + sound + `", "format": "wav"}}`},
		{"an image by url", `{"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}`,
			`{"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}`},
		{"a thinking block", `{"type": "thinking", "thinking": "an image of type \"image\"", "signature": "c2ln"}`,
			`{"type": "thinking", "thinking": "an image of type \"image\"", "signature": "c2ln"}`},
		{"not JSON", `{"type": "image", "source": {`, `{"type": "image", "source": {`},
	} {
		t.Run(c.name, func(t *testing.T) {
			raw := []byte(c.raw)
			got := window.ShowMedia(raw, "engram show abc")
			if got != c.want {
				t.Errorf("ShowMedia:\n got %.400s\nwant %.400s", got, c.want)
			}
			if string(raw) != c.raw {
				t.Error("ShowMedia changed the block")
			}
			if got != c.raw && !json.Valid([]byte(got)) {
				t.Errorf("the text is not JSON: %.400s", got)
			}
		})
	}
}

// TestMediaEntities: the names a window notes of a message for its
// markers come from what a tool result says, not from the base64 of the
// picture it holds (whose words with a / would pass for paths).
func TestMediaEntities(t *testing.T) {
	ctx := context.Background()
	m := manager(t, filepath.Join(t.TempDir(), "engram.db"))
	key := store.WindowKey{SessionID: "s", AgentID: "a"}
	if _, err := m.Open(ctx, key, window.OpenOptions{Limit: 40000}); err != nil {
		t.Fatal(err)
	}
	shot := pictest.NoisePNGBase64(200, 150)
	raw := `{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"web/login.html as rendered"},` +
		`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + shot + `"}}]}`
	if _, err := m.Append(ctx, key, []window.Message{
		{Role: window.RoleAssistant, Blocks: []window.Block{{Type: window.BlockToolUse, ID: "t1", Name: "screenshot", Input: []byte(`{}`)}}},
		{Role: window.RoleUser, Blocks: []window.Block{{Type: window.BlockToolResult, ToolUseID: "t1", Raw: []byte(raw)}}},
	}); err != nil {
		t.Fatal(err)
	}
	items, err := m.Context(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := items[1].Message.Entities
	if !slices.Contains(got, "web/login.html") {
		t.Errorf("entities %v: not the page the tool result names", got)
	}
	for _, e := range got {
		if strings.Contains(shot, e) && len(e) > 8 {
			t.Errorf("entities %v: %q is the picture's base64", got, e)
		}
	}
}

// TestMedia_Picture: an image found in a block decodes to its bytes, with
// its type read from its header, in each vendor's shape (a data: URL, a
// / escaped); a PDF, an image in a format not every vendor takes and
// base64 that does not decode are no picture.
func TestMedia_Picture(t *testing.T) {
	png := pictest.NoisePNG(20, 10)
	b64 := base64.StdEncoding.EncodeToString(png)
	escaped := strings.ReplaceAll(b64, "/", `\/`)
	bmp := base64.StdEncoding.EncodeToString(append([]byte("BM"), make([]byte, 60)...))
	for _, c := range []struct {
		name, block string
		want        []byte
		typ         string
	}{
		{"Anthropic", `{"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"` + b64 + `"}}`, png, "image/png"},
		{"Escaped", `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + escaped + `"}}`, png, "image/png"},
		{"OpenAI", `{"type":"image_url","image_url":{"url":"data:image/png;base64,` + b64 + `"}}`, png, "image/png"},
		{"Responses", `{"type":"input_image","image_url":"data:image/png;base64,` + b64 + `"}`, png, "image/png"},
		{"BMP", `{"type":"image","source":{"type":"base64","media_type":"image/bmp","data":"` + bmp + `"}}`, nil, ""},
		{"NotBase64", `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"not base64!"}}`, nil, ""},
		{"PDF", `{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"` + b64 + `"}}`, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			ms := window.FindMedia([]byte(c.block))
			if len(ms) != 1 {
				t.Fatalf("FindMedia: %d pieces", len(ms))
			}
			data, typ, err := ms[0].Picture([]byte(c.block))
			if c.want == nil {
				if err == nil {
					t.Errorf("Picture: %s of %d bytes, want an error", typ, len(data))
				}
				return
			}
			if err != nil || typ != c.typ || !bytes.Equal(data, c.want) {
				t.Errorf("Picture: %s of %d bytes, %v; want %s of %d", typ, len(data), err, c.typ, len(c.want))
			}
		})
	}
}

// TestMedia_Tokens: a picture costs the dearer of the vendors' rates, a
// PDF its pages.
func TestMedia_Tokens(t *testing.T) {
	for _, c := range []struct {
		m    window.Media
		want int
	}{
		{window.Media{Kind: "image", Width: 40, Height: 30}, 255},                              // OpenAI's one tile over Anthropic's 2
		{window.Media{Kind: "image", Width: 1000, Height: 1000}, 1334},                         // Anthropic's 1,000,000/750 over OpenAI's 765
		{window.Media{Kind: "image"}, 1600},                                                    // size unknown: Anthropic's most
		{window.Media{Kind: "document", Pages: 2}, 6000},                                       // 3,000 a page
		{window.Media{Kind: "document", Size: base64.StdEncoding.EncodedLen(120 << 10)}, 9000}, // pages from 120 KB
		{window.Media{Kind: "audio", Length: 4500 * time.Millisecond}, 45},                     // 10 a second
		{window.Media{Kind: "audio", Size: base64.StdEncoding.EncodedLen(30000)}, 150},         // 15 s at 2,000 bytes a second
	} {
		if got := c.m.Tokens(); got != c.want {
			t.Errorf("%+v: %d tokens, want %d", c.m, got, c.want)
		}
	}
}
