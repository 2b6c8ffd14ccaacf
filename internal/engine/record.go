package engine

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/engramhq/engram/internal/store"
)

// Record is one message or tool event an agent saw, as a front end hands
// it to Add.
type Record struct {
	Session   string
	Agent     string
	AgentType string
	Type      store.ContentType
	// Content is kept byte for byte. It may hold any bytes, NUL and invalid
	// UTF-8 included; only its valid UTF-8 text is searchable.
	Content []byte
	// Turn is the session turn; zero lets the store assign it.
	Turn int
	// Time is when the agent saw the content; zero means now.
	Time time.Time
	// MsgID is the caller's identifier for the message, unique in the
	// session; adding it again with the same content is a no-op.
	MsgID string
	// Parent names what prompted this record: an entry ID, or the MsgID of
	// an earlier message of the same session (a tool result's tool call).
	Parent   string
	Files    []string
	Keywords []string
	Entities []string
	Metadata map[string]any
}

// FieldError says which field of a record is wrong.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return "field " + e.Field + ": " + e.Msg }

// RecordError locates an error in the records given to Add by index.
type RecordError struct {
	Index int
	Err   error
}

func (e *RecordError) Error() string { return fmt.Sprintf("record %d: %v", e.Index, e.Err) }
func (e *RecordError) Unwrap() error { return e.Err }

// atRecord wraps err with the record index, turning the store's validation
// errors into FieldErrors so that every front end reports fields alike.
func atRecord(i int, err error) error {
	var ve *store.ValidationError
	if errors.As(err, &ve) {
		err = &FieldError{Field: ve.Field, Msg: ve.Msg}
	}
	return &RecordError{Index: i, Err: err}
}

// Check validates a record without touching the store. Add runs it on every
// record; front ends that read many records run it first to report every
// bad one before writing any.
func (e *Engine) Check(r Record) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	switch {
	case len(r.Content) == 0:
		bad("content", "is empty")
	case int64(len(r.Content)) > e.opts.MaxContentBytes:
		bad("content", "is %s, over the limit of %s (ingest.max_content_bytes)", sizeString(int64(len(r.Content))), sizeString(e.opts.MaxContentBytes))
	}
	if r.Type == "" {
		bad("type", "is missing")
	} else if !r.Type.Valid() {
		bad("type", "unknown content type %q", r.Type)
	}
	if r.Turn < 0 {
		bad("turn", "is negative")
	}
	if r.Turn > 0 && r.Session == "" {
		bad("turn", "is set without a session")
	}
	if r.MsgID != "" && r.Session == "" {
		bad("msg_id", "is set without a session")
	}
	if r.Parent != "" && r.Session == "" && !store.ValidID(r.Parent) {
		bad("parent", "names a message but there is no session")
	}
	for _, f := range []struct{ name, v string }{
		{"session", r.Session}, {"agent", r.Agent}, {"agent_type", r.AgentType}, {"msg_id", r.MsgID}, {"parent", r.Parent},
	} {
		switch {
		case len(f.v) > store.MaxIdentifierBytes:
			bad(f.name, "is longer than %d bytes", store.MaxIdentifierBytes)
		case !utf8.ValidString(f.v):
			bad(f.name, "is not valid UTF-8")
		case f.name == "session" || f.name == "agent":
			// Names people read, in listings and on the dashboard.
			if err := store.CheckName(f.name, f.v); err != nil {
				bad(f.name, "%s", err.(*store.ValidationError).Msg)
			}
		}
	}
	return errors.Join(errs...)
}

func sizeString(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
