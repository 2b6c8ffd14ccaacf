package proxy

import (
	"fmt"
	"testing"
)

// TestPair: what goes with a message that goes: a call's results, a
// result's call, and a reasoning item's following item and the reverse,
// whichever of them the window showed whole (a clipped unit shows some
// of its messages whole and the others as excerpts).
func TestPair(t *testing.T) {
	msgs := []msgInfo{
		{},                       // 0 the user's prompt
		{leads: true},            // 1 reasoning
		{calls: []string{"a"}},   // 2 its call
		{results: []string{"a"}}, // 3 the call's output
		{leads: true},            // 4 reasoning
		{},                       // 5 its message
	}
	for _, tc := range []struct {
		sent, want []int
	}{
		{[]int{3}, []int{1, 2, 3}},
		{[]int{1}, []int{1, 2, 3}},
		{[]int{2}, []int{1, 2, 3}},
		{[]int{5}, []int{4, 5}},
		{[]int{4}, []int{4, 5}},
		{[]int{0}, []int{0}},
	} {
		sent := make([]bool, len(msgs))
		for _, i := range tc.sent {
			sent[i] = true
		}
		pair(msgs, sent)
		var got []int
		for i, s := range sent {
			if s {
				got = append(got, i)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("pair of %v: %v go, want %v", tc.sent, got, tc.want)
		}
	}
}
