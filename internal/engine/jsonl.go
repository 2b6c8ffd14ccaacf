package engine

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/engramhq/engram/internal/store"
)

// The `engram add` wire format is JSON Lines: one JSON object per line, for
// one message or tool event. Fields:
//
//	session     string   session id (or --session)
//	agent       string   agent id (or --agent)
//	agent_type  string   the agent's role, such as engineer (or --agent-type)
//	type        string   content type: user_prompt, agent_response, tool_call, ...
//	role        string   instead of type: user, assistant, tool, system
//	content     string   the text, kept byte for byte; any other JSON value
//	                     (a tool call's arguments) is kept as compact JSON
//	content_base64 string  instead of content: bytes that are not UTF-8 text
//	turn        integer  session turn; omitted: assigned
//	time        string   RFC 3339; omitted: now
//	msg_id      string   the caller's id for the message, unique per session
//	parent      string   msg_id of an earlier message in the session, or an entry id
//	files, keywords, entities   arrays of strings
//	metadata    object   anything else
//
// Blank lines are skipped. Unknown fields are errors, so that a misspelt
// field is not silently dropped.

// Line is a record read from a JSON Lines input, with its line number.
type Line struct {
	N int
	Record
}

// LineError locates an error in a JSON Lines input.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// MaxLineErrors bounds the errors ReadJSONL reports before it stops reading.
const MaxLineErrors = 20

var roleTypes = map[string]store.ContentType{
	"user":      store.UserPrompt,
	"human":     store.UserPrompt,
	"assistant": store.AgentResponse,
	"agent":     store.AgentResponse,
	"model":     store.AgentResponse,
	"tool":      store.ToolResult,
	"system":    store.Note,
}

type wireRecord struct {
	Session   string          `json:"session"`
	Agent     string          `json:"agent"`
	AgentType string          `json:"agent_type"`
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	Content64 *string         `json:"content_base64"`
	Turn      int             `json:"turn"`
	Time      string          `json:"time"`
	MsgID     string          `json:"msg_id"`
	Parent    string          `json:"parent"`
	Files     []string        `json:"files"`
	Keywords  []string        `json:"keywords"`
	Entities  []string        `json:"entities"`
	Metadata  map[string]any  `json:"metadata"`
}

// wireFields lists the fields of wireRecord, for error messages.
func wireFields() string {
	fields := []string{"session", "agent", "agent_type", "type", "role", "content", "content_base64", "turn", "time",
		"msg_id", "parent", "files", "keywords", "entities", "metadata"}
	sort.Strings(fields)
	return strings.Join(fields, ", ")
}

// ReadJSONL reads every record of a JSON Lines input and checks it, so that
// a caller can refuse the whole input before writing any of it. defaults
// supplies Session, Agent and AgentType to lines that leave them out. All
// bad lines are reported (up to MaxLineErrors) as *LineError.
func (e *Engine) ReadJSONL(r io.Reader, defaults Record) ([]Line, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	maxLine := 6*e.opts.MaxContentBytes + 1<<20 // JSON escapes take up to 6 bytes per byte
	var (
		out  []Line
		errs []error
	)
	for n := 1; ; n++ {
		line, err := readLine(br, maxLine)
		if errors.Is(err, io.EOF) && line == nil {
			break
		}
		if errors.Is(err, errLineTooLong) {
			errs = append(errs, &LineError{Line: n, Err: fmt.Errorf("longer than %s", sizeString(maxLine))})
		} else if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("read input at line %d: %w", n, err)
		} else if len(bytes.TrimSpace(line)) > 0 {
			rec, lerr := e.decodeLine(line, defaults)
			if lerr == nil {
				lerr = e.Check(rec)
			}
			if lerr != nil {
				for _, one := range unjoin(lerr) {
					errs = append(errs, &LineError{Line: n, Err: one})
				}
			} else {
				out = append(out, Line{N: n, Record: rec})
			}
		}
		if len(errs) >= MaxLineErrors {
			errs = append(errs, fmt.Errorf("stopped after %d errors", len(errs)))
			break
		}
		if errors.Is(err, io.EOF) {
			break
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

var errLineTooLong = errors.New("line too long")

// readLine returns the next line without its newline. A line over max
// bytes is skipped to its end and reported as errLineTooLong.
func readLine(br *bufio.Reader, max int64) ([]byte, error) {
	var line []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if int64(len(line)+len(chunk)) > max {
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if tooLong && (err == nil || errors.Is(err, io.EOF)) {
			return []byte{}, errLineTooLong
		}
		if err != nil {
			if len(line) == 0 {
				return nil, err
			}
			return bytes.TrimSuffix(line, []byte("\r")), err
		}
		line = bytes.TrimSuffix(line[:len(line)-1], []byte("\r"))
		return line, nil
	}
}

func (e *Engine) decodeLine(line []byte, defaults Record) (Record, error) {
	if !utf8.Valid(line) {
		off := invalidUTF8Offset(line)
		if field := fieldAt(line, off); field != "" {
			return Record{}, &FieldError{Field: field, Msg: fmt.Sprintf("invalid UTF-8 at byte %d (JSON text must be UTF-8; send bytes that are not text as content_base64)", off)}
		}
		return Record{}, fmt.Errorf("invalid UTF-8 at byte %d", off)
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var w wireRecord
	if err := dec.Decode(&w); err != nil {
		return Record{}, jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Record{}, errors.New("more than one JSON value on the line")
	}
	rec := Record{
		Session: w.Session, Agent: w.Agent, AgentType: w.AgentType, Turn: w.Turn,
		MsgID: w.MsgID, Parent: w.Parent, Files: w.Files, Keywords: w.Keywords,
		Entities: w.Entities, Metadata: w.Metadata,
	}
	if rec.Session == "" {
		rec.Session = defaults.Session
	}
	if rec.Agent == "" {
		rec.Agent = defaults.Agent
	}
	if rec.AgentType == "" {
		rec.AgentType = defaults.AgentType
	}
	var errs []error
	switch {
	case w.Type != "":
		rec.Type = store.ContentType(w.Type)
	case w.Role != "":
		t, ok := roleTypes[strings.ToLower(w.Role)]
		if !ok {
			errs = append(errs, &FieldError{Field: "role", Msg: fmt.Sprintf("unknown role %q (use user, assistant, tool or system, or set type)", w.Role)})
		}
		rec.Type = t
	default:
		rec.Type = defaults.Type
		if rec.Type == "" {
			errs = append(errs, &FieldError{Field: "type", Msg: "is missing (set type, or role)"})
		}
	}
	var content []byte
	var err error
	switch {
	case w.Content64 != nil && len(w.Content) > 0:
		err = &FieldError{Field: "content_base64", Msg: "given with content: give one of them"}
	case w.Content64 != nil:
		if content, err = base64.StdEncoding.DecodeString(*w.Content64); err != nil {
			err = &FieldError{Field: "content_base64", Msg: "not standard base64: " + err.Error()}
		} else if len(content) == 0 {
			err = &FieldError{Field: "content_base64", Msg: "is empty"}
		}
	default:
		content, err = decodeContent(w.Content)
	}
	if err != nil {
		errs = append(errs, err)
	}
	rec.Content = content
	if w.Time != "" {
		t, err := time.Parse(time.RFC3339Nano, w.Time)
		if err != nil {
			errs = append(errs, &FieldError{Field: "time", Msg: fmt.Sprintf("%q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", w.Time)})
		}
		rec.Time = t
	}
	return rec, errors.Join(errs...)
}

// decodeContent returns the content a line carries: a JSON string's text,
// or any other JSON value as compact JSON.
func decodeContent(raw json.RawMessage) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, &FieldError{Field: "content", Msg: "is missing"}
	}
	if raw[0] != '"' {
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err != nil {
			return nil, &FieldError{Field: "content", Msg: err.Error()}
		}
		return b.Bytes(), nil
	}
	// encoding/json turns unpaired UTF-16 surrogate escapes into U+FFFD
	// without a word; that would store other bytes than were sent.
	if off := LoneSurrogate(raw); off >= 0 {
		return nil, &FieldError{Field: "content", Msg: fmt.Sprintf("unpaired UTF-16 surrogate escape at byte %d of the value", off)}
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, &FieldError{Field: "content", Msg: err.Error()}
	}
	return []byte(s), nil
}

// LoneSurrogate returns the offset of a \uD800-\uDFFF escape in JSON
// text (a string, or any value: escapes are only in strings) that is not
// a high surrogate followed by a low one, or -1. encoding/json decodes
// one to U+FFFD without a word.
func LoneSurrogate(raw []byte) int {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
			return 0, false
		}
		var r rune
		for _, c := range raw[i+2 : i+6] {
			switch {
			case '0' <= c && c <= '9':
				r = r<<4 | rune(c-'0')
			case 'a' <= c && c <= 'f':
				r = r<<4 | rune(c-'a'+10)
			case 'A' <= c && c <= 'F':
				r = r<<4 | rune(c-'A'+10)
			default:
				return 0, false
			}
		}
		return r, true
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		r, ok := hex4(i)
		if !ok {
			i++ // skip the escaped character, which may be a backslash
			continue
		}
		switch {
		case r >= 0xD800 && r <= 0xDBFF:
			if lo, ok := hex4(i + 6); ok && lo >= 0xDC00 && lo <= 0xDFFF {
				i += 11
				continue
			}
			return i
		case r >= 0xDC00 && r <= 0xDFFF:
			return i
		}
		i += 5
	}
	return -1
}

// jsonError rewords encoding/json's errors to name the field.
func jsonError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("invalid JSON at byte %d: %v", se.Offset, se)
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return fmt.Errorf("want a JSON object, got %s", te.Value)
		}
		want := te.Type.String()
		switch want {
		case "[]string":
			want = "an array of strings"
		case "map[string]interface {}":
			want = "an object"
		case "int":
			want = "an integer"
		}
		return &FieldError{Field: field, Msg: fmt.Sprintf("want %s, got %s", want, te.Value)}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return &FieldError{Field: name, Msg: "unknown field (known: " + wireFields() + ")"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("invalid JSON: the line ends inside a value")
	}
	return fmt.Errorf("invalid JSON: %w", err)
}

func invalidUTF8Offset(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// fieldAt returns the top-level field of a JSON object whose value spans
// byte offset off, or "".
func fieldAt(line []byte, off int) string {
	dec := json.NewDecoder(bytes.NewReader(line))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return ""
		}
		key, _ := t.(string)
		start := dec.InputOffset()
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return ""
		}
		if int64(off) >= start && int64(off) < dec.InputOffset() {
			return key
		}
	}
	return ""
}
