package window

import (
	"encoding/json"
	"strings"
)

// Readable is the block's text for a reader that reads what a message
// says (the digest, a summary's quote, a handoff's state): a text block's
// text, a tool result's output. A text block or tool result kept in its
// vendor's form (Block.Raw: a result whose content is an array of content
// blocks or parts, as MCP tools' results come, or a block with fields
// the typed form lacks, such as cache_control) gives the text of its
// text blocks and parts, joined with "\n", each piece of media given in
// base64 as its Placeholder and media given by URL or file left out:
// never base64. Any other block gives its Text (a call's is "").
func (b *Block) Readable() string { return readable(b, true) }

// readable is b's text for a reader, its media as placeholders or, when
// media is false, left out.
//
// The vendors' forms it reads, besides the media pieceOf reads:
//
//	Anthropic: {"type": "tool_result", "content": "…" or [blocks]}
//	           {"type": "text", "text": "…"}
//	           {"type": "document", "source": {"type": "text", "data": "…"} or {"type": "content", "content": [blocks]}}
//	           {"type": "search_result", "content": [blocks]}
//	OpenAI:    [{"type": "text", "text": "…"}, …], a tool message's parts
//	Responses: {"type": "function_call_output", "output": "…" or [parts]}
//	           {"type": "input_text" or "output_text", "text": "…"}
func readable(b *Block, media bool) string {
	if len(b.Raw) == 0 || b.Type != BlockText && b.Type != BlockToolResult {
		return b.Text
	}
	var v any
	if err := json.Unmarshal(b.Raw, &v); err != nil {
		return "" // Validate and the wire readers keep no such block
	}
	var out []string
	texts(v, media, &out)
	return strings.Join(out, "\n")
}

// texts appends the texts of v, a vendor's block, parts or content, to
// out, in order; an object's fields are read by name, never by ranging
// over the map, so that the order is the block's.
func texts(v any, media bool, out *[]string) {
	switch v := v.(type) {
	case string:
		*out = append(*out, v)
	case []any:
		for _, x := range v {
			texts(x, media, out)
		}
	case map[string]any:
		if p, ok := pieceOf(v); ok {
			if media && p.payload != "" {
				*out = append(*out, describe(p.kind, p.typ, p.b64).Placeholder(""))
			}
			return
		}
		switch v["type"] {
		case "text", "input_text", "output_text":
			if s, ok := v["text"].(string); ok {
				*out = append(*out, s)
			}
			return
		case "document": // of text: pieceOf reads the others
			src, _ := v["source"].(map[string]any)
			switch src["type"] {
			case "text":
				if s, ok := src["data"].(string); ok {
					*out = append(*out, s)
				}
			case "content":
				texts(src["content"], media, out)
			}
			return
		}
		for _, k := range []string{"content", "output"} {
			if x, ok := v[k]; ok {
				texts(x, media, out)
			}
		}
	}
}
