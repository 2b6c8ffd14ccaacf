package mcpserver

import (
	"context"
	"errors"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/engramhq/engram/internal/api"
	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/store"
)

// errUnavailable is what a tool says when the store could not be reached.
var errUnavailable = errors.New("the store is unavailable (its database does not answer, or it is locked); retry later")

// tool adapts an operation to an MCP tool handler: the text goes to the
// model, the output is the structured content (if the server sends it),
// an error is a tool error.
func tool[In, Out any](s *Server, op func(*api.Ops, context.Context, In) (Out, string, error)) mcp.ToolHandlerFor[In, Out] {
	return func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		out, text, err := op(s.ops(req), ctx, in)
		if err != nil {
			var zero Out
			if errors.Is(err, store.ErrUnavailable) {
				// Its text names the database's host and user: for the
				// server's log, not for an agent.
				s.log.Error("the store is unavailable", "tool", req.Params.Name, "err", err)
				err = errUnavailable
			}
			return nil, zero, err
		}
		content := []mcp.Content{&mcp.TextContent{Text: text}}
		if r, ok := any(out).(api.RetrieveOut); ok {
			for _, p := range r.Pictures {
				content = append(content, &mcp.ImageContent{Data: p.Data, MIMEType: p.Type})
			}
		}
		return &mcp.CallToolResult{Content: content}, out, nil
	}
}

func (s *Server) addTools() {
	ro := &mcp.ToolAnnotations{ReadOnlyHint: true}
	add(s, &mcp.Tool{Name: "search", Annotations: ro,
		Description: "Search the project's code and everything agents saw (messages, tool results), lexical and semantic: the best distinct places (files or records), each with its best spans and their lines."}, (*api.Ops).SearchPlaces)
	add(s, &mcp.Tool{Name: "get_file", Annotations: ro,
		Description: "Read an indexed file, or some of its lines, current or an older version."}, (*api.Ops).GetFile)
	add(s, &mcp.Tool{Name: "prefetch", Annotations: ro,
		Description: "The context block worth reading before a task: excerpts and one-line hints, within a token budget."}, (*api.Ops).Prefetch)
	add(s, &mcp.Tool{Name: "retrieve_context", Annotations: ro,
		Description: "Read stored content back byte for byte, with its lines: the chunks matching query, best first; or the entries of content_ids or ref_id: their chunks matching query, lines start_line-end_line of one, or whole. next is the call that reads on. Images and PDFs show as a placeholder; images come as pictures too, up to max_tokens of them; raw gives base64 instead."}, s.retrieveContext)
	add(s, &mcp.Tool{Name: "search_history", Annotations: ro,
		Description: "Search past messages and tool results only, by type and session."}, (*api.Ops).SearchHistory)
	add(s, &mcp.Tool{Name: "get_turn_range", Annotations: ro,
		Description: "Read a session's turns from one number to another, in order."}, (*api.Ops).TurnRange)
	add(s, &mcp.Tool{Name: "window", Annotations: ro,
		Description: "Your context window: tokens used of its budget, where it evicts, what it evicted under [CTX-REF] markers (expand one with retrieve_context). action list: the session's windows."}, (*api.Ops).Window)
	add(s, &mcp.Tool{Name: "record",
		Description: "Store a message, tool call or tool result in your session so it is kept and searchable."}, (*api.Ops).Record)
	add(s, &mcp.Tool{Name: "briefing", Annotations: ro,
		Description: "Your session's briefing: task, files, user wants; shared patterns, failures, decisions and intents, relevant first. Send gv and sv you hold to get NOT_MODIFIED."}, (*api.Ops).Briefing)
	add(s, &mcp.Tool{Name: "recall", Annotations: ro,
		Description: "Ask the shared memory what was done, learned or recorded: an @arch: query (@arch:recall:failures?q=timeout) or a question such as \"what did we decide about X?\" or \"what patterns do we have for Y?\"."}, recallOnly)
	add(s, &mcp.Tool{Name: "record_pattern",
		Description: "Record a pattern every agent should follow. Duplicates merge; a contradiction must name what it supersedes."}, (*api.Ops).RecordPattern)
	add(s, &mcp.Tool{Name: "record_failure",
		Description: "Record an approach that failed, with its resolution and outcome if known, so no agent repeats it."}, (*api.Ops).RecordFailure)
	add(s, &mcp.Tool{Name: "record_insight", Description: "Record something learned."}, (*api.Ops).RecordInsight)
	add(s, &mcp.Tool{Name: "record_decision", Description: "Record a decision, why, and the alternatives."}, (*api.Ops).RecordDecision)
	add(s, &mcp.Tool{Name: "update_resume",
		Description: "Update where your session stands so the next agent can carry on; fields left out keep their values."}, (*api.Ops).UpdateResume)
	add(s, &mcp.Tool{Name: "update_file", Description: "Record what your session did to a file."}, (*api.Ops).UpdateFile)
	add(s, &mcp.Tool{Name: "declare_intent",
		Description: "Announce cross-cutting work (a rename, an API change) so other sessions touching it see it. Never blocks."}, (*api.Ops).DeclareIntent)
	add(s, &mcp.Tool{Name: "complete_intent", Description: "Mark one of your session's intents done."}, (*api.Ops).CompleteIntent)
}

// add registers a tool. Claude Code and Codex give the model a result's
// structured content, not its text, when it has any: JSON of the same
// data, about twice the text's tokens (BENCHMARKS.md, "MCP tool results:
// tokens"), with content JSON-escaped. So by default a tool declares no
// output schema and its result is its text alone; with
// Options.Structured it declares the smallest output schema (lean) and
// sends the structured content beside the text, for clients that read it.
func add[In, Out any](s *Server, t *mcp.Tool, op func(*api.Ops, context.Context, In) (Out, string, error)) {
	h := tool(s, op)
	if s.opts.Structured {
		mcp.AddTool(s.mcp, lean(t), h)
		return
	}
	mcp.AddTool(s.mcp, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
		res, _, err := h(ctx, req, in)
		return res, nil, err
	})
}

// lean gives a tool the smallest output schema: an object. The inferred
// schemas of the outputs would triple the tool list's tokens, which every
// client sends the model.
func lean(t *mcp.Tool) *mcp.Tool {
	t.OutputSchema = objectSchema
	return t
}

// objectSchema is one value, so that the schema cache knows it.
var objectSchema = &jsonschema.Schema{Type: "object"}

// recallOnly is recall as the MCP tool offers it, read-only as its
// annotation says: an @arch:store: query, which writes, is refused (a
// harness may run read-only tools without asking); the record_ tools
// write.
func recallOnly(o *api.Ops, ctx context.Context, in api.RecallIn) (api.RecallOut, string, error) {
	if archive.IsDSL(in.Query) && strings.Contains(in.Query, ":store:") {
		return api.RecallOut{}, "", &api.InputError{Msg: "recall only reads, and an @arch:store: query writes: record with record_pattern, record_failure, record_insight or record_decision"}
	}
	return o.Recall(ctx, in)
}

// retrieveContext is retrieve_context with pictures: each image (PNG,
// JPEG, GIF, WebP) the text shows whole comes back beside it as an image
// content, which Claude Code gives its model as a picture, as many as
// max_tokens and the cap on a result's pictures (Options.MaxPictureBytes)
// take; the placeholder of one left out says why.
func (s *Server) retrieveContext(o *api.Ops, ctx context.Context, in api.RetrieveIn) (api.RetrieveOut, string, error) {
	in.Pictures, in.PictureBytes = true, s.maxPictureBytes()
	return o.RetrieveContext(ctx, in)
}
