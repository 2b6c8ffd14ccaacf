package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/store/postgres"
)

// The PostgreSQL side of the bench commands: with --postgres (or
// ENGRAM_BENCH_POSTGRES) a command runs its workload on SQLite and on
// PostgreSQL in the same run, each in a store of its own, and prints the
// two side by side. The URL names a user who may create databases: each
// run makes databases of its own (engram_bench_*) and drops them after,
// except the large synthetic stores, which are kept as the SQLite side
// keeps its file when --dir is given.

// benchPostgresEnv holds the admin URL when --postgres is not given.
const benchPostgresEnv = "ENGRAM_BENCH_POSTGRES"

// registerPostgres adds --postgres to a bench command.
func registerPostgres(cmd *cobra.Command, u *string) {
	cmd.Flags().StringVar(u, "postgres", "", "also run on PostgreSQL, in databases of its own made on the server of this URL, "+
		"whose user may create databases (password in "+postgres.PasswordEnv+" or PGPASSWORD; env "+benchPostgresEnv+")")
}

// benchPostgres returns the admin URL of the PostgreSQL side, or "" for
// none.
func (a *app) benchPostgres(flag string) string {
	if flag != "" {
		return flag
	}
	return a.getenv(benchPostgresEnv)
}

// pgOptions are the options of a bench's PostgreSQL stores.
func (a *app) pgOptions() postgres.Options {
	s := a.cfg.Search
	return postgres.Options{Logger: a.log, Getenv: a.getenv, Search: postgres.SearchOptions{
		MaxPostings: s.MaxPostings, Window: s.Window, MetaWeight: s.MetaWeight, ContextWeight: s.ContextWeight}}
}

// pgScratch creates the database name afresh (dropping one of that name)
// and opens it; drop closes the store and drops the database.
func (a *app) pgScratch(ctx context.Context, admin, name string) (st *postgres.Store, drop func() error, err error) {
	o := a.pgOptions()
	u, err := postgres.CreateDatabase(ctx, admin, name, o)
	if err != nil {
		return nil, nil, err
	}
	st, err = postgres.Open(ctx, u, o)
	if err != nil {
		return nil, nil, errors.Join(err, postgres.DropDatabase(context.WithoutCancel(ctx), admin, name, o))
	}
	drop = func() error {
		return errors.Join(st.Close(), postgres.DropDatabase(context.WithoutCancel(ctx), admin, name, o))
	}
	return st, drop, nil
}

// pgOpenMore opens another store (another connection pool: another
// server) on the database of a store pgScratch made.
func (a *app) pgOpenMore(ctx context.Context, admin, name string) (*postgres.Store, error) {
	u, err := pgDatabaseURL(admin, name)
	if err != nil {
		return nil, err
	}
	return postgres.Open(ctx, u, a.pgOptions())
}

// pgKept opens the database name, keeping what it holds when reuse is
// set and creating it (afresh) otherwise or when it does not exist;
// closeStore closes it, and drops the database unless keep is set.
func (a *app) pgKept(ctx context.Context, admin, name string, reuse, keep bool) (st *postgres.Store, closeStore func() error, err error) {
	o := a.pgOptions()
	if reuse {
		u, err := pgDatabaseURL(admin, name)
		if err != nil {
			return nil, nil, err
		}
		st, err = postgres.Open(ctx, u, o)
		if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "3D000" { // no such database
			st = nil
		} else if err != nil {
			return nil, nil, err
		}
	}
	if st == nil {
		u, err := postgres.CreateDatabase(ctx, admin, name, o)
		if err != nil {
			return nil, nil, err
		}
		if st, err = postgres.Open(ctx, u, o); err != nil {
			return nil, nil, err
		}
	}
	closeStore = func() error {
		err := st.Close()
		if !keep {
			err = errors.Join(err, postgres.DropDatabase(context.WithoutCancel(ctx), admin, name, o))
		}
		return err
	}
	return st, closeStore, nil
}

// pgDatabaseURL is admin's URL with its database replaced by name.
func pgDatabaseURL(admin, name string) (string, error) {
	u, err := url.Parse(admin)
	if err != nil {
		return "", fmt.Errorf("--postgres: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}
