package hook

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
)

// Importer reads a harness's transcripts into the store.
type Importer struct {
	Eng     *engine.Engine
	Harness string
	// Progress, if set, is told the bytes read of the current file and
	// its size, after each batch.
	Progress func(path string, done, total int64)
}

// ImportReport says what an import did.
type ImportReport struct {
	Files int `json:"files"`
	// Bytes is what was read, from each file's last offset.
	Bytes int64 `json:"bytes"`
	Lines int   `json:"lines"`
	// Records were made from the lines; Stored of them were new (the
	// rest were stored before, by a hook or an earlier import).
	Records int `json:"records"`
	Stored  int `json:"stored"`
	// Raw counts lines kept as they are (types engram does not read, or
	// lines it could not parse: Corrupt of them).
	Raw     int `json:"raw"`
	Corrupt int `json:"corrupt"`
	// Injected counts engram's own injections, recognised and skipped.
	Injected int `json:"injected"`
	// Sessions are the sessions the lines belonged to.
	Sessions []string `json:"sessions"`
}

// Add adds another report's counts to r.
func (r *ImportReport) Add(o ImportReport) {
	r.Files += o.Files
	r.Bytes += o.Bytes
	r.Lines += o.Lines
	r.Records += o.Records
	r.Stored += o.Stored
	r.Raw += o.Raw
	r.Corrupt += o.Corrupt
	r.Injected += o.Injected
	for _, s := range o.Sessions {
		if !containsString(r.Sessions, s) {
			r.Sessions = append(r.Sessions, s)
		}
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// importState is what the store keeps of a file's import: how far it was
// read, what its first bytes were (a file replaced or cut is read again
// from its start), and the prompts counted per session and text hash.
type importState struct {
	Path    string                    `json:"path"`
	Offset  int64                     `json:"offset"`
	Head    string                    `json:"head"`
	Prompts map[string]map[string]int `json:"prompts,omitempty"`
	// Session is the session a Codex rollout named in its first line.
	Session string `json:"session,omitempty"`
}

// promptID names the next prompt of this text in a session, counting in
// the transcript as the hook counts in the store (PromptMsgID).
func (st *importState) promptID(session, text string) string {
	counts := st.Prompts[session]
	if counts == nil {
		counts = map[string]int{}
		st.Prompts[session] = counts
	}
	sum := sha256.Sum256([]byte(text))
	h := hex.EncodeToString(sum[:8])
	k := counts[h]
	counts[h] = k + 1
	return PromptMsgID(text, k)
}

// rawMsgID names a line kept as it is, by its bytes.
func rawMsgID(raw []byte) string {
	sum := sha256.Sum256(raw)
	return "raw:" + hex.EncodeToString(sum[:12])
}

// keepRaw keeps a line as it is, as a note.
func (im *Importer) keepRaw(out *lineResult, raw []byte, off int64, session, why string, meta map[string]any) {
	if meta == nil {
		meta = map[string]any{}
	}
	meta["harness"], meta["raw"], meta["offset"] = im.Harness, true, off
	if why != "" {
		meta["line_type"] = why
	}
	a := (&Runner{Harness: im.Harness}).agentOf(session, "", "")
	out.recs = append(out.recs, engine.Record{Session: session, Agent: a.id, AgentType: a.kind,
		Type: store.Note, Content: bytes.Clone(raw), MsgID: rawMsgID(raw), Metadata: meta})
	out.raw++
}

// headBytes is how much of a file's start identifies it.
const headBytes = 1024

func stateKey(harness, path string) string {
	sum := sha256.Sum256([]byte(path))
	return "import." + harness + "." + hex.EncodeToString(sum[:12])
}

func (im *Importer) state(ctx context.Context, path string) (importState, error) {
	st := importState{Path: path}
	v, err := im.Eng.Store().Setting(ctx, stateKey(im.Harness, path))
	if errors.Is(err, store.ErrNotFound) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal([]byte(v), &st); err != nil {
		return importState{Path: path}, nil // unreadable: read the file again; ids keep it idempotent
	}
	return st, nil
}

// batchRecords is how many records an import writes per transaction.
const batchRecords = 500

// File imports one transcript from where the last import of it stopped,
// up to its last whole line (a line still being written waits for the
// next import).
func (im *Importer) File(ctx context.Context, path string) (ImportReport, error) {
	var rep ImportReport
	path, err := filepath.Abs(path)
	if err != nil {
		return rep, err
	}
	f, err := os.Open(path)
	if err != nil {
		return rep, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return rep, err
	}
	if !fi.Mode().IsRegular() {
		return rep, fmt.Errorf("%s is not a regular file", path)
	}
	st, err := im.state(ctx, path)
	if err != nil {
		return rep, err
	}
	head := make([]byte, min(headBytes, fi.Size()))
	if _, err := io.ReadFull(f, head); err != nil {
		return rep, fmt.Errorf("read %s: %w", path, err)
	}
	headSum := sha256.Sum256(head)
	headHex := hex.EncodeToString(headSum[:])
	if st.Offset > fi.Size() || (st.Head != "" && st.Head != headHex && st.Offset >= int64(len(head))) {
		st = importState{Path: path} // replaced or cut: from the start
	}
	st.Head = headHex
	if st.Prompts == nil {
		st.Prompts = map[string]map[string]int{}
	}
	rep.Files = 1
	if st.Offset == fi.Size() {
		return rep, nil
	}
	if _, err := f.Seek(st.Offset, io.SeekStart); err != nil {
		return rep, err
	}
	br := bufio.NewReaderSize(f, 1<<20)
	stem := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	off := st.Offset
	var recs []engine.Record
	flush := func(upto int64) error {
		if len(recs) > 0 {
			n, err := im.add(ctx, recs)
			if err != nil {
				return err
			}
			rep.Stored += n
			rep.Records += len(recs)
			recs = recs[:0]
		}
		rep.Bytes += upto - st.Offset
		st.Offset = upto
		b, _ := json.Marshal(st)
		if err := im.Eng.Store().PutSetting(ctx, stateKey(im.Harness, path), string(b)); err != nil {
			return err
		}
		if im.Progress != nil {
			im.Progress(path, upto, fi.Size())
		}
		return nil
	}
	for {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			break // a last line without its newline is still being written
		}
		if err != nil {
			return rep, fmt.Errorf("read %s: %w", path, err)
		}
		lineOff := off
		off += int64(len(line))
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		rep.Lines++
		var lr lineResult
		if im.Harness == Codex {
			lr = im.codexRecords(bytes.TrimRight(line, "\r\n"), lineOff, stem, &st)
		} else {
			lr = im.lineRecords(bytes.TrimRight(line, "\r\n"), lineOff, stem, &st)
		}
		rep.Raw += lr.raw
		rep.Corrupt += lr.corrupt
		rep.Injected += lr.injected
		for _, rec := range lr.recs {
			if !containsString(rep.Sessions, rec.Session) {
				rep.Sessions = append(rep.Sessions, rec.Session)
			}
		}
		recs = append(recs, lr.recs...)
		if len(recs) >= batchRecords {
			if err := flush(off); err != nil {
				return rep, err
			}
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
	}
	if err := flush(off); err != nil {
		return rep, err
	}
	return rep, nil
}

// add stores records in one transaction. A record whose message id the
// session already holds with other content (a tool's result the hook
// stored whole, which the transcript holds as the model saw it) is
// stored under a variant id: the transcript's bytes are kept too.
func (im *Importer) add(ctx context.Context, recs []engine.Record) (int, error) {
	res, err := im.Eng.Add(ctx, recs)
	var ce *store.ConflictError
	if err == nil || !errors.As(err, &ce) {
		return stored(res), err
	}
	for i := range recs {
		if recs[i].MsgID == "" {
			continue
		}
		id, err := im.Eng.Store().MsgEntry(ctx, recs[i].Session, recs[i].MsgID)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return 0, err
		}
		if id != store.ID(recs[i].Content) {
			recs[i].MsgID += "~transcript"
		}
	}
	res, err = im.Eng.Add(ctx, recs)
	return stored(res), err
}

// line is the part of a Claude Code transcript line engram reads.
type line struct {
	Type        string          `json:"type"`
	UUID        string          `json:"uuid"`
	SessionID   string          `json:"sessionId"`
	AgentID     string          `json:"agentId"`
	IsSidechain bool            `json:"isSidechain"`
	IsMeta      bool            `json:"isMeta"`
	IsSummary   bool            `json:"isCompactSummary"`
	Timestamp   string          `json:"timestamp"`
	Message     json.RawMessage `json:"message"`
}

type message struct {
	Role    string          `json:"role"`
	Model   string          `json:"model"`
	Content json.RawMessage `json:"content"`
}

type block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

type lineResult struct {
	recs                   []engine.Record
	raw, corrupt, injected int
}

// lineRecords turns one transcript line into records.
func (im *Importer) lineRecords(raw []byte, off int64, stem string, st *importState) lineResult {
	var out lineResult
	var l line
	keepRaw := func(session, why string, meta map[string]any) { im.keepRaw(&out, raw, off, session, why, meta) }
	if err := json.Unmarshal(raw, &l); err != nil {
		out.corrupt++
		keepRaw(stem, "corrupt", map[string]any{"error": err.Error()})
		return out
	}
	session := l.SessionID
	if session == "" {
		session = stem
	}
	ag := im.agent(session, l)
	at, _ := time.Parse(time.RFC3339Nano, l.Timestamp)
	meta := func(extra ...any) map[string]any {
		m := map[string]any{"harness": im.Harness, "via": "transcript"}
		if l.UUID != "" {
			m["uuid"] = l.UUID
		}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i].(string)] = extra[i+1]
		}
		return m
	}
	rec := func(t store.ContentType, content []byte, msgID, parent string, m map[string]any) engine.Record {
		return engine.Record{Session: session, Agent: ag.id, AgentType: ag.kind, Type: t, Content: content,
			MsgID: msgID, Parent: parent, Time: at, Metadata: m}
	}
	var msg message
	if (l.Type != "user" && l.Type != "assistant") || json.Unmarshal(l.Message, &msg) != nil || len(msg.Content) == 0 {
		if injectedLine(raw) {
			// The harness's record of engram's own output (an
			// attachment of a hook's context or stdout).
			out.injected++
			return out
		}
		keepRaw(session, l.Type, nil)
		return out
	}
	var blocks []block
	if msg.Content[0] == '"' {
		var s string
		if json.Unmarshal(msg.Content, &s) != nil {
			keepRaw(session, l.Type, nil)
			return out
		}
		blocks = []block{{Type: "text", Text: s}}
	} else if json.Unmarshal(msg.Content, &blocks) != nil {
		keepRaw(session, l.Type, nil)
		return out
	}
	uuid := l.UUID
	if uuid == "" {
		uuid = rawMsgID(raw)
	}
	for i, b := range blocks {
		blockID := uuid
		if i > 0 {
			blockID = fmt.Sprintf("%s#%d", uuid, i)
		}
		switch {
		case b.Type == "text" && l.Type == "user":
			text, injected := unmark(b.Text)
			if injected {
				out.injected++
			}
			if strings.TrimSpace(text) == "" {
				continue
			}
			switch {
			case l.IsSummary:
				out.recs = append(out.recs, rec(store.Note, []byte(text), blockID, "", meta("kind", "compact_summary")))
			case l.IsMeta || isHarnessText(text):
				out.recs = append(out.recs, rec(store.Note, []byte(text), blockID, "", meta("kind", "harness")))
			default:
				out.recs = append(out.recs, rec(store.UserPrompt, []byte(text), st.promptID(session, text), "", meta()))
			}
		case b.Type == "text":
			if strings.TrimSpace(b.Text) == "" {
				continue
			}
			out.recs = append(out.recs, rec(store.AgentResponse, []byte(b.Text), blockID, "", meta()))
		case b.Type == "thinking":
			if strings.TrimSpace(b.Thinking) == "" {
				continue
			}
			out.recs = append(out.recs, rec(store.AgentResponse, []byte(b.Thinking), blockID, "", meta("kind", "thinking")))
		case b.Type == "tool_use" && b.ID != "":
			r := rec(store.ToolCall, ToolCallContent(b.Name, b.Input), b.ID, "", meta("tool", b.Name))
			r.Files = inputFiles(b.Input)
			out.recs = append(out.recs, r)
		case b.Type == "tool_result" && b.ToolUseID != "":
			text, _ := toolText(b.Content, im.Eng.MaxContentBytes())
			if strings.Contains(text, "[CTX-REF:") && strings.Contains(text, "left out here by engram") {
				out.injected++ // engram's own replacement of a result it stored whole
				continue
			}
			if text == "" {
				text = "(no output)"
			}
			m := meta()
			if b.IsError {
				m["is_error"] = true
			}
			out.recs = append(out.recs, rec(store.ToolResult, []byte(text), resultMsgID(b.ToolUseID), b.ToolUseID, m))
		default:
			bj, _ := json.Marshal(b)
			out.recs = append(out.recs, rec(store.Note, bj, blockID, "", meta("kind", b.Type)))
		}
	}
	return out
}

// agent is who a transcript line is recorded as: a sidechain's line
// belongs to a sub-agent of the session.
func (im *Importer) agent(session string, l line) agent {
	r := Runner{Harness: im.Harness}
	if !l.IsSidechain {
		return r.agentOf(session, "", "")
	}
	id := l.AgentID
	if id == "" {
		id = "sidechain"
	}
	return r.agentOf(session, id, "")
}

// unmark removes engram's marked injections from a text, and says
// whether it held any.
func unmark(s string) (string, bool) {
	found := false
	for {
		i := strings.Index(s, markOpen)
		if i < 0 {
			return s, found
		}
		j := strings.Index(s[i:], "</engram-context>")
		if j < 0 {
			return s[:i], true
		}
		found = true
		s = s[:i] + s[i+j+len("</engram-context>"):]
	}
}

// injectedLine is a line that holds engram's marked injection, in its
// text or escaped as JSON within a hook's stdout.
func injectedLine(raw []byte) bool {
	return bytes.Contains(raw, []byte(markOpen)) || bytes.Contains(raw, []byte(`\\u003cengram-context kind=`))
}

// isHarnessText is a user line the harness wrote, not the user: a slash
// command's echo or output, or a reminder.
func isHarnessText(s string) bool {
	t := strings.TrimSpace(s)
	for _, p := range []string{"<command-name>", "<command-message>", "<local-command-stdout>", "<local-command-stderr>", "<local-command-caveat>",
		"<system-reminder>", "Caveat: The messages below were generated by the user while running local commands"} {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return false
}

// Paths lists the transcripts under a directory (recursively: Claude
// Code keeps sub-agents' transcripts beside the session's), or the file
// itself.
func Paths(root string) ([]string, error) {
	fi, err := os.Stat(root)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return []string{root}, nil
	}
	var paths []string
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".jsonl") {
			paths = append(paths, p)
		}
		return nil
	})
	return paths, err
}

// Import reads every transcript under root (see Paths).
func (im *Importer) Import(ctx context.Context, root string) (ImportReport, error) {
	var rep ImportReport
	paths, err := Paths(root)
	if err != nil {
		return rep, err
	}
	for _, p := range paths {
		r, err := im.File(ctx, p)
		rep.Add(r)
		if err != nil {
			return rep, fmt.Errorf("%s: %w", p, err)
		}
	}
	return rep, nil
}
