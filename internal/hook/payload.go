package hook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// MaxPayloadBytes bounds a hook's input. A PostToolUse payload carries the
// tool's whole response (a Read of a large file, a command's output cut
// at 30,000 characters), so the cap is generous; what is over it is
// refused, and the hook lets the harness go on.
const MaxPayloadBytes = 64 << 20

// Events are the hook events engram handles, by the harnesses' names.
const (
	SessionStart     = "SessionStart"
	UserPromptSubmit = "UserPromptSubmit"
	PostToolUse      = "PostToolUse"
	PreCompact       = "PreCompact"
	Stop             = "Stop"
)

// Events lists them in the order a session meets them.
var Events = []string{SessionStart, UserPromptSubmit, PostToolUse, PreCompact, Stop}

// Harnesses engram plugs into.
const (
	ClaudeCode = "claude-code"
	Codex      = "codex"
)

// Payload is what a hook reads on standard input: the fields common to
// every event, and those of each event engram uses. Claude Code and Codex
// send the same names (Codex 0.171 adds turn_id; see
// testdata/codex-0.171.0). Unknown fields are ignored, so that a newer
// harness does not break the hook; Raw keeps the whole input.
type Payload struct {
	SessionID      string `json:"session_id"`
	TranscriptPath string `json:"transcript_path"`
	Cwd            string `json:"cwd"`
	Event          string `json:"hook_event_name"`
	PermissionMode string `json:"permission_mode"`
	Model          string `json:"model"`
	// TurnID is Codex's: the turn an event belongs to (not on
	// SessionStart).
	TurnID string `json:"turn_id"`
	// AgentID and AgentType are set when the hook fires inside a
	// sub-agent.
	AgentID   string `json:"agent_id"`
	AgentType string `json:"agent_type"`

	// SessionStart: startup, resume, clear or compact.
	Source string `json:"source"`
	// UserPromptSubmit.
	Prompt string `json:"prompt"`
	// PostToolUse. Codex names its shell tool (exec_command to the
	// model) Bash, with {"command": …} as its input and the output the
	// model got as a string.
	ToolName     string          `json:"tool_name"`
	ToolInput    json.RawMessage `json:"tool_input"`
	ToolResponse json.RawMessage `json:"tool_response"`
	ToolUseID    string          `json:"tool_use_id"`
	// PreCompact: manual or auto, and what /compact was given (Claude
	// Code's; Codex sends only the trigger).
	Trigger            string `json:"trigger"`
	CustomInstructions string `json:"custom_instructions"`
	// Stop and SubagentStop (which names the sub-agent's own transcript).
	StopHookActive       bool   `json:"stop_hook_active"`
	LastAssistantMessage string `json:"last_assistant_message"`
	AgentTranscriptPath  string `json:"agent_transcript_path"`

	Raw json.RawMessage `json:"-"`
	// Procs are the processes that started the hook, nearest first (its
	// shell, the harness): SessionStart records the session under them,
	// for the MCP server the harness started (FollowSession).
	Procs []Proc `json:"-"`
}

// PayloadError is a hook input engram cannot use.
type PayloadError struct{ Msg string }

func (e *PayloadError) Error() string { return "hook input: " + e.Msg }

// ReadPayload reads and checks a hook's input for event. What it needs of
// the event must be there (a session id always; a prompt, a tool's name
// and id); the rest may be missing.
func ReadPayload(r io.Reader, event string) (Payload, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxPayloadBytes+1))
	if err != nil {
		return Payload{}, fmt.Errorf("hook input: %w", err)
	}
	if len(data) > MaxPayloadBytes {
		return Payload{}, &PayloadError{Msg: fmt.Sprintf("over %d MiB", MaxPayloadBytes>>20)}
	}
	return ParsePayload(data, event)
}

// ParsePayload decodes a hook's input (see ReadPayload).
func ParsePayload(data []byte, event string) (Payload, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return Payload{}, &PayloadError{Msg: "empty (a hook reads the event's JSON on standard input)"}
	}
	var p Payload
	if err := json.Unmarshal(data, &p); err != nil {
		var se *json.SyntaxError
		switch {
		case errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "unexpected end of JSON input"):
			return Payload{}, &PayloadError{Msg: fmt.Sprintf("truncated JSON (%d bytes)", len(data))}
		case errors.As(err, &se):
			return Payload{}, &PayloadError{Msg: fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, err)}
		}
		return Payload{}, &PayloadError{Msg: err.Error()}
	}
	p.Raw = data
	if p.Event != "" && event != "" && p.Event != event {
		return Payload{}, &PayloadError{Msg: fmt.Sprintf("is for %s, not %s (check the hook's command in the settings)", p.Event, event)}
	}
	if p.Event == "" {
		p.Event = event
	}
	var missing []string
	if p.SessionID == "" {
		missing = append(missing, "session_id")
	}
	switch p.Event {
	case UserPromptSubmit:
		if p.Prompt == "" {
			missing = append(missing, "prompt")
		}
	case PostToolUse:
		if p.ToolName == "" {
			missing = append(missing, "tool_name")
		}
		if p.ToolUseID == "" {
			missing = append(missing, "tool_use_id")
		}
	}
	if len(missing) > 0 {
		return Payload{}, &PayloadError{Msg: "no " + strings.Join(missing, ", ")}
	}
	return p, nil
}
