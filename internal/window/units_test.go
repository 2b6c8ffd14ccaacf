package window

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func text(role Role, s string) Message {
	return Message{Role: role, Blocks: []Block{{Type: BlockText, Text: s}}, Tokens: len(s)}
}

func call(ids ...string) Message {
	m := Message{Role: RoleAssistant}
	for _, id := range ids {
		m.Blocks = append(m.Blocks, Block{Type: BlockToolUse, ID: id, Name: "bash"})
	}
	return m
}

func result(role Role, ids ...string) Message {
	m := Message{Role: role}
	for _, id := range ids {
		m.Blocks = append(m.Blocks, Block{Type: BlockToolResult, ToolUseID: id, Text: "out " + id})
	}
	return m
}

// reasoning is a Responses reasoning item, which leads the item after it.
func reasoning() Message {
	return Message{Role: RoleAssistant, Blocks: []Block{{Type: "item:reasoning", Raw: []byte(`{"type":"reasoning","summary":[],"encrypted_content":"gAAA"}`)}}}
}

func TestUnits(t *testing.T) {
	for _, tc := range []struct {
		name string
		msgs []Message
		want []Unit
	}{
		{"plain", []Message{text(RoleSystem, "s"), text(RoleUser, "u"), text(RoleAssistant, "a")},
			[]Unit{{0, 1, false}, {1, 2, false}, {2, 3, false}}},
		{"anthropic pair", []Message{text(RoleUser, "u"), call("a"), result(RoleUser, "a"), text(RoleAssistant, "done")},
			[]Unit{{0, 1, false}, {1, 3, false}, {3, 4, false}}},
		{"openai parallel calls", []Message{call("a", "b"), result(RoleTool, "b"), result(RoleTool, "a"), text(RoleAssistant, "x")},
			[]Unit{{0, 3, false}, {3, 4, false}}},
		{"interleaved", []Message{call("a"), call("b"), result(RoleUser, "a"), result(RoleUser, "b")},
			[]Unit{{0, 4, false}}},
		{"open call", []Message{text(RoleUser, "u"), call("a"), text(RoleUser, "meanwhile")},
			[]Unit{{0, 1, false}, {1, 3, true}}},
		{"reasoning before a call", []Message{text(RoleUser, "u"), reasoning(), call("a"), result(RoleTool, "a"), text(RoleAssistant, "x")},
			[]Unit{{0, 1, false}, {1, 4, false}, {4, 5, false}}},
		{"reasoning before an answer", []Message{text(RoleUser, "u"), reasoning(), text(RoleAssistant, "x"), text(RoleUser, "v")},
			[]Unit{{0, 1, false}, {1, 3, false}, {3, 4, false}}},
		{"reasoning waiting for its item", []Message{text(RoleUser, "u"), reasoning()},
			[]Unit{{0, 1, false}, {1, 2, true}}},
		{"empty", nil, nil},
	} {
		got, err := Units(tc.msgs)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestUnitsBadInput(t *testing.T) {
	for _, tc := range []struct {
		msgs []Message
		want string
	}{
		{[]Message{result(RoleUser, "a")}, `message 0: a result for tool call "a", which no earlier message makes`},
		{[]Message{result(RoleUser, "a"), call("a")}, `message 0: a result for tool call "a"`},
		{[]Message{call("a"), call("a")}, `message 1: tool call id "a" is used twice`},
		{[]Message{call("a"), result(RoleUser, "a"), result(RoleTool, "a")}, `message 2: tool call "a" is answered twice`},
	} {
		_, err := Units(tc.msgs)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an ErrInvalid naming %q", tc.msgs, err, tc.want)
		}
		var pe *PairingError
		if !errors.As(err, &pe) || pe.CallID != "a" || !strings.Contains(tc.want, pe.Problem[:10]) {
			t.Errorf("%v: %#v, want a PairingError naming call a", tc.msgs, pe)
		}
	}
}

// randomConversation makes a valid conversation with tool calls (some in
// parallel, some answered late or never), in the shapes of both vendors.
func randomConversation(r *rand.Rand, n int) []Message {
	var msgs []Message
	var pending []string
	next := 0
	for len(msgs) < n {
		switch k := r.IntN(10); {
		case k < 3:
			var ids []string
			for range 1 + r.IntN(3) {
				ids = append(ids, fmt.Sprintf("c%d", next))
				next++
			}
			msgs = append(msgs, call(ids...))
			pending = append(pending, ids...)
		case k < 7 && len(pending) > 0:
			i := r.IntN(len(pending))
			role := RoleUser
			if r.IntN(2) == 0 {
				role = RoleTool
			}
			msgs = append(msgs, result(role, pending[i]))
			pending = append(pending[:i], pending[i+1:]...)
		case k < 8 && r.IntN(3) == 0:
			msgs = append(msgs, reasoning())
		case k < 8:
			msgs = append(msgs, text(RoleUser, "prompt"))
		default:
			msgs = append(msgs, text(RoleAssistant, "answer"))
		}
	}
	return msgs
}

// TestUnitsProperties: on random conversations, units cover every
// message in order, no call is in another unit than its result, a unit is
// open exactly when it holds an unanswered call, and every cut between
// units is one (no shorter unit would do: each unit's inner cuts separate
// a call from its result).
func TestUnitsProperties(t *testing.T) {
	for seed := range uint64(500) {
		r := rand.New(rand.NewPCG(seed, 1))
		msgs := randomConversation(r, 1+r.IntN(40))
		units, err := Units(msgs)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		unitOf := make([]int, len(msgs))
		at := 0
		for k, u := range units {
			if u.From != at || u.To <= u.From {
				t.Fatalf("seed %d: unit %d is %v after %d", seed, k, u, at)
			}
			for i := u.From; i < u.To; i++ {
				unitOf[i] = k
			}
			at = u.To
		}
		if at != len(msgs) {
			t.Fatalf("seed %d: units end at %d of %d", seed, at, len(msgs))
		}
		callAt := map[string]int{}
		answered := map[string]bool{}
		for i, m := range msgs {
			for _, id := range m.Calls() {
				callAt[id] = i
			}
			for _, id := range m.Results() {
				answered[id] = true
				if unitOf[callAt[id]] != unitOf[i] {
					t.Fatalf("seed %d: call %s (message %d) and its result (message %d) are in different units", seed, id, callAt[id], i)
				}
			}
		}
		for id, i := range callAt {
			if !answered[id] && (!units[unitOf[i]].Open || units[unitOf[i]].To != len(msgs)) {
				t.Fatalf("seed %d: unanswered call %s is in a closed unit %v", seed, id, units[unitOf[i]])
			}
		}
		for i, m := range msgs {
			switch {
			case !m.LeadsNext():
			case i+1 < len(msgs) && unitOf[i] != unitOf[i+1]:
				t.Fatalf("seed %d: reasoning item %d and the message after it are in different units", seed, i)
			case i+1 == len(msgs) && !units[unitOf[i]].Open:
				t.Fatalf("seed %d: the last message, a reasoning item, is in a closed unit %v", seed, units[unitOf[i]])
			}
		}
		// Minimality: a cut inside any unit separates some call from its
		// result (or an open call from what follows).
		for _, u := range units {
			for cut := u.From + 1; cut < u.To; cut++ {
				if !separates(msgs, cut) {
					t.Fatalf("seed %d: unit %v could be cut at %d", seed, u, cut)
				}
			}
		}
	}
}

// separates reports whether cutting msgs before index cut leaves a call
// on one side and its result, or its absence, on the other, or a
// reasoning item on one side and the message after it on the other.
func separates(msgs []Message, cut int) bool {
	if msgs[cut-1].LeadsNext() {
		return true
	}
	before := map[string]bool{}
	for _, m := range msgs[:cut] {
		for _, id := range m.Calls() {
			before[id] = true
		}
	}
	for _, m := range msgs[:cut] {
		for _, id := range m.Results() {
			delete(before, id)
		}
	}
	return len(before) > 0
}
