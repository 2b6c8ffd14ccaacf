package window

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestEntitiesOf_RawResult: a marker names what a tool result kept raw
// says (an MCP tool's array of text blocks, a Bash output beside
// cache_control), as it names what the same result given as a string
// says: not the JSON's field names and ids, not a name glued to the "n"
// of an escaped line break.
func TestEntitiesOf_RawResult(t *testing.T) {
	const out = "found 3 matches\nsrc/lexer/parser_impl.py:12\nsrc/lexer/parser_impl.py:40\ninternal/upload/handler.go"
	plain := Message{Role: RoleUser, Blocks: []Block{{Type: BlockToolResult, ToolUseID: "toolu_01abcdefgh", Text: out}}}
	want := entitiesOf(&plain)
	if !slices.Contains(want, "src/lexer/parser_impl.py:12") && !slices.Contains(want, "src/lexer/parser_impl.py") {
		t.Fatalf("the string result's entities %v name no path", want)
	}
	for name, content := range map[string]any{
		"blocks":                      []map[string]any{{"type": "text", "text": out}},
		"string beside cache_control": out,
	} {
		raw, err := json.Marshal(map[string]any{"type": "tool_result", "tool_use_id": "toolu_01abcdefgh", "content": content,
			"is_error": false, "cache_control": map[string]any{"type": "ephemeral"}})
		if err != nil {
			t.Fatal(err)
		}
		m := Message{Role: RoleUser, Blocks: []Block{{Type: BlockToolResult, ToolUseID: "toolu_01abcdefgh", Raw: raw}}}
		if got := entitiesOf(&m); !slices.Equal(got, want) {
			t.Errorf("%s: entities %v, want %v (the string result's)", name, got, want)
		}
	}
}

// TestFirstLine_Raw: a marker's hint is the first line of the user's
// words when the harness sent them as a text block with cache_control,
// which the window keeps raw (Claude Code marks its newest message so).
func TestFirstLine_Raw(t *testing.T) {
	m := Message{Role: RoleUser, Blocks: []Block{
		{Type: BlockText, Text: "<system-reminder>\nAs you answer, use the tools.\n</system-reminder>"},
		{Type: BlockText, Raw: json.RawMessage(`{"type": "text", "text": "why does TestRetry time out?", "cache_control": {"type": "ephemeral"}}`)},
	}}
	if got, want := firstLine(&m), "why does TestRetry time out?"; got != want {
		t.Errorf("firstLine: %q, want %q", got, want)
	}
}

// TestHandoffState_RawResults: a handoff's state reads the tests failing
// and the files mentioned in tool results kept raw (an MCP tool's array
// of text blocks), as in results given as strings.
func TestHandoffState_RawResults(t *testing.T) {
	const out = "--- FAIL: TestParseTokens (0.00s)\n    parser_test.go:12: got 3\nFAIL\tgithub.com/x/lexer\nsee src/lexer/parser_impl.py"
	raw, err := json.Marshal(map[string]any{"type": "tool_result", "tool_use_id": "toolu_01", "content": []map[string]any{{"type": "text", "text": out}}})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{
		{Role: RoleAssistant, Blocks: []Block{{Type: BlockToolUse, ID: "toolu_01", Name: "mcp__ci__run_tests", Input: json.RawMessage(`{}`)}}},
		{Role: RoleUser, Blocks: []Block{{Type: BlockToolResult, ToolUseID: "toolu_01", Raw: raw}}},
	}
	if got := failingTests(msgs); !slices.Equal(got, []string{"TestParseTokens"}) {
		t.Errorf("failing tests %v, want [TestParseTokens]", got)
	}
	if got := filesOf(msgs); !slices.ContainsFunc(got, func(f HandoffFile) bool { return f.Path == "src/lexer/parser_impl.py" }) {
		t.Errorf("files %+v: want src/lexer/parser_impl.py, mentioned", got)
	}
}

// TestLayout_HugeRawResult: a tool result larger than the whole budget
// that came as an array of text blocks is shown, like one that came as a
// string, as a marker and the head and tail of its text.
func TestLayout_HugeRawResult(t *testing.T) {
	raw, err := json.Marshal(map[string]any{"type": "tool_result", "tool_use_id": "c1", "content": []map[string]any{{"type": "text", "text": hugeLog()}}})
	if err != nil {
		t.Fatal(err)
	}
	conv := step("c1", "cat huge.log", "")
	conv[1].Blocks = []Block{{Type: BlockToolResult, ToolUseID: "c1", Raw: raw}}
	conv[1].Tokens = o200k.Count(string(raw))
	layOutHuge(t, conv)
}
