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
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
	// Files, if set, is told how many of the files an Import found it has
	// read, after each.
	Files func(done, total int)
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
	// Skipped counts records engram could not store (too large, a
	// session id it cannot hold), left out so that the rest is stored.
	Skipped int `json:"skipped,omitempty"`
	// Failed counts files and directories that could not be read.
	Failed int `json:"failed,omitempty"`
	// Problems say where records were skipped or mended and which files
	// could not be read: the first MaxProblems of them.
	Problems []ImportProblem `json:"problems,omitempty"`
	// MoreProblems counts the problems past the first MaxProblems.
	MoreProblems int `json:"more_problems,omitempty"`
	// Sessions are the sessions the lines belonged to.
	Sessions []string `json:"sessions"`
}

// ImportProblem is a record left out or mended, or a file or directory
// not read.
type ImportProblem struct {
	Path string `json:"path"`
	// Line is the line's number in the file (from 1), 0 for the file
	// itself.
	Line int    `json:"line,omitempty"`
	Err  string `json:"error"`
}

func (p ImportProblem) String() string {
	if p.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", p.Path, p.Line, p.Err)
	}
	return p.Path + ": " + p.Err
}

// MaxProblems bounds the problems a report lists; the counts go on.
const MaxProblems = 100

func (r *ImportReport) problem(p ImportProblem) {
	if len(r.Problems) < MaxProblems {
		r.Problems = append(r.Problems, p)
	} else {
		r.MoreProblems++
	}
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
	r.Skipped += o.Skipped
	r.Failed += o.Failed
	for _, p := range o.Problems {
		r.problem(p)
	}
	r.MoreProblems += o.MoreProblems
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
	Path   string `json:"path"`
	Offset int64  `json:"offset"`
	Head   string `json:"head"`
	// HeadLen is how many bytes Head hashes: the file's first ones, up
	// to headBytes. Zero in states written before it was kept, whose
	// Head hashed as many as the file then had, up to headBytes.
	HeadLen int64                     `json:"head_len,omitempty"`
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
	// Before opening it: opening a FIFO waits for a writer.
	if fi, err := os.Stat(path); err != nil {
		return rep, &FileError{err}
	} else if !fi.Mode().IsRegular() {
		return rep, &FileError{errors.New("not a regular file")}
	}
	f, err := os.Open(path)
	if err != nil {
		return rep, &FileError{err}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return rep, &FileError{err}
	}
	st, err := im.state(ctx, path)
	if err != nil {
		return rep, err
	}
	head := make([]byte, min(headBytes, fi.Size()))
	if _, err := io.ReadFull(f, head); err != nil {
		return rep, &FileError{err}
	}
	hash := func(b []byte) string { sum := sha256.Sum256(b); return hex.EncodeToString(sum[:]) }
	headHex := hash(head)
	// The file was replaced or cut if it is shorter than what was read,
	// or its first bytes are not those read last time.
	replaced := st.Offset > fi.Size()
	switch {
	case st.Head == "" || replaced:
	case st.HeadLen > 0:
		replaced = st.HeadLen > int64(len(head)) || hash(head[:st.HeadLen]) != st.Head
	default:
		replaced = st.Head != headHex && st.Offset >= int64(len(head))
	}
	if replaced {
		st = importState{Path: path} // from the start
	}
	st.Head, st.HeadLen = headHex, int64(len(head))
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
	// lineNo counts the lines read, from the import's start: a line's
	// number in the file is known only when reading from its start.
	lineNo, fromStart := 0, st.Offset == 0
	var recs []engine.Record
	var recLines []int // each record's line
	flush := func(upto int64) error {
		if len(recs) > 0 {
			n, left, err := im.add(ctx, recs)
			if err != nil {
				return err
			}
			slices.SortStableFunc(left, func(a, b leftOut) int { return a.index - b.index })
			for _, l := range left {
				p := ImportProblem{Path: path, Line: recLines[l.index], Err: l.why}
				if !fromStart {
					p.Err = fmt.Sprintf("the %s line read this time: %s", ordinal(recLines[l.index]), l.why)
					p.Line = 0
				}
				if l.skipped {
					rep.Skipped++
				}
				rep.problem(p)
			}
			rep.Stored += n
			rep.Records += len(recs) - skippedOf(left)
			recs, recLines = recs[:0], recLines[:0]
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
			return rep, &FileError{err}
		}
		lineOff := off
		off += int64(len(line))
		lineNo++
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		rep.Lines++
		body := bytes.TrimRight(line, "\r\n")
		if lineOff == 0 {
			body = bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")) // a byte order mark
		}
		var lr lineResult
		if im.Harness == Codex {
			lr = im.codexRecords(body, lineOff, stem, &st)
		} else {
			lr = im.lineRecords(body, lineOff, stem, &st)
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
		for range lr.recs {
			recLines = append(recLines, lineNo)
		}
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
	if rep.Lines >= 3 && rep.Raw == rep.Lines && rep.Corrupt < rep.Lines {
		// Every line JSON, none of them this harness's.
		other := Codex
		if im.Harness == Codex {
			other = ClaudeCode
		}
		rep.problem(ImportProblem{Path: path, Err: fmt.Sprintf(
			"none of its %d lines is a %s transcript's (all kept raw): is it %s's? (engram import %s)", rep.Lines, im.Harness, other, other)})
	}
	return rep, nil
}

// leftOut is a record add could not store as it was: skipped, or
// mended (stored without what was wrong).
type leftOut struct {
	index   int
	why     string
	skipped bool
}

func skippedOf(left []leftOut) int {
	n := 0
	for _, l := range left {
		if l.skipped {
			n++
		}
	}
	return n
}

// add stores records in one transaction. A record whose message id the
// session already holds with other content (a tool's result the hook
// stored whole, which the transcript holds as the model saw it) is
// stored under a variant id: the transcript's bytes are kept too. A
// record engram cannot store does not hold the others back: one whose
// parent is not stored (its call's line was corrupt, and kept raw) is
// stored without it, and one that cannot be stored at all (over
// ingest.max_content_bytes, a session id engram cannot hold) is left
// out; add says which, by index in recs.
func (im *Importer) add(ctx context.Context, recs []engine.Record) (int, []leftOut, error) {
	idx := make([]int, len(recs)) // recs[i] is the caller's idx[i]
	for i := range idx {
		idx[i] = i
	}
	var left []leftOut
	variants := false
	for {
		res, err := im.Eng.Add(ctx, recs)
		if err == nil {
			return stored(res), left, nil
		}
		var ce *store.ConflictError
		if errors.As(err, &ce) && !variants {
			variants = true
			if err := im.variants(ctx, recs); err != nil {
				return 0, nil, err
			}
			continue
		}
		bad := recordErrors(err)
		if len(bad) == 0 {
			return 0, nil, err
		}
		skip := map[int]bool{}
		for i, e := range bad {
			var fe *engine.FieldError
			if errors.As(e, &fe) && fe.Field == "parent" && recs[i].Parent != "" {
				left = append(left, leftOut{index: idx[i], why: "stored without its parent: " + fe.Msg})
				recs[i].Parent = ""
				continue
			}
			left = append(left, leftOut{index: idx[i], why: "not stored: " + e.Error(), skipped: true})
			skip[i] = true
		}
		if len(skip) > 0 {
			var keep []engine.Record
			var keepIdx []int
			for i := range recs {
				if !skip[i] {
					keep, keepIdx = append(keep, recs[i]), append(keepIdx, idx[i])
				}
			}
			recs, idx = keep, keepIdx
		}
		if len(recs) == 0 {
			return 0, left, nil
		}
	}
}

// recordErrors returns the errors of Engine.Add that say a record is
// invalid (a field engram refuses), by the record's index; none if err
// holds any other error. A store failing on a record (a full disk, a
// lock timeout) is no reason to leave it out: the import stops, and the
// next one reads it again.
func recordErrors(err error) map[int]error {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	out := map[int]error{}
	for _, e := range errs {
		var re *engine.RecordError
		var fe *engine.FieldError
		if !errors.As(e, &re) || !errors.As(re.Err, &fe) {
			return nil
		}
		out[re.Index] = re.Err
	}
	return out
}

// variants gives a record whose message id the session already holds
// with other content a variant id.
func (im *Importer) variants(ctx context.Context, recs []engine.Record) error {
	_, err := variants(ctx, im.Eng, recs, "~transcript")
	return err
}

// variants renames, to its message id and suffix, each record whose
// message id its session already holds with other content, so that both
// are kept: what a hook saw of a tool's result and what the transcript
// holds of it. It says whether any was renamed.
func variants(ctx context.Context, eng *engine.Engine, recs []engine.Record, suffix string) (bool, error) {
	renamed := false
	for i := range recs {
		if recs[i].MsgID == "" {
			continue
		}
		id, err := eng.Store().MsgEntry(ctx, recs[i].Session, recs[i].MsgID)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return false, err
		}
		if id != eng.ContentID(recs[i].Content) {
			recs[i].MsgID += suffix
			renamed = true
		}
	}
	return renamed, nil
}

// FileError is a transcript that could not be read: an import goes on to
// the next.
type FileError struct{ Err error }

func (e *FileError) Error() string {
	var pe *fs.PathError
	if errors.As(e.Err, &pe) {
		return pe.Err.Error()
	}
	return e.Err.Error()
}
func (e *FileError) Unwrap() error { return e.Err }

// ordinal is 1st, 2nd, 3rd, 4th...
func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return strconv.Itoa(n) + suffix
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
	var raws []json.RawMessage // each block as the line holds it
	if msg.Content[0] == '"' {
		var s string
		if json.Unmarshal(msg.Content, &s) != nil {
			keepRaw(session, l.Type, nil)
			return out
		}
		blocks = []block{{Type: "text", Text: s}}
	} else {
		if json.Unmarshal(msg.Content, &raws) != nil {
			keepRaw(session, l.Type, nil)
			return out
		}
		blocks = make([]block, len(raws))
		for i, r := range raws {
			if json.Unmarshal(r, &blocks[i]) != nil {
				blocks[i] = block{} // kept as it is, below
			}
		}
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
			case l.IsSidechain:
				// A sub-agent's task: no hook saw it, and the same task
				// given to two sub-agents is two prompts, each named by
				// its own line (prompt ids count per transcript file).
				out.recs = append(out.recs, rec(store.UserPrompt, []byte(text), blockID, "", meta()))
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
			// An image, a document, redacted thinking, a block of a kind
			// engram does not read: kept as the line holds it.
			bj, _ := json.Marshal(b)
			if raws != nil {
				bj = raws[i]
			}
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
// itself. A session's own transcript comes before its sub-agents' (kept
// in a directory of the session's name), so that its turns come first.
// What cannot be read below root is reported in problems, not an error.
func Paths(root string) (paths []string, problems []ImportProblem, err error) {
	fi, err := os.Stat(root)
	if err != nil {
		return nil, nil, &FileError{err}
	}
	if !fi.IsDir() {
		return []string{root}, nil, nil
	}
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if p == root {
				return &FileError{err}
			}
			problems = append(problems, ImportProblem{Path: p, Err: (&FileError{err}).Error()})
			if d != nil && d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() && strings.HasSuffix(p, ".jsonl") {
			paths = append(paths, p)
		}
		return nil
	})
	// <id>.jsonl before <id>/...: WalkDir visits the directory "<id>"
	// first, its name being the shorter.
	slices.SortStableFunc(paths, func(a, b string) int {
		return strings.Compare(strings.TrimSuffix(a, ".jsonl"), strings.TrimSuffix(b, ".jsonl"))
	})
	return paths, problems, err
}

// Import reads every transcript under root (see Paths). A file or
// directory that cannot be read is reported (Failed, Problems) and the
// rest read; what stops it is the store failing, or ctx.
func (im *Importer) Import(ctx context.Context, root string) (ImportReport, error) {
	var rep ImportReport
	paths, problems, err := Paths(root)
	var fe *FileError
	if errors.As(err, &fe) {
		rep.Failed++
		rep.problem(ImportProblem{Path: root, Err: fe.Error()})
		return rep, nil
	}
	if err != nil {
		return rep, err
	}
	for _, p := range problems {
		rep.Failed++
		rep.problem(p)
	}
	for i, p := range paths {
		r, err := im.File(ctx, p)
		if im.Files != nil {
			im.Files(i+1, len(paths))
		}
		rep.Add(r)
		if errors.As(err, &fe) {
			rep.Failed++
			rep.problem(ImportProblem{Path: p, Err: fe.Error()})
			continue
		}
		if err != nil {
			return rep, fmt.Errorf("%s: %w", p, err)
		}
	}
	return rep, nil
}
