package mcpserver

import (
	"fmt"
	"strings"
	"testing"
)

// TestTextWithinMaxTokens: retrieve_context and get_turn_range keep their
// whole text, headers and the closing line included, within max_tokens,
// and say how many items did not fit.
func TestTextWithinMaxTokens(t *testing.T) {
	cs, eng := newClient(t, Options{Session: "s1", Agent: "a1"})
	var ids []string
	for i := range 30 {
		content := strings.Repeat(fmt.Sprintf("line %d of turn %d: the retry loop backs off with jitter\n", i, i), 1+i%7)
		rec := ok(t, cs, "record", map[string]any{"type": "tool_result", "content": content})
		ids = append(ids, strings.Fields(rec)[1])
	}
	enc := eng.Encoding()
	for _, max := range []int{100, 101, 250, 600, 1500, 8000} {
		for _, c := range []struct {
			tool string
			args map[string]any
		}{
			{"retrieve_context", map[string]any{"content_ids": ids, "max_tokens": max}},
			{"get_turn_range", map[string]any{"from": 1, "to": 30, "max_tokens": max}},
		} {
			text := ok(t, cs, c.tool, c.args)
			n := enc.Count(text)
			if n > max {
				t.Errorf("%s max_tokens %d: %d tokens of text", c.tool, max, n)
			}
			all := strings.Count(text, "--- ") == 30 && !strings.Contains(text, "cut to the budget")
			if more := strings.Contains(text, "more over max_tokens"); more == all {
				t.Errorf("%s max_tokens %d: all items %v, says more %v:\n%s", c.tool, max, all, more, text)
			}
			if max == 8000 && !all {
				t.Errorf("%s: not everything within %d tokens", c.tool, max)
			}
			if max >= 100 && !strings.Contains(text, "line 0 of turn 0") {
				t.Errorf("%s max_tokens %d: the first item is missing:\n%s", c.tool, max, text)
			}
		}
	}
}
