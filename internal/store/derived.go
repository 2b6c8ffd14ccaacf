package store

import "context"

// derivedKey marks a context whose writes are of derived data.
type derivedKey struct{}

// Derived returns ctx marked for writes of data that engram can make
// again from what the store holds, byte for byte: a window's extractive
// summaries (PutWindowSummaries; a turn's markers need no write, their
// IDs name runs of the ledger). A backend
// commits such a write without waiting for the disk (SQLite:
// synchronous=NORMAL for that commit, in WAL mode; PostgreSQL:
// synchronous_commit off for that transaction). The write is atomic and
// survives the process's crash as any other; a crash of the machine
// before the store's next synced commit (every other write syncs, and
// syncs what came before it) may lose it, and the next turn writes it
// again. Nothing a caller stored is ever written this way.
func Derived(ctx context.Context) context.Context {
	return context.WithValue(ctx, derivedKey{}, true)
}

// IsDerived reports whether ctx was marked by Derived.
func IsDerived(ctx context.Context) bool {
	v, _ := ctx.Value(derivedKey{}).(bool)
	return v
}
