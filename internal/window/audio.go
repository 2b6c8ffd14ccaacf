package window

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"time"
)

// audioTokens is what audio of length costs a model, at
// audioTokensPerSecond; audio whose length is not known (0) is estimated
// from its base64's size, at audioBytesPerSecond.
func audioTokens(length time.Duration, b64Size int) int {
	if length <= 0 {
		length = time.Duration(float64(b64Size*3/4) / audioBytesPerSecond * float64(time.Second))
	}
	return max(1, int(math.Ceil(length.Seconds()*audioTokensPerSecond)))
}

// audioLength reads the length of the audio in b64 from its header: a
// WAV's (its data's size over its byte rate) or an MP3's (its frames, from
// a Xing or Info header, or its size over the first frame's bit rate),
// the two formats OpenAI takes; 0 when it cannot be read.
func audioLength(b64 string) time.Duration {
	n := min(len(b64), 64<<10) &^ 3
	head, err := base64.StdEncoding.DecodeString(b64[:n])
	if err != nil {
		return 0
	}
	size := base64.StdEncoding.DecodedLen(len(b64))
	if d := wavLength(head, size); d > 0 {
		return d
	}
	return mp3Length(head, size)
}

// wavLength reads a RIFF WAVE header: the fmt chunk's byte rate and the
// data chunk's size (or, for a stream that left it unset, the rest of
// the file's size).
func wavLength(head []byte, size int) time.Duration {
	if len(head) < 12 || string(head[:4]) != "RIFF" || string(head[8:12]) != "WAVE" {
		return 0
	}
	rate := 0
	for p := 12; p+8 <= len(head); {
		id, n := string(head[p:p+4]), int(binary.LittleEndian.Uint32(head[p+4:p+8]))
		body := p + 8
		switch id {
		case "fmt ":
			if body+12 <= len(head) {
				rate = int(binary.LittleEndian.Uint32(head[body+8 : body+12]))
			}
		case "data":
			if rate <= 0 {
				return 0
			}
			if n <= 0 || n == math.MaxUint32 || body+n > size {
				n = size - body
			}
			return time.Duration(float64(n) / float64(rate) * float64(time.Second))
		}
		p = body + n + n&1 // chunks are padded to an even size
	}
	return 0
}

// mp3Bitrates are MPEG audio Layer III's bit rates in kbit/s, by the
// header's index: MPEG-1's, then MPEG-2 and 2.5's.
var mp3Bitrates = [2][15]int{
	{0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320},
	{0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160},
}

// mp3SampleRates are the sample rates by the header's index, for MPEG-1;
// MPEG-2's are half, MPEG-2.5's a quarter.
var mp3SampleRates = [3]int{44100, 48000, 32000}

// mp3Length finds an MP3's first frame, past an ID3v2 tag, and reads its
// length: from the frame count of a Xing or Info header when the first
// frame holds one (a variable bit rate's), else from the file's size at
// the first frame's bit rate.
func mp3Length(head []byte, size int) time.Duration {
	p := 0
	if len(head) >= 10 && string(head[:3]) == "ID3" {
		tag := int(head[6]&0x7f)<<21 | int(head[7]&0x7f)<<14 | int(head[8]&0x7f)<<7 | int(head[9]&0x7f)
		p = 10 + tag
		if head[5]&0x10 != 0 {
			p += 10 // a footer
		}
	}
	for ; p+4 <= len(head); p++ {
		if head[p] != 0xff || head[p+1]&0xe0 != 0xe0 {
			continue
		}
		version, layer := head[p+1]>>3&3, head[p+1]>>1&3
		bi, si := int(head[p+2]>>4), int(head[p+2]>>2&3)
		if version == 1 || layer != 1 || bi == 0 || bi == 15 || si == 3 {
			continue // reserved, not Layer III, or free format
		}
		mpeg1 := version == 3
		table, rate := 1, mp3SampleRates[si]/2
		samples := 576
		if mpeg1 {
			table, rate, samples = 0, mp3SampleRates[si], 1152
		}
		if version == 0 {
			rate /= 2 // MPEG-2.5
		}
		if frames := xingFrames(head[p:], mpeg1, head[p+3]>>6 == 3); frames > 0 {
			return time.Duration(float64(frames*samples) / float64(rate) * float64(time.Second))
		}
		bitrate := mp3Bitrates[table][bi] * 1000
		return time.Duration(float64(size-p) * 8 / float64(bitrate) * float64(time.Second))
	}
	return 0
}

// xingFrames reads the frame count of the Xing or Info header a first
// frame may hold after its side information; 0 when there is none.
func xingFrames(frame []byte, mpeg1, mono bool) int {
	off := 4 + 17
	switch {
	case mpeg1 && !mono:
		off = 4 + 32
	case !mpeg1 && mono:
		off = 4 + 9
	}
	if off+12 > len(frame) {
		return 0
	}
	if tag := string(frame[off : off+4]); tag != "Xing" && tag != "Info" {
		return 0
	}
	if binary.BigEndian.Uint32(frame[off+4:off+8])&1 == 0 {
		return 0 // no frame count
	}
	return int(binary.BigEndian.Uint32(frame[off+8 : off+12]))
}
