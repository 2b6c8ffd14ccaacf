package proxy

import (
	"strings"
	"testing"
)

// An Anthropic stream that names a negative or huge content block index
// (no model's, but an upstream's bytes all the same) is read without a
// panic and without growing a list to the index; the blocks it names
// rightly are kept.
func TestSSEAssembler_BlockIndex(t *testing.T) {
	a := &sseAssembler{}
	a.write([]byte(`data: {"type":"message_start","message":{"id":"msg_1","role":"assistant","content":[]}}
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"kept"}}
data: {"type":"content_block_start","index":-1,"content_block":{"type":"text","text":""}}
data: {"type":"content_block_delta","index":-1,"delta":{"type":"text_delta","text":"negative"}}
data: {"type":"content_block_start","index":5000000,"content_block":{"type":"text","text":"huge"}}
data: {"type":"message_stop"}
`))
	if len(a.blocks) > maxBlockIndex+1 {
		t.Errorf("%d blocks after a start at index 5,000,000, want at most %d", len(a.blocks), maxBlockIndex+1)
	}
	msg, id := a.message()
	if id != "msg_1" || !strings.Contains(string(msg), `"text":"kept"`) || strings.Contains(string(msg), "negative") || strings.Contains(string(msg), "huge") {
		t.Errorf("message %s (id %q), want the block at index 0 only", msg, id)
	}
}

// FuzzAssemblers: whatever an upstream streams, the readers that rebuild
// its answer do not panic.
func FuzzAssemblers(f *testing.F) {
	f.Add([]byte("data: {\"type\":\"content_block_delta\",\"index\":-1,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n"))
	f.Add([]byte("data: {\"type\":\"content_block_start\",\"index\":-3,\"content_block\":{\"type\":\"tool_use\"}}\n"))
	f.Add([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":-1,\"function\":{\"name\":\"f\"}}]}}]}\n"))
	f.Add([]byte("data: {\"type\":\"response.output_text.delta\",\"output_index\":-1,\"delta\":\"x\"}\n"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		for _, a := range []assembler{&sseAssembler{}, &chatStreamAssembler{}, &responsesStreamAssembler{items: map[int]*outputItem{}}} {
			a.write(stream)
			a.message()
		}
	})
}
