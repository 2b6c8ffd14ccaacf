package archive

import (
	"encoding/json"

	"github.com/engramhq/engram/internal/store"
)

// Forgetting and redaction (store.PurgeStore) are an operator's acts on the
// store, outside the archivalist: records are removed or rewritten in
// place, which the deltas the mirror is loaded by never show. Every purge
// advances the global version and the store's purge count; a process
// whose mirror sees the count change when it reads its next delta makes
// the mirror again from the start and drops every cache made from records
// (trigram and word sets by id, embeddings by text, session states and
// briefings). Session states and briefings are keyed by versions that a
// purge advances, so they miss anyway; the others are keyed by what a
// purge changes under the same key.

// forgetCaches drops what was made from records. The caller holds a.mu.
func (a *Archive) forgetCaches() {
	a.tris.InvalidateAll()
	a.vecs.InvalidateAll()
	a.sessions.InvalidateAll()
	a.briefings.InvalidateAll()
}

// Rederive works out again what a record derives from its body, once a
// redaction has rewritten the body: the hash of its normal form (by which
// exact duplicates are found) and the key of a resolution, a preference
// or a file state. It is store.RedactRequest.Rederive for the archive's
// records; a body it cannot read is left as it is.
func Rederive(r *store.ArchiveRecord) {
	switch r.Kind {
	case store.KindPattern, store.KindFailure, store.KindInsight, store.KindDecision, store.KindIntent:
		if r.Hash != "" {
			r.Hash = hashText(string(r.Kind)+"\x00"+r.Category, recordText(*r))
		}
	case store.KindResolution:
		var res Resolution
		if json.Unmarshal(r.Body, &res) == nil {
			r.Key = hashText("res", res.Approach)
		}
	case store.KindWant, store.KindReject:
		var p Preference
		if json.Unmarshal(r.Body, &p) == nil {
			r.Key = hashText("pref", p.Text)
		}
	case store.KindFile:
		var f FileState
		if json.Unmarshal(r.Body, &f) == nil {
			r.Key = f.Path
		}
	}
}
