package window

import "fmt"

// PairingError is a conversation that breaks the pairing of tool calls
// and results: a result whose call no earlier message makes, a call id
// used twice, a call answered twice. It is an ErrInvalid.
type PairingError struct {
	// Message is the index of the message at fault, in what was paired:
	// among the appended messages, for an append.
	Message int
	CallID  string
	// Problem says what is wrong, naming the call.
	Problem string
}

func (e *PairingError) Error() string {
	return fmt.Sprintf("%v: message %d: %s", ErrInvalid, e.Message, e.Problem)
}

// Unwrap makes a PairingError an ErrInvalid.
func (e *PairingError) Unwrap() error { return ErrInvalid }

// Unit is a run of messages, msgs[From:To], that enters and leaves a
// window whole: one message, or a tool call with every message up to its
// last result (and whatever calls and results interleave with them); a
// reasoning item (see Message.LeadsNext) with the unit of the message
// after it.
type Unit struct {
	From, To int
	// Open is true when a call in the unit has no result yet, or the
	// unit ends with a reasoning item whose following item has not come:
	// the unit runs to the end of the conversation, and grows with it.
	Open bool
}

// Units splits a conversation into units, in order, covering every
// message. It is the one rule by which anything in engram that cuts a
// conversation (eviction, compaction, trimming to a budget) keeps a tool
// call with its result, and a reasoning item with the item after it: a
// cut may fall only between units.
//
// A result whose call is not earlier in msgs, a call id used twice, and a
// call answered twice are errors, naming the message.
func Units(msgs []Message) ([]Unit, error) {
	// calls holds each tool call's message, and whether it was answered.
	type call struct {
		at       int
		answered bool
	}
	calls := make(map[string]call)
	// reach[i] is the last message that must stay with message i.
	reach := make([]int, len(msgs))
	open := make([]bool, len(msgs))
	for j := range msgs {
		reach[j] = j
		m := &msgs[j]
		if m.LeadsNext() {
			if j+1 < len(msgs) {
				reach[j] = j + 1
			} else {
				open[j] = true
			}
		}
		for _, b := range m.Blocks {
			switch b.Type {
			case BlockToolUse:
				if _, dup := calls[b.ID]; dup {
					return nil, &PairingError{Message: j, CallID: b.ID, Problem: fmt.Sprintf("tool call id %q is used twice", b.ID)}
				}
				calls[b.ID] = call{at: j}
			case BlockToolResult:
				c, ok := calls[b.ToolUseID]
				switch {
				case !ok:
					return nil, &PairingError{Message: j, CallID: b.ToolUseID, Problem: fmt.Sprintf("a result for tool call %q, which no earlier message makes", b.ToolUseID)}
				case c.answered:
					return nil, &PairingError{Message: j, CallID: b.ToolUseID, Problem: fmt.Sprintf("tool call %q is answered twice", b.ToolUseID)}
				}
				calls[b.ToolUseID] = call{at: c.at, answered: true}
				reach[c.at] = max(reach[c.at], j)
			}
		}
	}
	for _, c := range calls {
		if !c.answered {
			reach[c.at], open[c.at] = len(msgs)-1, true
		}
	}
	units := make([]Unit, 0, len(msgs)/2+1)
	for from := 0; from < len(msgs); {
		u := Unit{From: from, To: from + 1}
		for k := from; k < u.To; k++ {
			u.To = max(u.To, reach[k]+1)
			u.Open = u.Open || open[k]
		}
		units = append(units, u)
		from = u.To
	}
	return units, nil
}
