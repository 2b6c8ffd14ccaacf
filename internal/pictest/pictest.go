// Package pictest makes pictures for tests: PNGs of noise, which PNG
// cannot compress, so that a picture is as large as a photo or a
// screenshot of a busy page, not a drawing's few bytes; and, for the same
// reason, recordings of noise (WAVs).
package pictest

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"image"
	"image/png"
	"math/rand"
)

// NoisePNG is a w × h PNG of noise; the same for the same size.
func NoisePNG(w, h int) []byte {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	rand.New(rand.NewSource(int64(w * h))).Read(img.Pix)
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		panic(err) // a bytes.Buffer takes every write
	}
	return b.Bytes()
}

// NoisePNGBase64 is NoisePNG in base64, as a vendor's block holds it.
func NoisePNGBase64(w, h int) string {
	return base64.StdEncoding.EncodeToString(NoisePNG(w, h))
}

// NoiseWAVBase64 is seconds of noise as a mono WAV at rate samples a
// second of bits, in base64, with a LIST chunk of an odd size (padded,
// as RIFF pads it) between its format and its data, as encoders put
// their tags there; the same for the same arguments.
func NoiseWAVBase64(seconds float64, rate, bits int) string {
	data := make([]byte, int(seconds*float64(rate))*bits/8)
	rand.New(rand.NewSource(int64(len(data)))).Read(data)
	const list = "INFOISFT\x05\x00\x00\x00engr\x00" // 17 bytes
	var b bytes.Buffer
	le := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	b.WriteString("RIFF")
	le(uint32(4 + 8 + 16 + 8 + len(list) + 1 + 8 + len(data)))
	b.WriteString("WAVEfmt ")
	le(uint32(16))
	le(uint16(1))               // PCM
	le(uint16(1))               // mono
	le(uint32(rate))            // samples a second
	le(uint32(rate * bits / 8)) // bytes a second
	le(uint16(bits / 8))        // bytes a sample
	le(uint16(bits))
	b.WriteString("LIST")
	le(uint32(len(list)))
	b.WriteString(list + "\x00")
	b.WriteString("data")
	le(uint32(len(data)))
	b.Write(data)
	return base64.StdEncoding.EncodeToString(b.Bytes())
}
