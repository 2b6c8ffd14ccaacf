package archive

import (
	"context"

	"github.com/engramhq/engram/internal/store"
)

// SessionDecisions returns the decisions a session's agents recorded that
// nothing superseded, oldest first, at most limit (the newest of them;
// zero means DefaultReadLimit): what a handoff carries over, beside the
// session's state (ReadSession).
func (a *Archive) SessionDecisions(ctx context.Context, sessionID string, limit int) ([]Decision, error) {
	if err := checkSession(sessionID); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = DefaultReadLimit
	}
	recs, err := a.st.ArchiveRecords(ctx, store.RecordQuery{SessionID: sessionID, Kinds: []store.RecordKind{store.KindDecision},
		Active: true, Newest: true, Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]Decision, 0, len(recs))
	for i := len(recs) - 1; i >= 0; i-- {
		r, err := toRecord(recs[i])
		if err != nil {
			return nil, err
		}
		out = append(out, *r.Decision)
	}
	return out, nil
}
