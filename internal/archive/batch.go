package archive

import (
	"context"
	"fmt"

	"github.com/engramhq/engram/internal/store"
)

// A step is one write prepared for the transaction that runs it: what
// needs no transaction (checking the data, looking for similar records)
// is done; run does the rest in tx, given what the steps before it in
// the same transaction wrote, and returns what it wrote. The store may
// run a transaction more than once (a busy store is retried), so run
// returns what it wrote and accumulates nothing.
type step struct {
	// what names the write for errors: "record pattern".
	what string
	// g is a global write, which later steps of a batch compare with for
	// duplicates; nil for the others.
	g   *global
	run func(tx store.ArchiveTx, done []WriteResult) (WriteResult, error)
}

// batch is writes that commit together, in one transaction: the stores
// of one request.
type batch struct {
	steps []step
}

// commit runs b's steps in order in one write transaction of h: every
// one of them is written, or none is. Each step sees what the steps
// before it wrote (a duplicate merges into a record an earlier step
// created, a contradiction of it is refused), as it would in a
// transaction of its own after theirs. On an error, failed is the index
// of the step that failed, or -1 if the transaction did (registering the
// handle's agent, the commit), and wrs holds what the steps before it
// would have written (none of it was).
func (h *Handle) commit(ctx context.Context, b *batch) (wrs []WriteResult, failed int, err error) {
	out := make([]WriteResult, len(b.steps))
	failed = -1 // until a step fails: the transaction may fail before any runs
	err = h.write(ctx, func(tx store.ArchiveTx) error {
		clear(out)
		failed = -1
		for i, s := range b.steps {
			wr, err := s.run(tx, out[:i])
			if err != nil {
				failed = i
				return err
			}
			out[i] = wr
		}
		return nil
	})
	if err != nil {
		return out, failed, err
	}
	return out, -1, nil
}

// commitOne runs one step in a transaction of its own.
func (h *Handle) commitOne(ctx context.Context, s step) (WriteResult, error) {
	wrs, _, err := h.commit(ctx, &batch{steps: []step{s}})
	if err != nil {
		return WriteResult{}, fmt.Errorf("%s: %w", s.what, err)
	}
	return wrs[0], nil
}
