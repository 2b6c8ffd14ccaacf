package trajectory

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"unicode/utf8"
)

// Roles of messages.
const (
	System    = "system"
	User      = "user"
	Assistant = "assistant"
)

// A Message is one message of a run, as the agent saw it.
type Message struct {
	// Role is System, User or Assistant.
	Role string
	// Content is the message's text. Content that is not a JSON string is
	// kept as baselines.py reads it: as Python's json.dumps prints it.
	Content string
}

// A Run is one agent run: its messages in order and their tokens.
type Run struct {
	// ID is the run's instance_id, e.g. "astropy__astropy-12907".
	ID       string
	Messages []Message
	// Tokens holds each message's o200k_base tokens, from the counts file.
	Tokens []int
}

// A LineError is bad input at a line of a file.
type LineError struct {
	File string
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// Counts holds the token counts of a counts file, by run.
type Counts struct {
	file string
	runs map[string]countsLine
}

type countsLine struct {
	line   int
	counts []int
}

// Len reports how many runs c has counts for.
func (c *Counts) Len() int { return len(c.runs) }

// Load reads the runs of the trajectories file at path (gzip or plain JSON
// Lines) with their tokens from the counts file at countsPath. A missing
// file is an error wrapping fs.ErrNotExist.
func Load(path, countsPath string) ([]Run, error) {
	cf, err := os.Open(countsPath)
	if err != nil {
		return nil, err
	}
	defer cf.Close()
	counts, err := ReadCounts(cf, countsPath)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadRuns(f, path, counts)
}

// ReadCounts reads a counts file (gzip or plain JSON Lines) from r, one run
// a line: {"id": instance_id, "counts": [tokens of each message]}. name
// names the file in errors. Blank lines are skipped; a line that is not
// such an object, a count that is not a whole number ≥ 0 and an id seen
// before are errors (*LineError).
func ReadCounts(r io.Reader, name string) (*Counts, error) {
	c := &Counts{file: name, runs: map[string]countsLine{}}
	err := eachLine(r, name, func(n int, line []byte) error {
		obj, err := decodeObject(line)
		if err != nil {
			return err
		}
		var id string
		if err := field(obj, "id", &id); err != nil {
			return err
		}
		if id == "" {
			return errors.New(`no "id": want {"id": instance_id, "counts": [tokens of each message]}`)
		}
		var nums []json.RawMessage
		if err := field(obj, "counts", &nums); err != nil {
			return fmt.Errorf("run %q: %w", id, err)
		}
		if nums == nil {
			return fmt.Errorf(`run %q: no "counts"`, id)
		}
		counts := make([]int, len(nums))
		for i, num := range nums {
			v, err := strconv.ParseInt(string(num), 10, 64)
			if err != nil || v < 0 || v > maxTokens {
				return fmt.Errorf("run %q: count %d is %s, not a whole number of tokens", id, i, num)
			}
			counts[i] = int(v)
		}
		if prev, ok := c.runs[id]; ok {
			return fmt.Errorf("run %q: counted already at line %d", id, prev.line)
		}
		c.runs[id] = countsLine{line: n, counts: counts}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// maxTokens bounds a message's count (a thousand times the largest context
// window), so that sums over a replay stay far from overflowing.
const maxTokens = 1 << 32

// ReadRuns reads trajectories (gzip or plain JSON Lines) from r, one run a
// line: {"instance_id": ..., "messages": [{"role": ..., "content": ...}]}
// (other fields are ignored), with each run's tokens from counts; with nil
// counts the runs have no Tokens (for a reader that counts them itself).
// name names the file in errors. Blank lines are skipped. A line that is not
// such an object, a role other than system, user and assistant, a message
// without content, and a run that counts has no counts for, or counts of
// another length, are errors (*LineError).
func ReadRuns(r io.Reader, name string, counts *Counts) ([]Run, error) {
	var runs []Run
	err := eachLine(r, name, func(n int, line []byte) error {
		obj, err := decodeObject(line)
		if err != nil {
			return err
		}
		var id string
		if err := field(obj, "instance_id", &id); err != nil {
			return err
		}
		if id == "" {
			return errors.New(`no "instance_id"`)
		}
		var msgs []map[string]json.RawMessage
		if err := field(obj, "messages", &msgs); err != nil {
			return fmt.Errorf("run %q: %w", id, messageError(obj["messages"], err))
		}
		if msgs == nil {
			return fmt.Errorf(`run %q: no "messages" list`, id)
		}
		run := Run{ID: id, Messages: make([]Message, len(msgs))}
		for i, msg := range msgs {
			m, err := decodeMessage(msg)
			if err != nil {
				return fmt.Errorf("run %q: message %d: %w", id, i, err)
			}
			run.Messages[i] = m
		}
		if counts == nil {
			runs = append(runs, run)
			return nil
		}
		c, ok := counts.runs[id]
		if !ok {
			return fmt.Errorf("run %q: no token counts in %s", id, counts.file)
		}
		if len(c.counts) != len(run.Messages) {
			return fmt.Errorf("run %q: %d messages, but %s:%d counts %d", id, len(run.Messages), counts.file, c.line, len(c.counts))
		}
		run.Tokens = c.counts
		runs = append(runs, run)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return runs, nil
}

// messageError says which message is not an object, when one is not, and
// returns err otherwise.
func messageError(raw json.RawMessage, err error) error {
	var msgs []json.RawMessage
	if json.Unmarshal(raw, &msgs) != nil {
		return err
	}
	for i, m := range msgs {
		if _, merr := decodeObject(m); merr != nil {
			return fmt.Errorf("message %d: %w", i, merr)
		}
	}
	return err
}

// decodeMessage decodes one message, given as its members: role and
// content, other members ignored.
func decodeMessage(obj map[string]json.RawMessage) (Message, error) {
	if obj == nil {
		return Message{}, errors.New("null where an object belongs")
	}
	var role string
	if err := field(obj, "role", &role); err != nil {
		return Message{}, err
	}
	switch role {
	case System, User, Assistant:
	case "":
		return Message{}, errors.New(`no "role"`)
	default:
		return Message{}, fmt.Errorf("role %q: want system, user or assistant", role)
	}
	content, ok := obj["content"]
	if !ok {
		return Message{}, errors.New(`no "content"`)
	}
	if content[0] == '"' {
		var s string
		if err := json.Unmarshal(content, &s); err != nil {
			return Message{}, fmt.Errorf("content: %w", err)
		}
		return Message{Role: role, Content: s}, nil
	}
	s, err := pyDumps(content)
	if err != nil {
		return Message{}, fmt.Errorf("content: %w", err)
	}
	return Message{Role: role, Content: s}, nil
}

// decodeObject decodes a JSON object into its members. Keys are matched
// exactly later (encoding/json matches struct fields regardless of case,
// where Python does not); a key given twice counts once, the last time,
// as in Python.
func decodeObject(data []byte) (map[string]json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("a JSON %s where an object belongs", te.Value)
		}
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if obj == nil {
		return nil, errors.New("null where an object belongs")
	}
	return obj, nil
}

// field decodes the member key of obj into dst; a member that is absent or
// null leaves dst as it is.
func field(obj map[string]json.RawMessage, key string, dst any) error {
	raw, ok := obj[key]
	if !ok || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("%q holds a JSON %s where %s belongs", key, te.Value, jsonKind(te.Type.Kind().String()))
		}
		return fmt.Errorf("%q: %w", key, err)
	}
	return nil
}

// jsonKind names a Go kind as the JSON value it decodes from.
func jsonKind(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "slice":
		return "a list"
	case "struct", "map":
		return "an object"
	default:
		return "a number"
	}
}

// eachLine calls fn with each non-blank line of r, numbered from 1,
// decompressing r first when it is gzip. An error from fn or in reading
// is returned as a *LineError.
func eachLine(r io.Reader, name string, fn func(n int, line []byte) error) error {
	br := bufio.NewReaderSize(r, 1<<20)
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return &LineError{File: name, Line: 1, Err: fmt.Errorf("read gzip: %w", err)}
		}
		defer func() { _ = zr.Close() }() // reading reports what Close would
		br = bufio.NewReaderSize(zr, 1<<20)
	}
	n := 0
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			n++
			if len(bytes.TrimSpace(line)) > 0 {
				if !utf8.Valid(line) {
					return &LineError{File: name, Line: n, Err: errors.New("not UTF-8")}
				}
				if ferr := fn(n, line); ferr != nil {
					return &LineError{File: name, Line: n, Err: ferr}
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return &LineError{File: name, Line: n + 1, Err: err}
		}
	}
}
