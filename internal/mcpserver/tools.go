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
// model, the output is the structured content, an error is a tool error.
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
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, out, nil
	}
}

func (s *Server) addTools() {
	ro := &mcp.ToolAnnotations{ReadOnlyHint: true}
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "search", Annotations: ro,
		Description: "Search the project's code and everything agents saw (messages, tool results), lexical and semantic: the best distinct places (files or records), each with its best spans and their lines."}), tool(s, (*api.Ops).SearchPlaces))
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "get_file", Annotations: ro,
		Description: "Read an indexed file, or some of its lines, current or an older version."}), tool(s, (*api.Ops).GetFile))
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "prefetch", Annotations: ro,
		Description: "The context block worth reading before a task: excerpts and one-line hints, within a token budget."}), tool(s, (*api.Ops).Prefetch))
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "retrieve_context", Annotations: ro,
		Description: "Read stored content back byte for byte, with its lines: the chunks matching query, best first; or the entries of content_ids or ref_id: their chunks matching query, lines start_line-end_line of one, or whole. next is the call that reads on."}), tool(s, (*api.Ops).RetrieveContext))
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "search_history", Annotations: ro,
		Description: "Search past messages and tool results only, by type and session."}), tool(s, (*api.Ops).SearchHistory))
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "get_turn_range", Annotations: ro,
		Description: "Read a session's turns from one number to another, in order."}), tool(s, (*api.Ops).TurnRange))
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "window", Annotations: ro,
		Description: "Your context window: tokens used of its budget, where it evicts, what it evicted under [CTX-REF] markers (expand one with retrieve_context). action list: the session's windows."}), tool(s, (*api.Ops).Window))
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "record",
		Description: "Store a message, tool call or tool result in your session so it is kept and searchable."}), tool(s, (*api.Ops).Record))
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "briefing", Annotations: ro,
		Description: "Your session's briefing: task, files, user wants; shared patterns, failures, decisions and intents, relevant first. Send gv and sv you hold to get NOT_MODIFIED."}), tool(s, (*api.Ops).Briefing))
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "recall", Annotations: ro,
		Description: "Ask the shared memory what was done, learned or recorded: an @arch: query (@arch:recall:failures?q=timeout) or a question such as \"what did we decide about X?\" or \"what patterns do we have for Y?\"."}), tool(s, recallOnly))
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "record_pattern",
		Description: "Record a pattern every agent should follow. Duplicates merge; a contradiction must name what it supersedes."}), tool(s, (*api.Ops).RecordPattern))
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "record_failure",
		Description: "Record an approach that failed, with its resolution and outcome if known, so no agent repeats it."}), tool(s, (*api.Ops).RecordFailure))
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "record_insight", Description: "Record something learned."}), tool(s, (*api.Ops).RecordInsight))
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "record_decision", Description: "Record a decision, why, and the alternatives."}), tool(s, (*api.Ops).RecordDecision))
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "update_resume",
		Description: "Update where your session stands so the next agent can carry on; fields left out keep their values."}), tool(s, (*api.Ops).UpdateResume))
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "update_file", Description: "Record what your session did to a file."}), tool(s, (*api.Ops).UpdateFile))
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "declare_intent",
		Description: "Announce cross-cutting work (a rename, an API change) so other sessions touching it see it. Never blocks."}), tool(s, (*api.Ops).DeclareIntent))
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "complete_intent", Description: "Mark one of your session's intents done."}), tool(s, (*api.Ops).CompleteIntent))
}

// lean gives a tool the smallest output schema: an object. The inferred
// schemas of the outputs would triple the tool list's tokens, which every
// client sends the model; the structured content is still sent with
// every result, and the text is what the model reads.
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
