package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/config"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/postgres"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/storecopy"
)

// cliStore is a store as the command line opens it: either backend.
type cliStore interface {
	store.Store
	// IntegrityCheck verifies the store and names any damage.
	IntegrityCheck(ctx context.Context) error
}

// openStore opens the store at where: a PostgreSQL database for a
// postgres:// URL or a keyword/value connection string, else an SQLite
// file, which is migrated to this build's schema as it opens. A team's database is migrated by engram migrate and
// engram serve (a.migrates) only: any other command of a newer engram
// would change the schema under every older one sharing it. A database
// behind this build's schema is refused, saying so.
func (a *app) openStore(ctx context.Context, where string) (cliStore, error) {
	if config.IsPostgres(where) {
		st, err := postgres.Open(ctx, where, postgres.Options{Logger: a.log, Getenv: a.getenv, Search: a.pgSearchOptions(), NoMigrate: !a.migrates})
		if err != nil || a.migrates {
			return st, err
		}
		v, err := st.Version(ctx)
		switch {
		case err != nil:
			return nil, errors.Join(err, st.Close())
		case v < postgres.SchemaVersion():
			return nil, errors.Join(fmt.Errorf("the store %s is at schema version %d, this engram writes %d: run engram migrate (engram serve migrates it too)",
				st.Describe(), v, postgres.SchemaVersion()), st.Close())
		}
		return st, nil
	}
	return sqlite.Open(ctx, where, sqlite.Options{Logger: a.log, Search: a.searchOptions()})
}

func (a *app) migrateCmd() *cobra.Command {
	var check, jsonOut bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Bring the project's store to this engram's schema (--check: only say whether it is)",
		Long: `Bring the project's store to the schema this engram writes. Migrations are
forward-only: a store migrated by a newer engram is refused, never changed.

On PostgreSQL, migrations run under an advisory lock, so that servers
starting at once never migrate twice: the first migrates, the others wait and
find it done. Servers migrate as they open, too; run engram migrate before
rolling out a new engram to many servers to do it once, in one place.
An SQLite store migrates when engram opens it.

--check changes nothing: it prints the store's version and this engram's, and
exits 1 when the store needs migrating.`,
		Example: `  engram migrate
  ENGRAM_STORE=postgres://engram@db.internal:5432/engram engram migrate --check`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.migrate(cmd.Context(), check, jsonOut)
		},
	}
	cmd.Flags().BoolVar(&check, "check", false, "change nothing; exit 1 if the store needs migrating")
	cmd.Flags().BoolVar(&jsonOut, "json", false, `print the store's schema as JSON: {"store", "created", "schema", "writes", "from"}`)
	return cmd
}

var errMigrationPending = errors.New("the store needs migrating: run engram migrate")

func (a *app) migrate(ctx context.Context, check, jsonOut bool) error {
	where := a.cfg.Store.Path
	if config.IsPostgres(where) {
		st, err := postgres.Open(ctx, where, postgres.Options{Logger: a.log, Getenv: a.getenv, NoMigrate: true})
		if err != nil {
			return err
		}
		defer func() { _ = st.Close() }() // read or migrated: nothing is left to write
		have, err := st.Version(ctx)
		if err != nil {
			return err
		}
		if check {
			return a.reportVersion(where, have, postgres.SchemaVersion(), jsonOut)
		}
		from, to, err := st.Migrate(ctx)
		if err != nil {
			return err
		}
		a.reportMigrated(where, from, to, jsonOut)
		return nil
	}
	have := 0
	if _, err := os.Stat(where); err == nil {
		if have, err = sqlite.FileSchemaVersion(ctx, where); err != nil {
			return err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	} else if check {
		// Nothing to migrate: the first command that stores makes it at
		// this engram's schema.
		if jsonOut {
			return writeJSON(a.stdout, map[string]any{"store": where, "created": false, "writes": sqlite.SchemaVersion()})
		}
		fmt.Fprintf(a.stdout, "store %s: not created yet; the first command that stores makes it at schema version %d\n", where, sqlite.SchemaVersion())
		return nil
	}
	if check {
		return a.reportVersion(where, have, sqlite.SchemaVersion(), jsonOut)
	}
	st, err := sqlite.Open(ctx, where, sqlite.Options{Logger: a.log})
	if err != nil {
		return err
	}
	a.reportMigrated(where, have, sqlite.SchemaVersion(), jsonOut)
	return st.Close()
}

func (a *app) reportVersion(where string, have, want int, jsonOut bool) error {
	if jsonOut {
		if err := writeJSON(a.stdout, map[string]any{"store": where, "created": true, "schema": have, "writes": want}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(a.stdout, "store %s: schema version %d, this engram writes %d\n", where, have, want)
	}
	switch {
	case have > want:
		return fmt.Errorf("the store was migrated by a newer engram (schema %d): upgrade engram", have)
	case have < want:
		return errMigrationPending
	}
	return nil
}

func (a *app) reportMigrated(where string, from, to int, jsonOut bool) {
	if jsonOut {
		_ = writeJSON(a.stdout, map[string]any{"store": where, "created": true, "schema": to, "writes": to, "from": from})
		return
	}
	if from == to {
		fmt.Fprintf(a.stdout, "store %s: schema version %d, nothing to do\n", where, to)
		return
	}
	fmt.Fprintf(a.stdout, "store %s: migrated from schema version %d to %d\n", where, from, to)
}

func (a *app) storeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Move a project's store between SQLite and PostgreSQL",
		Args:  noArgs,
	}
	cmd.AddCommand(a.storeCopyCmd())
	return cmd
}

func (a *app) storeCopyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "copy FROM TO",
		Short: "Copy a store into an empty one, SQLite or PostgreSQL, and verify the copy",
		Long: `Copy a store into an empty one: FROM and TO are each an SQLite file or a
postgres://user@host:port/database URL or host=... dbname=... connection
string (the password in ENGRAM_STORE_PASSWORD or ENGRAM_STORE_PASSWORD_FILE,
PGPASSWORD or ~/.pgpass; never in the URL).

Everything is copied as it is: entries, chunks and their IDs, files, vectors,
windows, snapshots, the archivalist's records, versions and events, the
audit. The target builds its own full-text index. Then, before the copy
commits, every table is read back and compared with the source, row count
and hash, and the copy fails on any difference. The whole copy is one
transaction on the target: it holds all of it or, on any error, nothing.

TO must be empty, every table of it: a new SQLite file, or a new database
(createdb NAME). Stop
the servers writing to FROM first: what they write during the copy is not
in it.`,
		Example: `  # grow from the embedded store to a team's PostgreSQL
  engram store copy ~/.local/share/engram/projects/api-1a2b3c/engram.db postgres://engram@db.internal/api
  # and back, to work offline
  engram store copy postgres://engram@db.internal/api ./api.db`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.storeCopy(cmd.Context(), args[0], args[1])
		},
	}
}

// copyStore is a store engram store copy reads or writes.
type copyStore interface {
	storecopy.Target
	Close() error
}

func (a *app) openCopyStore(ctx context.Context, where string, create bool) (copyStore, error) {
	if config.IsPostgres(where) {
		return postgres.Open(ctx, where, postgres.Options{Logger: a.log, Getenv: a.getenv})
	}
	abs, err := filepath.Abs(where)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(abs); errors.Is(err, os.ErrNotExist) && !create {
		return nil, fmt.Errorf("store %s: no such file", abs)
	}
	return sqlite.Open(ctx, abs, sqlite.Options{Logger: a.log})
}

func (a *app) storeCopy(ctx context.Context, from, to string) (err error) {
	src, err := a.openCopyStore(ctx, from, false)
	if err != nil {
		return fmt.Errorf("from: %w", err)
	}
	defer func() { err = errors.Join(err, src.Close()) }()
	dst, err := a.openCopyStore(ctx, to, true)
	if err != nil {
		return fmt.Errorf("to: %w", err)
	}
	defer func() { err = errors.Join(err, dst.Close()) }()
	fmt.Fprintf(a.stderr, "copying %s to %s\n", src.Describe(), dst.Describe())
	start := time.Now()
	step, stepStart := "", time.Time{}
	endStep := func() {
		if step != "" {
			fmt.Fprintf(a.stderr, "  %s: done in %v\n", step, time.Since(stepStart).Round(time.Millisecond))
		}
	}
	report, err := storecopy.Copy(ctx, src, dst, storecopy.Progress{
		Table: func(table string, rows int64, took time.Duration) {
			if rows > 0 {
				fmt.Fprintf(a.stderr, "  %-17s %9d rows  %v\n", table, rows, took.Round(time.Millisecond))
			}
		},
		Step: func(what string) {
			endStep()
			step, stepStart = what, time.Now()
			fmt.Fprintf(a.stderr, "  %s…\n", what)
		},
	})
	if err != nil {
		return err
	}
	endStep()
	var rows int64
	for _, t := range report.Tables {
		rows += t.Rows
	}
	fmt.Fprintf(a.stdout, "copied %d rows of %d tables to %s in %v; verified: every table's rows and hash match\n",
		rows, len(report.Tables), dst.Describe(), time.Since(start).Round(time.Millisecond))
	return nil
}
