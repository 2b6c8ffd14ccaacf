package hook

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
)

// Codex's session rollouts (~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl)
// hold one {timestamp, ordinal, type, payload} per line: session_meta
// first (the session's id), then response_item lines (the Responses API's
// items as sent and received: messages, function and custom tool calls and
// their outputs, reasoning), event_msg lines (the UI's events, several of
// which repeat the items), turn_context, world_state, token_usage_record
// and compacted lines. testdata/codex-0.171.0 has a real one.
//
// What engram injects reaches the rollout as developer messages holding
// the marked context alone: they are recognised and skipped. A call to an
// MCP tool names its server's namespace (mcp__engram) and the tool
// (record): it is stored as mcp__engram__record, the name the hooks see.

type codexLine struct {
	Timestamp string          `json:"timestamp"`
	Type      string          `json:"type"`
	Payload   json.RawMessage `json:"payload"`
}

type codexItem struct {
	Type    string `json:"type"`
	ID      string `json:"id"`
	Role    string `json:"role"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	Name      string          `json:"name"`
	Namespace string          `json:"namespace"`
	Arguments string          `json:"arguments"`
	Input     string          `json:"input"`
	CallID    string          `json:"call_id"`
	Output    json.RawMessage `json:"output"`
	Action    json.RawMessage `json:"action"`
	Summary   []struct {
		Text string `json:"text"`
	} `json:"summary"`
	// session_meta
	Cwd string `json:"cwd"`
	// event_msg
	Message string `json:"message"`
	Item    struct {
		Type string `json:"type"`
	} `json:"item"`
}

// codexEchoes are event_msg types that repeat a response_item (or, for
// token_count, a token_usage_record): kept once, as the item.
var codexEchoes = map[string]bool{"user_message": true, "agent_message": true, "agent_reasoning": true,
	"token_count": true, "agent_reasoning_raw_content": true}

// codexItemEchoes are the item types of event_msg item_completed lines
// (Codex 0.171) that repeat a response_item. A CommandExecution's holds
// up to 64 KiB of the command's output, more than the model got of a
// large one, and an McpToolCall's the whole result: those are kept, raw.
var codexItemEchoes = map[string]bool{"UserMessage": true, "AgentMessage": true, "Reasoning": true,
	"ContextCompaction": true}

func (im *Importer) codexRecords(raw []byte, off int64, stem string, st *importState) lineResult {
	var out lineResult
	var l codexLine
	if err := json.Unmarshal(raw, &l); err != nil {
		out.corrupt++
		im.keepRaw(&out, raw, off, sessionOr(st.Session, stem), "corrupt", map[string]any{"error": err.Error()})
		return out
	}
	var it codexItem
	_ = json.Unmarshal(l.Payload, &it)
	if l.Type == "session_meta" && it.ID != "" {
		st.Session = it.ID
	}
	session := sessionOr(st.Session, stem)
	at, _ := time.Parse(time.RFC3339Nano, l.Timestamp)
	ag := (&Runner{Harness: im.Harness}).agentOf(session, "", "")
	rec := func(t store.ContentType, content []byte, msgID, parent string, extra ...string) engine.Record {
		m := map[string]any{"harness": im.Harness, "via": "transcript"}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return engine.Record{Session: session, Agent: ag.id, AgentType: ag.kind, Type: t, Content: content,
			MsgID: msgID, Parent: parent, Time: at, Metadata: m}
	}
	rawID := func() string { return rawMsgID(raw) }
	switch {
	case l.Type == "event_msg" && (codexEchoes[it.Type] || it.Type == "item_completed" && codexItemEchoes[it.Item.Type]):
		return out
	case l.Type == "compacted":
		var c struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(l.Payload, &c) == nil && c.Message != "" {
			out.recs = append(out.recs, rec(store.Note, []byte(c.Message), rawID(), "", "kind", "compact_summary"))
			return out
		}
	case l.Type != "response_item":
	case it.Type == "message":
		var parts []string
		for _, c := range it.Content {
			if c.Text != "" {
				parts = append(parts, c.Text)
			}
		}
		text := strings.Join(parts, "\n")
		text, injected := unmark(text)
		if injected {
			out.injected++
		}
		if strings.TrimSpace(text) == "" {
			return out
		}
		switch {
		case it.Role == "assistant":
			out.recs = append(out.recs, rec(store.AgentResponse, []byte(text), rawID(), ""))
		case it.Role != "user" || isCodexHarnessText(text):
			out.recs = append(out.recs, rec(store.Note, []byte(text), rawID(), "", "kind", "harness", "role", it.Role))
		default:
			out.recs = append(out.recs, rec(store.UserPrompt, []byte(text), st.promptID(session, text), ""))
		}
		return out
	case it.Type == "reasoning":
		var parts []string
		for _, s := range it.Summary {
			parts = append(parts, s.Text)
		}
		if text := strings.TrimSpace(strings.Join(parts, "\n")); text != "" {
			out.recs = append(out.recs, rec(store.AgentResponse, []byte(text), rawID(), "", "kind", "thinking"))
		}
		return out // the encrypted content is the provider's, not readable
	case (it.Type == "function_call" || it.Type == "custom_tool_call" || it.Type == "local_shell_call") && it.CallID != "":
		input := json.RawMessage(it.Arguments)
		switch {
		case it.Type == "custom_tool_call":
			input, _ = json.Marshal(map[string]string{"input": it.Input})
		case it.Type == "local_shell_call":
			input, it.Name = it.Action, "local_shell"
		case !json.Valid(input):
			input, _ = json.Marshal(map[string]string{"arguments": it.Arguments})
		}
		if it.Namespace != "" {
			it.Name = it.Namespace + "__" + it.Name
		}
		r := rec(store.ToolCall, ToolCallContent(it.Name, input), it.CallID, "", "tool", it.Name)
		r.Files = inputFiles(input)
		out.recs = append(out.recs, r)
		return out
	case (it.Type == "function_call_output" || it.Type == "custom_tool_call_output") && it.CallID != "":
		text := codexOutput(it.Output)
		if text == "" {
			text = "(no output)"
		}
		out.recs = append(out.recs, rec(store.ToolResult, []byte(text), resultMsgID(it.CallID), it.CallID))
		return out
	}
	im.keepRaw(&out, raw, off, session, l.Type, nil)
	return out
}

// codexOutput is a tool output's text: a string, or {"content": …} (the
// older shape, with "success"), or content items.
func codexOutput(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Content != nil {
		return *obj.Content
	}
	var items []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &items) == nil {
		var parts []string
		for _, it := range items {
			parts = append(parts, it.Text)
		}
		return strings.Join(parts, "\n")
	}
	return string(raw)
}

// isCodexHarnessText is a user message Codex writes itself: the
// environment, the project's instructions.
func isCodexHarnessText(s string) bool {
	t := strings.TrimSpace(s)
	for _, p := range []string{"<environment_context>", "<user_instructions>", "# AGENTS.md instructions", "<INSTRUCTIONS>", "<turn_aborted>"} {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return false
}

func sessionOr(s, stem string) string {
	if s != "" {
		return s
	}
	return stem
}
