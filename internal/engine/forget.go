package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/index"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/terms"
)

// Forgetting, redaction and retention are an operator's acts (engram
// forget, engram redact): agents only ever append. The store removes and
// rewrites, each purge in one transaction with an audit record; the
// engine resolves what the operator names, makes again what only it knows
// how to make (chunks and token counts of redacted content), and keeps the
// corpus model from holding words that are gone.

// ForgetRequest names what Forget removes; see store.ForgetRequest.
type ForgetRequest struct {
	Sessions []string
	// Entries are entry IDs or unique prefixes of them.
	Entries []string
	// Records are global records of the archivalist (pat-12).
	Records []string
	// SessionRecords also forgets the global records the sessions'
	// agents wrote.
	SessionRecords bool
	// Actor is who forgets, for the audit.
	Actor  string
	DryRun bool
	// Compact rewrites the full-text indexes afterwards, so that the
	// removed words leave the store's file too.
	Compact bool
}

// Forget removes sessions, entries and records; see store.PurgeStore.
func (e *Engine) Forget(ctx context.Context, req ForgetRequest) (store.PurgeReport, error) {
	var ids []string
	for _, p := range req.Entries {
		id, err := e.st.ResolveID(ctx, p)
		if err != nil {
			return store.PurgeReport{}, fmt.Errorf("forget: %w", err)
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return e.st.Forget(ctx, store.ForgetRequest{Sessions: req.Sessions, Entries: ids, Records: req.Records,
		SessionRecords: req.SessionRecords, Actor: req.Actor, DryRun: req.DryRun, Compact: req.Compact})
}

// RedactRequest says what Redact removes.
type RedactRequest struct {
	// Text is the string, matched byte for byte.
	Text []byte
	// Marker replaces it; empty means store.DefaultMarker.
	Marker  string
	Actor   string
	DryRun  bool
	Compact bool
}

// RedactReport says what Redact did.
type RedactReport struct {
	store.PurgeReport
	// Models are the corpus models dropped because their vocabulary held a
	// word of the string that the store no longer holds: the next engram
	// embed trains a new one.
	Models []string
}

// Redact replaces a string everywhere the store holds it (see
// store.PurgeStore.Redact): redacted content is chunked and counted again
// as it would be stored, and the archive's records derive their hashes and
// keys again. A corpus model that learned a word only the string held is
// dropped, since its vocabulary is kept in the store.
func (e *Engine) Redact(ctx context.Context, req RedactRequest) (RedactReport, error) {
	rep, err := e.st.Redact(ctx, store.RedactRequest{Text: req.Text, Marker: req.Marker, Actor: req.Actor,
		DryRun: req.DryRun, Compact: req.Compact, Rechunk: e.rechunk, Rederive: archive.Rederive})
	out := RedactReport{PurgeReport: rep}
	if err != nil || req.DryRun || rep.Counts.Places == 0 {
		return out, err
	}
	out.Models, err = e.dropLearned(ctx, string(req.Text))
	if err != nil {
		return out, fmt.Errorf("redact: corpus model: %w", err)
	}
	return out, nil
}

// rechunk makes the chunks and token count of an entry's new content as
// storing it would: by declarations for a file, as text otherwise.
func (e *Engine) rechunk(ent *store.Entry) error {
	if ent.Type == store.CodeFile && len(ent.Files) > 0 {
		fc, err := index.Version(ent.Files[0], ent.Content, string(ent.Content),
			&index.Options{Encoding: e.opts.Encoding, ChunkTokens: e.opts.ChunkTokens})
		if err != nil {
			return err
		}
		ent.Chunks, ent.TokenCount = fc.Entry.Chunks, fc.Entry.TokenCount
		return nil
	}
	made := e.entry(&Record{Content: ent.Content})
	ent.Chunks, ent.TokenCount = made.Chunks, made.TokenCount
	return nil
}

// dropLearned drops the corpus models (active and being rolled out) whose
// blob is gone (the store deletes blobs that hold the string) or whose
// vocabulary knows a word of text that no chunk holds any more.
func (e *Engine) dropLearned(ctx context.Context, text string) ([]string, error) {
	words := terms.Content(text)
	gone := map[string]bool{}
	for _, w := range words {
		if gone[w] {
			continue
		}
		hits, err := e.st.Search(ctx, store.Query{Text: w, Limit: 1, Filter: store.Filter{History: true}})
		if err != nil {
			return nil, err
		}
		gone[w] = len(hits) == 0
	}
	var dropped []string
	for _, key := range []string{settingCorpusActive, settingCorpusNext} {
		name, err := e.setting(ctx, key)
		if err != nil || name == "" {
			if err != nil {
				return dropped, err
			}
			continue
		}
		drop := false
		c, err := e.loadCorpus(ctx, name)
		switch {
		case errors.Is(err, store.ErrNotFound):
			drop = true
		case err != nil:
			return dropped, err
		default:
			for w, g := range gone {
				if g && c.Knows(w) {
					drop = true
					break
				}
			}
		}
		if !drop {
			continue
		}
		if err := e.st.PutSetting(ctx, key, ""); err != nil {
			return dropped, err
		}
		if err := e.st.DropVectors(ctx, name); err != nil {
			return dropped, err
		}
		if err := e.st.DeleteBlob(ctx, blobPrefix+name); err != nil {
			return dropped, err
		}
		dropped = append(dropped, name)
		// Info: the report names it (engram redact prints it), and it is
		// planned, not degraded.
		e.log.Info("dropped the corpus model: it had learned a word of the redacted string", "model", name)
	}
	return dropped, nil
}

// RetainRequest is a retention policy; zero fields forget nothing.
type RetainRequest struct {
	// MaxAge forgets sessions whose last activity is older.
	MaxAge time.Duration
	// MaxBytes forgets the least recently active sessions until the
	// store's content is at most this many bytes.
	MaxBytes int64
	Actor    string
	DryRun   bool
	Compact  bool
}

// Retain applies a retention policy; see store.PurgeStore.Retain.
func (e *Engine) Retain(ctx context.Context, req RetainRequest) (store.RetainReport, error) {
	return e.st.Retain(ctx, store.RetainRequest{MaxAge: req.MaxAge, MaxBytes: req.MaxBytes, Actor: req.Actor,
		DryRun: req.DryRun, Compact: req.Compact})
}

// Audit returns up to limit audit records after seq after, oldest first;
// a negative after returns the last limit.
func (e *Engine) Audit(ctx context.Context, after int64, limit int) ([]store.AuditRecord, error) {
	return e.st.Audit(ctx, after, limit)
}

// DiskWarnShare is the share of the disk cap at which the store warns.
const DiskWarnShare = 0.9

// DiskUsage is the store's use of its disk cap.
type DiskUsage struct {
	// UsedBytes is the store's size on disk less its free space, which it
	// reuses before it grows.
	UsedBytes int64 `json:"used_bytes"`
	// FileBytes is the size of its files on disk.
	FileBytes int64 `json:"file_bytes"`
	// CapBytes is the cap; zero means none.
	CapBytes int64 `json:"cap_bytes,omitempty"`
	// Level is ok, near (at DiskWarnShare of the cap or more) or over.
	Level string `json:"level"`
}

// Disk levels.
const (
	DiskOK   = "ok"
	DiskNear = "near"
	DiskOver = "over"
)

// Warning says how the store stands against its cap, in a sentence, or
// "" when it is under DiskWarnShare of it.
func (u DiskUsage) Warning() string {
	switch u.Level {
	case DiskNear:
		return fmt.Sprintf("the store uses %d%% of its disk cap (%d of %d bytes): set [retention] max_age or max_bytes, or run engram forget",
			u.UsedBytes*100/u.CapBytes, u.UsedBytes, u.CapBytes)
	case DiskOver:
		return fmt.Sprintf("the store is over its disk cap (%d of %d bytes): engram keeps storing, as losing an agent's context is worse; set [retention] max_age or max_bytes, or run engram forget",
			u.UsedBytes, u.CapBytes)
	}
	return ""
}

// Disk reports the store's use of a disk cap (zero: none).
func (e *Engine) Disk(ctx context.Context, capBytes int64) (DiskUsage, error) {
	st, err := e.st.Stats(ctx)
	if err != nil {
		return DiskUsage{}, err
	}
	u := DiskUsage{UsedBytes: st.SizeBytes - st.FreeBytes, FileBytes: st.SizeBytes, CapBytes: capBytes, Level: DiskOK}
	switch {
	case capBytes <= 0:
	case u.UsedBytes >= capBytes:
		u.Level = DiskOver
	case float64(u.UsedBytes) >= DiskWarnShare*float64(capBytes):
		u.Level = DiskNear
	}
	return u, nil
}
