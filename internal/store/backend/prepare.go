package backend

import (
	"errors"
	"runtime"
	"strings"
	"sync"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/terms"
)

// PrepareEntries readies entries for a backend's write, outside any
// transaction, and returns them in order. Each entry is validated
// (store.Entry.Prepare) and then made by prepare into the backend's own
// form (the JSON of its lists and objects); errors are *store.ItemError,
// joined. Then makeTerms is called on each entry whose content existing
// (called with the entries' IDs) does not report as stored, once per
// content: terms cost CPU in proportion to the content, so they are
// spread over the cores, before the write begins. Content that appears
// in between is simply not inserted again; content forgotten in between
// gets its terms in the write.
func PrepareEntries[P any](entries []store.Entry, prepare func(e *store.Entry) (P, error),
	existing func(ids []string) (map[string]bool, error), makeTerms func(p *P)) ([]P, error) {
	var errs []error
	ps := make([]P, len(entries))
	for i := range entries {
		e := &entries[i]
		if err := e.Prepare(); err != nil {
			errs = append(errs, &store.ItemError{Index: i, Err: err})
			continue
		}
		p, err := prepare(e)
		if err != nil {
			errs = append(errs, &store.ItemError{Index: i, Err: err})
			continue
		}
		ps[i] = p
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	ids := make([]string, len(entries))
	for i := range entries {
		ids[i] = entries[i].ID
	}
	stored, err := existing(ids)
	if err != nil {
		return nil, err
	}
	var todo []*P
	seen := map[string]bool{}
	for i := range ps {
		id := entries[i].ID
		if stored[id] || seen[id] {
			continue
		}
		seen[id] = true
		todo = append(todo, &ps[i])
	}
	var wg sync.WaitGroup
	next := make(chan *P)
	for range min(runtime.GOMAXPROCS(0), len(todo)) {
		wg.Go(func() {
			for p := range next {
				makeTerms(p)
			}
		})
	}
	for _, p := range todo {
		next <- p
	}
	close(next)
	wg.Wait()
	return ps, nil
}

// ChunkTerms returns the full-text fields of e's chunks: each chunk's
// body terms, and its meta terms (the entry's files, keywords and
// entities, and the chunk's symbols); and for a file (store.CodeFile) its
// term set (see terms.Set).
func ChunkTerms(e *store.Entry) (bodies, metas []string, termSet []byte) {
	metaText := strings.Join(append(append(append([]string(nil), e.Files...), e.Keywords...), e.Entities...), " ")
	entryMeta := terms.String(metaText)
	bodies = make([]string, len(e.Chunks))
	metas = make([]string, len(e.Chunks))
	for k, c := range e.Chunks {
		bodies[k] = string(terms.Append(nil, string(e.Content[c.Start:c.End])))
		metas[k] = entryMeta
		if len(c.Symbols) > 0 {
			metas[k] = strings.TrimSpace(entryMeta + " " + terms.String(strings.Join(c.Symbols, " ")))
		}
	}
	if e.Type == store.CodeFile {
		termSet = terms.Set(bodies)
	}
	return bodies, metas, termSet
}
