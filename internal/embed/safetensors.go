package embed

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// tensor is one tensor of a safetensors file.
type tensor struct {
	DType   string   `json:"dtype"`
	Shape   []int64  `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
	data    []byte
}

// maxSafetensorsHeader bounds the JSON header, as the format's reference
// implementation does (100 MB).
const maxSafetensorsHeader = 100 << 20

// readSafetensors parses a safetensors file: an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range,
// then the tensors' bytes.
func readSafetensors(b []byte) (map[string]*tensor, error) {
	if len(b) < 8 {
		return nil, errors.New("safetensors: file too short")
	}
	n := binary.LittleEndian.Uint64(b)
	if n > maxSafetensorsHeader || n > uint64(len(b)-8) {
		return nil, fmt.Errorf("safetensors: header of %d bytes does not fit the file", n)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &raw); err != nil {
		return nil, fmt.Errorf("safetensors: header: %w", err)
	}
	data := b[8+n:]
	out := map[string]*tensor{}
	for name, msg := range raw {
		if name == "__metadata__" {
			continue
		}
		t := &tensor{}
		if err := json.Unmarshal(msg, t); err != nil {
			return nil, fmt.Errorf("safetensors: tensor %s: %w", name, err)
		}
		start, end := t.Offsets[0], t.Offsets[1]
		if start < 0 || end < start || end > int64(len(data)) {
			return nil, fmt.Errorf("safetensors: tensor %s: bytes %d-%d outside the %d bytes of data", name, start, end, len(data))
		}
		count := int64(1)
		for _, d := range t.Shape {
			if d < 0 || d > math.MaxInt32 {
				return nil, fmt.Errorf("safetensors: tensor %s: bad shape %v", name, t.Shape)
			}
			count *= d
		}
		size := dtypeSize(t.DType)
		if size == 0 {
			return nil, fmt.Errorf("safetensors: tensor %s: unsupported dtype %s", name, t.DType)
		}
		if count*size != end-start {
			return nil, fmt.Errorf("safetensors: tensor %s: shape %v of %s needs %d bytes, has %d", name, t.Shape, t.DType, count*size, end-start)
		}
		t.data = data[start:end]
		out[name] = t
	}
	return out, nil
}

func dtypeSize(dtype string) int64 {
	switch dtype {
	case "F64", "I64":
		return 8
	case "F32", "I32":
		return 4
	case "F16", "BF16":
		return 2
	case "I8", "U8":
		return 1
	}
	return 0
}

// floats decodes a tensor of floating-point or 8-bit integer values.
func (t *tensor) floats() ([]float32, error) {
	size := dtypeSize(t.DType)
	out := make([]float32, int64(len(t.data))/size)
	for i := range out {
		b := t.data[int64(i)*size:]
		switch t.DType {
		case "F64":
			out[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(b)))
		case "F32":
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b))
		case "F16":
			out[i] = half(binary.LittleEndian.Uint16(b))
		case "BF16":
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16)
		case "I8":
			out[i] = float32(int8(b[0]))
		case "U8":
			out[i] = float32(b[0])
		default:
			return nil, fmt.Errorf("dtype %s is not a number type", t.DType)
		}
	}
	return out, nil
}

// ints decodes a tensor of integers.
func (t *tensor) ints() ([]int64, error) {
	switch t.DType {
	case "I32":
		out := make([]int64, len(t.data)/4)
		for i := range out {
			out[i] = int64(int32(binary.LittleEndian.Uint32(t.data[4*i:])))
		}
		return out, nil
	case "I64":
		out := make([]int64, len(t.data)/8)
		for i := range out {
			out[i] = int64(binary.LittleEndian.Uint64(t.data[8*i:]))
		}
		return out, nil
	}
	return nil, fmt.Errorf("dtype %s is not an integer type", t.DType)
}

// half converts an IEEE 754 half-precision value.
func half(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0 && frac == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		f := float32(frac) / 1024 / 16384
		if sign != 0 {
			f = -f
		}
		return f
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | frac<<13)
}
