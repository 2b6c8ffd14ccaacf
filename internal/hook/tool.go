package hook

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/secrets"
	"github.com/engramhq/engram/internal/store"
)

// ToolCallContent is how a tool call is stored: the tool's name and its
// input, compact JSON. The importer stores a transcript's tool_use alike.
func ToolCallContent(name string, input json.RawMessage) []byte {
	in := compactJSON(input)
	if len(in) == 0 {
		in = []byte("{}")
	}
	b, _ := json.Marshal(struct {
		Tool  string          `json:"tool"`
		Input json.RawMessage `json:"input"`
	}{name, in})
	return b
}

func compactJSON(raw json.RawMessage) []byte {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return raw
	}
	return buf.Bytes()
}

// EngramTools starts the names of engram's MCP tools in a harness that
// registered the server as "engram" (engram hooks install does).
const EngramTools = "mcp__engram__"

// resultMsgID names a tool's result in its session.
func resultMsgID(toolUseID string) string { return toolUseID + "/result" }

// bashResponse is the shape of Claude Code's Bash output.
type bashResponse struct {
	Stdout              string `json:"stdout"`
	Stderr              string `json:"stderr"`
	Interrupted         bool   `json:"interrupted"`
	PersistedOutputPath string `json:"persistedOutputPath"`
	PersistedOutputSize int64  `json:"persistedOutputSize"`
}

// toolText is a tool response's text as stored, whole: a command's full
// output read from the file the harness persisted it to, a file read's
// content with its line numbers (as the model reads it), an MCP tool's
// text blocks, a bare string as it is, anything
// else as compact JSON. notes says what could not be read whole.
func toolText(resp json.RawMessage, maxBytes int64) (text string, notes []string) {
	resp = bytes.TrimSpace(resp)
	if len(resp) == 0 || string(resp) == "null" {
		return "", nil
	}
	switch resp[0] {
	case '"':
		var s string
		if json.Unmarshal(resp, &s) == nil {
			return s, nil
		}
	case '[':
		if s, ok := blocksText(resp); ok {
			return s, nil
		}
	case '{':
		var obj map[string]json.RawMessage
		if json.Unmarshal(resp, &obj) != nil {
			break
		}
		if _, ok := obj["stdout"]; ok {
			var b bashResponse
			if json.Unmarshal(resp, &b) == nil {
				out := b.Stdout
				if b.PersistedOutputPath != "" {
					full, err := readCapped(b.PersistedOutputPath, maxBytes)
					if err != nil {
						notes = append(notes, "the persisted output: "+err.Error())
					} else {
						out = full
					}
				}
				if b.Stderr != "" {
					if out != "" && !strings.HasSuffix(out, "\n") {
						out += "\n"
					}
					out += b.Stderr
				}
				return out, notes
			}
		}
		if f, ok := obj["file"]; ok {
			var file struct {
				Content   *string `json:"content"`
				StartLine int     `json:"startLine"`
			}
			if json.Unmarshal(f, &file) == nil && file.Content != nil {
				return numbered(*file.Content, file.StartLine), nil
			}
		}
		if c, ok := obj["content"]; ok {
			if s, ok := blocksText(c); ok {
				return s, nil
			}
		}
	}
	return string(compactJSON(resp)), nil
}

// numbered is a file read's content as Claude Code shows it to the model
// (and writes it in the transcript): each line after its number and a
// tab, from start (1 when not given).
func numbered(content string, start int) string {
	if start < 1 {
		start = 1
	}
	var b strings.Builder
	b.Grow(len(content) + len(content)/8)
	for i, line := range strings.Split(content, "\n") {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(strconv.Itoa(start + i))
		b.WriteByte('\t')
		b.WriteString(line)
	}
	return b.String()
}

// blocksText joins the text of content blocks ([{"type":"text","text":…}]),
// false when raw is not such a list.
func blocksText(raw json.RawMessage) (string, bool) {
	var blocks []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if json.Unmarshal(raw, &blocks) != nil || len(blocks) == 0 {
		return "", false
	}
	var parts []string
	for _, b := range blocks {
		if b.Type != "text" || b.Text == nil {
			return "", false
		}
		parts = append(parts, *b.Text)
	}
	return strings.Join(parts, "\n"), true
}

// readCapped reads a file of at most maxBytes.
func readCapped(path string, maxBytes int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return "", err
	}
	if int64(len(data)) > maxBytes {
		return "", fmt.Errorf("%s is over %d bytes (ingest.max_content_bytes)", path, maxBytes)
	}
	return string(data), nil
}

// inputFiles are the paths a tool's input names.
func inputFiles(input json.RawMessage) []string {
	var in map[string]any
	if json.Unmarshal(input, &in) != nil {
		return nil
	}
	var files []string
	for _, k := range []string{"file_path", "notebook_path", "path"} {
		if s, ok := in[k].(string); ok && s != "" {
			files = append(files, s)
		}
	}
	return files
}

func (r *Runner) postToolUse(ctx context.Context, p Payload, opts Options) (Result, error) {
	var res Result
	a := r.agentOf(p.SessionID, p.AgentID, p.AgentType)
	text, notes := toolText(p.ToolResponse, r.Eng.MaxContentBytes())
	res.Notes = append(res.Notes, notes...)
	now := r.now()
	files := inputFiles(p.ToolInput)
	meta := map[string]any{"harness": r.Harness, "via": "hook", "tool": p.ToolName}
	recs := []engine.Record{{Session: p.SessionID, Agent: a.id, AgentType: a.kind, Type: store.ToolCall,
		Content: ToolCallContent(p.ToolName, p.ToolInput), MsgID: p.ToolUseID, Time: now, Files: files, Metadata: meta}}
	if text != "" {
		recs = append(recs, engine.Record{Session: p.SessionID, Agent: a.id, AgentType: a.kind, Type: store.ToolResult,
			Content: []byte(text), MsgID: resultMsgID(p.ToolUseID), Parent: p.ToolUseID, Time: now, Files: files, Metadata: meta})
	}
	if int64(len(text)) > r.Eng.MaxContentBytes() {
		// Too large to store: keep the call, say so, and leave the
		// output to the harness.
		res.Notes = append(res.Notes, fmt.Sprintf("the result (%d bytes) is over ingest.max_content_bytes: not stored", len(text)))
		recs = recs[:1]
	}
	added, err := r.Eng.Add(ctx, recs)
	if ce := (*store.ConflictError)(nil); errors.As(err, &ce) {
		// An import stored the call or its result first, as the
		// transcript holds it (a preview of a large output): keep the
		// hook's too, under a variant id, rather than lose the output
		// or leave it unreplaced.
		renamed, verr := variants(ctx, r.Eng, recs, "~hook")
		if verr != nil {
			return res, verr
		}
		if renamed {
			res.Notes = append(res.Notes, "the transcript's import holds this tool's call or result with other content: both are kept")
			added, err = r.Eng.Add(ctx, recs)
		}
	}
	if err != nil {
		return res, err
	}
	res.Stored = stored(added)
	if opts.MaxToolTokens < 0 || len(added) < 2 || len(text) <= opts.MaxToolTokens || strings.HasPrefix(p.ToolName, EngramTools) {
		// engram's own tools return what the model asked for, sized by
		// their max_tokens: never replaced by a marker to themselves.
		return res, nil
	}
	if r.Harness == Codex {
		// Codex's hooks cannot replace a tool's output, and its own cut
		// (about 10,000 tokens, head and tail) is what the hook gets:
		// the store holds what the model saw.
		return res, nil
	}
	enc := r.Eng.Encoding()
	total := enc.Count(text)
	if total <= opts.MaxToolTokens {
		return res, nil
	}
	ent := added[1]
	ref := store.Reference{ID: outputRefID(p.SessionID, p.ToolUseID), Type: store.RefToolResults, SessionID: p.SessionID,
		AgentID: a.id, ContentIDs: []string{ent.ID}, TurnFrom: ent.Turn, TurnTo: ent.Turn, CreatedAt: now,
		Entities: files, QueryHints: toolHint(p.ToolName, p.ToolInput)}
	if !r.Eng.KeepsSecrets() {
		// The hint quotes the tool's input as it came (a command with a
		// token in it): it is stored and shown in the marker, redacted
		// as the tool call's record is.
		for i, h := range ref.QueryHints {
			ref.QueryHints[i], _ = secrets.Redact(h)
		}
	}
	c := r.clip(text, opts.KeepTokens)
	ref.TokensSaved = max(total-c.kept, 0)
	shown := c.show(ref)
	if err := r.Eng.Store().PutReference(ctx, ref); err != nil {
		// The same hook run again (installed for the user and the
		// project both) finds its reference made: the same output, the
		// same marker.
		old, gerr := r.Eng.Store().Reference(ctx, ref.ID)
		if ce := (*store.ConflictError)(nil); !errors.As(err, &ce) || gerr != nil || !slices.Equal(old.ContentIDs, ref.ContentIDs) {
			return res, err
		}
	}
	res.Refs = append(res.Refs, ref.ID)
	out, ok := replaceOutput(p.ToolResponse, shown)
	if !ok {
		res.Notes = append(res.Notes, "the "+p.ToolName+" tool's output has a shape engram does not replace: left whole")
		return res, nil
	}
	res.ToolOutput = out
	return res, nil
}

// outputRefID names the reference of a tool's replaced output.
func outputRefID(session, toolUseID string) string {
	id := "out-" + toolUseID
	if store.ValidRefID(id) {
		return id
	}
	sum := sha256.Sum256([]byte(session + "\x00" + toolUseID))
	return "out-" + hex.EncodeToString(sum[:12])
}

// toolHint is a short line that finds a tool call again: a command, a
// pattern, a path.
func toolHint(name string, input json.RawMessage) []string {
	var in map[string]any
	if json.Unmarshal(input, &in) != nil {
		return nil
	}
	for _, k := range []string{"command", "pattern", "query", "url", "file_path", "path"} {
		if s, ok := in[k].(string); ok && s != "" {
			return []string{name + " " + s}
		}
	}
	return nil
}

// clipped is a text cut to its head and tail.
type clipped struct {
	head, tail string
	// kept is the tokens the head and tail hold; left and lines the
	// lines left out and all the text's lines.
	kept, left, lines int
}

// clip cuts text to its head and tail of about keep tokens together (60 %
// head), at lines; a text whose first line alone is over the head's share
// keeps a piece of that line.
func (r *Runner) clip(text string, keep int) clipped {
	enc := r.Eng.Encoding()
	lines := strings.SplitAfter(strings.TrimSuffix(text, "\n"), "\n")
	if strings.HasSuffix(text, "\n") {
		lines[len(lines)-1] += "\n"
	}
	headRoom, tailRoom := keep*6/10, keep-keep*6/10
	h, hn := 0, 0
	for h < len(lines) {
		n := enc.Count(lines[h])
		if hn+n > headRoom {
			break
		}
		hn += n
		h++
	}
	t, tn := len(lines), 0
	for t > h {
		n := enc.Count(lines[t-1])
		if tn+n > tailRoom {
			break
		}
		tn += n
		t--
	}
	c := clipped{head: strings.Join(lines[:h], ""), tail: strings.Join(lines[t:], ""), left: t - h, lines: len(lines)}
	if h == 0 && t == len(lines) { // one long line at either end: cut by bytes
		c.head = cutUTF8(lines[0], headRoom*3)
		hn = enc.Count(c.head)
	}
	c.kept = hn + tn
	return c
}

// show is the clipped text with ref's marker between its head and tail,
// and a line that says what was left out.
func (c clipped) show(ref store.Reference) string {
	var b strings.Builder
	b.WriteString(c.head)
	if c.head != "" && !strings.HasSuffix(c.head, "\n") {
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "[… %d of %d lines left out here by engram; the whole output is stored: pass ref_id %q to retrieve_context, with a query or a line range to read only part of it]\n",
		c.left, c.lines, ref.ID)
	b.WriteString(ctxref.Render(ctxref.FromReference(ref)))
	b.WriteByte('\n')
	b.WriteString(c.tail)
	return b.String()
}

// replaceOutput is the tool's response with its text replaced by shown, in
// the tool's own shape (Claude Code ignores a bare string where the tool
// returns an object): a command's stdout, a file read's content, an MCP
// tool's text blocks, or a string for a tool that returns one. false when
// the shape is none of these.
func replaceOutput(resp json.RawMessage, shown string) (json.RawMessage, bool) {
	resp = bytes.TrimSpace(resp)
	if len(resp) == 0 {
		return nil, false
	}
	switch resp[0] {
	case '"':
		b, _ := json.Marshal(shown)
		return b, true
	case '[':
		if _, ok := blocksText(resp); ok {
			b, _ := json.Marshal([]map[string]string{{"type": "text", "text": shown}})
			return b, true
		}
		return nil, false
	case '{':
	default:
		return nil, false
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(resp, &obj) != nil {
		return nil, false
	}
	set := func(m map[string]json.RawMessage, k string, v any) {
		b, _ := json.Marshal(v)
		m[k] = b
	}
	switch {
	case obj["stdout"] != nil:
		set(obj, "stdout", shown)
		set(obj, "stderr", "")
		delete(obj, "persistedOutputPath")
		delete(obj, "persistedOutputSize")
	case obj["file"] != nil:
		var file map[string]json.RawMessage
		if json.Unmarshal(obj["file"], &file) != nil || file["content"] == nil {
			return nil, false
		}
		set(file, "content", shown)
		set(file, "numLines", strings.Count(shown, "\n")+1)
		set(obj, "file", file)
	case obj["content"] != nil:
		if _, ok := blocksText(obj["content"]); !ok {
			return nil, false
		}
		set(obj, "content", []map[string]string{{"type": "text", "text": shown}})
	default:
		return nil, false
	}
	b, err := json.Marshal(obj)
	return b, err == nil
}
