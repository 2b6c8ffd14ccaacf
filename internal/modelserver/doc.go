// Package modelserver is a scripted model server speaking the Anthropic
// Messages API and OpenAI's Responses and Chat Completions APIs, for tests
// that run a real agent harness (Claude Code, Codex) or client offline,
// and for anything else in engram that needs a model to talk to (the
// proxy, benchmarks).
//
// A test lists the replies of the main conversation in order (text,
// tool calls, or a func of the request), starts the server and points the
// harness at it (ANTHROPIC_BASE_URL=srv.URL()):
//
//	srv := modelserver.Start(modelserver.Options{Main: []modelserver.Step{
//		modelserver.Call("Read", map[string]any{"file_path": path}),
//		modelserver.Say("done"),
//	}})
//	defer srv.Close()
//	// ... run the harness ...
//	if err := srv.Err(); err != nil {
//		t.Fatal(err)
//	}
//	reqs := srv.Requests(modelserver.KindMain)
//
// The server validates every request as the API does (required fields,
// known content block types, tool_use answered by tool_result in the next
// message, credentials) and answers a refused one with the API's error
// JSON; Err reports them. It records every request (headers without
// credentials, raw body, decoding) for assertions. usage.input_tokens is
// counted from the request with engram's tokenizer (o200k_base), an
// approximation of Anthropic's own, so a harness compacts when its context
// really is large.
//
// For benchmarks: a Response's Pace spaces a streamed answer's events, as
// a model generating slowly (a stream that stays open, a first event well
// before the rest); Options.Forget keeps no record of the requests, which
// a long run of large ones would grow without bound.
//
// Harnesses send side requests besides the conversation: Classify tells
// them apart (see its rules) and Options.Side answers them, DefaultSide by
// default. A main request past the end of the script is answered 500 with
// a message naming it.
//
// The same Server answers POST /v1/responses, the Responses API as Codex
// 0.171 speaks it (NewCodex points the CLI at it with a custom provider),
// with the same script: a text block is sent as a message item, a
// tool_use block as a function_call (Block.Namespace names an MCP
// server's namespace, mcp__SERVER), a thinking block as reasoning.
// Request.Responses holds the decoded request; the stream is the API's
// (response.created … response.completed, usage counted from the
// request); refusals are the API's errors ({"error": {message, type,
// param, code}}: unknown items, a function_call_output without its call,
// a call without its output, an output part other than input_text,
// input_image or input_file, an input_image without a picture or whose
// data: URL is not an image's base64, …).
//
// And POST /v1/chat/completions, the Chat Completions API, with the same
// script again: text blocks become message.content, tool_use blocks
// tool_calls (ids call_mdl… made for you, the input as arguments).
// Request.Chat holds the decoded request (LastUser, ToolResult); the
// reply is a chat.completion, or with "stream": true data: lines of
// chat.completion.chunk deltas (role, content and tool call pieces, the
// finish_reason, the usage when stream_options.include_usage asks for it)
// and data: [DONE]. Refusals are OpenAI's errors again: missing model or
// messages, unknown roles and content parts, null content, tool calls not
// answered by tool messages before the next message and tool messages
// answering nothing, a key not sent as Authorization: Bearer.
package modelserver
