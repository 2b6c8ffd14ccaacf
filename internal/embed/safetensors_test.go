package embed

import (
	"encoding/binary"
	"encoding/json"
	"sort"
)

// writeSafetensors encodes tensors, sorted by name; for tests and tools.
func writeSafetensors(tensors map[string]struct {
	DType string
	Shape []int64
	Data  []byte
}) []byte {
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	header := map[string]any{}
	var data []byte
	for _, n := range names {
		t := tensors[n]
		header[n] = map[string]any{"dtype": t.DType, "shape": t.Shape, "data_offsets": []int{len(data), len(data) + len(t.Data)}}
		data = append(data, t.Data...)
	}
	h, _ := json.Marshal(header)
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	return append(append(out, h...), data...)
}
