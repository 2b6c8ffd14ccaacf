// Package pictest makes pictures for tests: PNGs of noise, which PNG
// cannot compress, so that a picture is as large as a photo or a
// screenshot of a busy page, not a drawing's few bytes.
package pictest

import (
	"bytes"
	"encoding/base64"
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
