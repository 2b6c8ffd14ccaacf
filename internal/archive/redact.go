package archive

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/engramhq/engram/internal/secrets"
	"github.com/engramhq/engram/internal/store"
)

// write runs fn in a store write transaction, as every write of the
// archive does: it is the one path by which anything reaches the archive's
// tables, so it is where secrets are redacted (unless Options.KeepSecrets),
// as the engine redacts messages and the indexer files. Records, agents
// and events are redacted in place before they are written, so what the
// writer goes on to use (the mirror, the write's answer) is what the store
// holds.
func (a *Archive) write(ctx context.Context, fn func(tx store.ArchiveTx) error) error {
	return a.st.ArchiveWrite(ctx, func(tx store.ArchiveTx) error {
		if a.opts.KeepSecrets {
			return fn(tx)
		}
		return fn(redactTx{tx})
	})
}

// redactTx redacts what it appends.
type redactTx struct{ store.ArchiveTx }

func (t redactTx) Append(r *store.ArchiveRecord) error {
	redactRecord(r)
	return t.ArchiveTx.Append(r)
}

func (t redactTx) PutAgent(ag store.ArchiveAgent) error {
	redactString(&ag.Name)
	redactString(&ag.Model)
	redactString(&ag.Role)
	return t.ArchiveTx.PutAgent(ag)
}

func (t redactTx) AppendEvent(e *store.ArchiveEvent) error {
	redactString(&e.Detail)
	return t.ArchiveTx.AppendEvent(e)
}

// redactRecord redacts the text fields of a record and every string in
// its body.
func redactRecord(r *store.ArchiveRecord) {
	redactString(&r.Text)
	redactString(&r.Key)
	redactString(&r.Model)
	r.Body = redactJSON(r.Body)
}

func redactString(s *string) {
	if out, found := secrets.Redact(*s); len(found) > 0 {
		*s = out
	}
}

// redactJSON returns body with secrets redacted in its string values (and
// object keys). It is body itself when there is nothing to redact, and
// re-encoded otherwise: redacting the encoded text could miss a secret
// written with escapes (a key block's "\n") or cut one in half.
func redactJSON(body []byte) []byte {
	if len(body) == 0 || len(secrets.Scan(string(body))) == 0 && !bytes.Contains(body, []byte(`\`)) {
		return body
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		// Bodies are the archive's own JSON; one that is not is redacted
		// as text rather than stored as is.
		out, _ := secrets.Redact(string(body))
		return []byte(out)
	}
	changed := false
	v = redactValue(v, &changed)
	if !changed {
		return body
	}
	out, err := json.Marshal(v)
	if err != nil {
		red, _ := secrets.Redact(string(body))
		return []byte(red)
	}
	return out
}

func redactValue(v any, changed *bool) any {
	switch x := v.(type) {
	case string:
		if out, found := secrets.Redact(x); len(found) > 0 {
			*changed = true
			return out
		}
		return x
	case []any:
		for i := range x {
			x[i] = redactValue(x[i], changed)
		}
		return x
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if red, found := secrets.Redact(k); len(found) > 0 {
				*changed = true
				k = red
			}
			out[k] = redactValue(e, changed)
		}
		return out
	}
	return v
}
