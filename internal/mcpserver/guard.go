package mcpserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/engramhq/engram/internal/api"
)

// MaxResultBytes bounds a tool result: its text and its structured
// content (as JSON) together. About 25,000 tokens, what Claude Code takes
// from an MCP tool by default. The operations' own limits (internal/api
// ranges, token budgets) keep results well under it; this is the final
// guard, for what they cannot foresee, such as a whole large file.
//
// A result's pictures are not text: a model is charged for one by its
// size in pixels (at most 1,600 tokens with Anthropic, which is what
// Claude Code counts for it against its limit), not by its bytes, so
// they have a cap of their own, DefaultMaxPictureBytes.
const MaxResultBytes = 96 << 10

// DefaultMaxPictureBytes bounds the pictures of a tool result together,
// as base64 (Options.MaxPictureBytes): a few screenshots of a large
// screen, well under the 32 MB of a request. One picture may be over the
// 5 MB Anthropic takes for one image; Claude Code does not pass it on as
// it is, but scales it to fit 2,000 pixels a side and re-encodes it as a
// JPEG of at most 500 KiB (Codex passes a picture of up to 2,048 pixels a
// side to OpenAI byte for byte, whatever its size).
const DefaultMaxPictureBytes = 8 << 20

// narrow says, per tool, how to ask for less.
var narrow = map[string]string{
	"search":           "ask for fewer places (limit) or spans, or narrow by session, types or paths",
	"search_history":   "ask for fewer results (max_results) or narrow by content_type or session",
	"get_file":         "read a range of lines (start_line, end_line)",
	"retrieve_context": "lower max_tokens, or ask for fewer content_ids",
	"get_turn_range":   "lower max_tokens, or ask for fewer turns",
	"prefetch":         "lower the budget",
	"recall":           "lower the budget, or the query's limit",
}

// MaxErrorBytes bounds a tool error's text: an error that quotes the
// call's input (a path, a session) would otherwise send back all of a
// megabyte argument.
const MaxErrorBytes = 4 << 10

// guard refuses a tool call whose arguments give a member twice in one
// object, replaces a tool result over MaxResultBytes by a tool error that
// tells the model how to narrow the call, and cuts a tool error's text to
// MaxErrorBytes.
//
// The SDK decodes a call's arguments with encoding/json, which keeps the
// last value of a member given twice and drops the others without a word
// (record with "content" twice stored the second alone): such a call is
// a tool error, as the JSON API refuses such a body.
func (s *Server) guard(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if ctr, ok := req.(*mcp.CallToolRequest); ok && method == "tools/call" && ctr.Params != nil {
			if name, at := api.DuplicateName(ctr.Params.Arguments); at >= 0 {
				var out mcp.CallToolResult
				out.SetError(fmt.Errorf("the arguments give %q twice in one object (again at byte %d): one of its values would be lost; give it once", name, at))
				return &out, nil
			}
		}
		res, err := next(ctx, method, req)
		r, ok := res.(*mcp.CallToolResult)
		if method != "tools/call" || err != nil || !ok || r == nil {
			return res, err
		}
		if r.IsError {
			for _, c := range r.Content {
				if tc, ok := c.(*mcp.TextContent); ok && len(tc.Text) > MaxErrorBytes {
					n := MaxErrorBytes
					for n > 0 && !utf8.RuneStart(tc.Text[n]) {
						n--
					}
					tc.Text = fmt.Sprintf("%s… (%d bytes more of the error left out)", tc.Text[:n], len(tc.Text)-n)
				}
			}
			return res, err
		}
		size, pics := resultBytes(r), pictureBytes(r)
		if size <= MaxResultBytes && pics <= s.maxPictureBytes() {
			return res, err
		}
		name := ""
		if ctr, ok := req.(*mcp.CallToolRequest); ok && ctr.Params != nil {
			name = ctr.Params.Name
		}
		how := narrow[name]
		if how == "" {
			how = "narrow the call"
		}
		var out mcp.CallToolResult
		if size <= MaxResultBytes {
			s.log.Info("tool result's pictures over the cap", "tool", name, "bytes", pics, "cap", s.maxPictureBytes())
			out.SetError(fmt.Errorf("the result's pictures are %d KB, over the %d KB a tool result's pictures may take: %s", (pics+1023)/1024, s.maxPictureBytes()/1024, how))
			return &out, nil
		}
		s.log.Info("tool result over the cap", "tool", name, "bytes", size, "cap", MaxResultBytes)
		out.SetError(fmt.Errorf("the result is %d KB, over the %d KB a tool result may take: %s", (size+1023)/1024, MaxResultBytes/1024, how))
		return &out, nil
	}
}

// maxPictureBytes is the cap on a result's pictures.
func (s *Server) maxPictureBytes() int {
	if s.opts.MaxPictureBytes > 0 {
		return s.opts.MaxPictureBytes
	}
	return DefaultMaxPictureBytes
}

// pictureBytes is the size of a result's pictures, as base64.
func pictureBytes(r *mcp.CallToolResult) int {
	n := 0
	for _, c := range r.Content {
		if ic, ok := c.(*mcp.ImageContent); ok {
			n += base64.StdEncoding.EncodedLen(len(ic.Data))
		}
	}
	return n
}

// resultBytes is the size of a result's text and structured content.
func resultBytes(r *mcp.CallToolResult) int {
	n := 0
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			n += len(tc.Text)
		}
	}
	switch sc := r.StructuredContent.(type) {
	case nil:
	case json.RawMessage: // what the SDK sets for typed tools
		n += len(sc)
	default:
		if b, err := json.Marshal(sc); err == nil {
			n += len(b)
		}
	}
	return n
}
