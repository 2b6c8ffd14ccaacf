package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/postgres"
	"github.com/engramhq/engram/internal/store/sqlite"
)

// evalPostgresEnv names the admin URL engram eval runs on PostgreSQL
// with, when --postgres is not given.
const evalPostgresEnv = "ENGRAM_EVAL_POSTGRES"

// Backends engram eval runs its sets on.
const (
	backendSQLite   = "sqlite"
	backendPostgres = "postgres"
)

// evalStores makes the scratch stores of engram eval: SQLite files under
// the run's directory (the default), or, given the URL of a PostgreSQL
// user who may create databases, a database of its own for each store,
// dropped when the store is closed unless keep.
type evalStores struct {
	a *app
	// admin is the PostgreSQL admin URL; empty for SQLite.
	admin string
	// tag makes this run's database names its own: two runs on one
	// server never drop each other's stores.
	tag  string
	keep bool
}

func newEvalStores(a *app, admin string, keep bool) (*evalStores, error) {
	s := &evalStores{a: a, admin: admin, keep: keep}
	if admin == "" {
		return s, nil
	}
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	s.tag = hex.EncodeToString(b)
	return s, nil
}

// backend names the backend the stores are in.
func (s *evalStores) backend() string {
	if s.admin != "" {
		return backendPostgres
	}
	return backendSQLite
}

// open makes the store name of set: the file dir/name.db, or the
// database engram_eval_<set>_<name>_<tag>. close closes it and drops
// its database unless the stores are kept.
func (s *evalStores) open(ctx context.Context, dir, set, name string) (st store.Store, close func() error, err error) {
	a := s.a
	if s.admin == "" {
		sq, err := sqlite.Open(ctx, filepath.Join(dir, name+".db"), sqlite.Options{Logger: a.log, Search: a.searchOptions()})
		if err != nil {
			return nil, nil, err
		}
		return sq, sq.Close, nil
	}
	db := evalDatabase(set, name, s.tag)
	o := postgres.Options{Logger: a.log, Getenv: a.getenv, Search: a.pgSearchOptions()}
	u, err := postgres.CreateDatabase(ctx, s.admin, db, o)
	if err != nil {
		return nil, nil, err
	}
	drop := func() error {
		if s.keep {
			fmt.Fprintf(a.stderr, "%s: store %s kept: %s\n", set, name, u)
			return nil
		}
		return postgres.DropDatabase(context.WithoutCancel(ctx), s.admin, db, o)
	}
	pg, err := postgres.Open(ctx, u, o)
	if err != nil {
		return nil, nil, errors.Join(err, drop())
	}
	fmt.Fprintf(a.stderr, "%s: store %s is database %s\n", set, name, db)
	return pg, func() error { return errors.Join(pg.Close(), drop()) }, nil
}

var notDatabaseName = regexp.MustCompile(`[^a-z0-9_]+`)

// evalDatabase is the name of the database of store name of set:
// engram_eval_<set>_<name>_<tag>, in the letters a database name takes,
// the set and store names shortened to fit PostgreSQL's 63 bytes.
func evalDatabase(set, name, tag string) string {
	clean := func(s string) string {
		return strings.Trim(notDatabaseName.ReplaceAllString(strings.ToLower(s), "_"), "_")
	}
	mid := clean(set) + "_" + clean(name)
	const prefix = "engram_eval_"
	if room := 63 - len(prefix) - 1 - len(tag); len(mid) > room {
		mid = mid[:room]
	}
	return prefix + mid + "_" + tag
}
