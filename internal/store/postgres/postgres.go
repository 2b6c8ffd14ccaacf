// Package postgres is engram's second store backend: one PostgreSQL
// database (13 or later) that several engram servers share. It implements
// the whole store contract (internal/store) and passes the contract suite
// (storetest) as the SQLite backend does; what differs is built for
// several processes on several machines writing at once.
//
// Where to read what:
//
//   - postgres.go: Open, where the password comes from (never the URL),
//     the server's version, migrations under an advisory lock.
//   - tx.go: transactions, and which failures are retried (only those that
//     say nothing was committed).
//   - schema.go and each area's schema const: the SQLite schema's meaning,
//     table for table.
//   - put.go, context.go, read.go, write.go: entries, their occurrences,
//     chunks, contexts; sessions locked so turns and msg_ids are decided
//     one writer at a time.
//   - fts.go, fts_bm25.go, search.go: the full-text index as postings
//     engram keeps, and BM25 computed as SQLite's FTS5 does.
//   - files.go, files_batch.go, vectors.go: the file index and vectors.
//   - window.go, snapshot.go: context windows, locked per window.
//   - archive.go: the archivalist's records, in commit order under one
//     advisory lock.
//   - purge.go, forget.go, redact.go, retain.go: the operator's removals.
//   - copy.go: this side of engram store copy; check.go: IntegrityCheck;
//     admin.go: databases made for eval and bench runs.
//
// Locks are always taken in one order (see purge.go's comment for the
// whole list): sessions, stored entries, file rows, window rows, the
// archive's lock, then the hot rows (search statistics, versions,
// counters) last, so that a deadlock, which PostgreSQL breaks and the
// transaction's retry absorbs, stays rare. A vector model's row is taken
// only by PutVectors and DropVectors, first, before its vectors (see
// vectors.go).
package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/engramhq/engram/internal/store"
)

// MinServerVersion is the oldest PostgreSQL engram runs on (15, Debian
// 12's, is what CI tests; 13 has every feature the schema uses).
const MinServerVersion = 130000

// Environment variables for the password, which never goes on a command
// line (ps shows it to every user of the machine).
const (
	// PasswordEnv holds the password itself.
	PasswordEnv = "ENGRAM_STORE_PASSWORD"
	// PasswordFileEnv names a file holding it (its first line).
	PasswordFileEnv = "ENGRAM_STORE_PASSWORD_FILE"
)

// Options configure Open.
type Options struct {
	Logger *slog.Logger
	// Getenv reads the environment; nil is os.Getenv.
	Getenv func(string) string
	// ConnectTimeout bounds reaching the server; zero is 10 s.
	ConnectTimeout time.Duration
	// NoMigrate opens the database as it is, without applying this
	// build's migrations (engram migrate --check); Migrate applies them.
	NoMigrate bool
	// Search tunes lexical search.
	Search SearchOptions
}

// Store is a PostgreSQL store.
var _ store.Store = (*Store)(nil)

// Store is a PostgreSQL store.
type Store struct {
	url string // as given, without a password
	// beforeCommit, if set, runs before each write's COMMIT: tests use it
	// to lose the connection there.
	beforeCommit func(tx pgx.Tx)
	pool         *pgxpool.Pool
	log          *slog.Logger
	search       SearchOptions
	df           dfCache       // see search.go
	runs         store.RunRefs // windows' keys, to read run references back
}

// ErrPasswordInURL is returned for a URL or connection string that
// carries a password.
var ErrPasswordInURL = errors.New("the store's URL or connection string carries a password, which a command line shows to every user of the machine: " +
	"give it in " + PasswordEnv + ", in a file named by " + PasswordFileEnv + ", or in PGPASSWORD or ~/.pgpass")

// osGetenv reads the environment when Options.Getenv is nil.
var osGetenv = os.Getenv

// ErrNewerSchema is returned for a database that a newer engram migrated.
var ErrNewerSchema = errors.New("the database was migrated by a newer engram")

// Open connects to the database at rawURL (postgres://user@host:port/db,
// or a keyword/value connection string: host=db user=engram dbname=api),
// checks the server's version and applies the migrations this build
// knows, under an advisory lock.
func Open(ctx context.Context, rawURL string, o Options) (*Store, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg, err := config(rawURL, getenv)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.ConnectTimeout = o.ConnectTimeout
	if cfg.ConnConfig.ConnectTimeout <= 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	s := &Store{url: rawURL, pool: pool, log: log.With("component", "store", "backend", "postgres"), search: o.Search.withDefaults()}
	if err := s.check(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	if !o.NoMigrate {
		if _, _, err := s.Migrate(ctx); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return s, nil
}

// Close closes the store's connections.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// config parses rawURL, a URL or a keyword/value connection string
// (host=db user=engram dbname=api), refusing a password in it, and takes
// the password from the environment or its file when one is given there.
// Its errors never quote a password.
func config(rawURL string, getenv func(string) string) (*pgxpool.Config, error) {
	if strings.Contains(rawURL, "://") {
		u, err := url.Parse(rawURL)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
			return nil, fmt.Errorf("the store %q is not a postgres://user@host:port/database URL", redact(rawURL))
		}
		if _, ok := u.User.Password(); ok {
			return nil, ErrPasswordInURL
		}
		// In any case: pgx would send a parameter it does not know, such
		// as Password, to the server.
		for k := range u.Query() {
			if strings.Contains(strings.ToLower(k), "password") {
				return nil, ErrPasswordInURL
			}
		}
	} else {
		keys, err := keywords(rawURL)
		if err != nil {
			return nil, fmt.Errorf("the store is neither a postgres://user@host:port/database URL nor a keyword/value connection string (host=db user=engram dbname=api): %w", err)
		}
		for _, k := range keys {
			if strings.Contains(strings.ToLower(k), "password") {
				return nil, ErrPasswordInURL
			}
		}
	}
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		// pgx's error quotes the string, which holds no password.
		return nil, fmt.Errorf("the store's URL or connection string: %w", err)
	}
	switch {
	case getenv(PasswordEnv) != "":
		cfg.ConnConfig.Password = getenv(PasswordEnv)
	case getenv(PasswordFileEnv) != "":
		b, err := os.ReadFile(getenv(PasswordFileEnv))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", PasswordFileEnv, err)
		}
		cfg.ConnConfig.Password, _, _ = strings.Cut(strings.TrimRight(string(b), "\r\n"), "\n")
	}
	return cfg, nil
}

// keywords are the keywords of a keyword/value connection string, read
// as libpq reads one: keyword = value pairs apart by white space, a value
// in single quotes or not, a backslash taking the character after it as
// it is. Its errors quote nothing of the string, which may hold a
// password.
func keywords(s string) ([]string, error) {
	space := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' }
	var keys []string
	for i := 0; ; {
		for i < len(s) && space(s[i]) {
			i++
		}
		if i == len(s) {
			break
		}
		start := i
		for i < len(s) && s[i] != '=' && !space(s[i]) {
			i++
		}
		key := s[start:i]
		for i < len(s) && space(s[i]) {
			i++
		}
		if key == "" || i == len(s) || s[i] != '=' {
			return nil, fmt.Errorf("its word %d is no keyword=value", len(keys)+1)
		}
		i++
		for i < len(s) && space(s[i]) {
			i++
		}
		if i < len(s) && s[i] == '\'' {
			for i++; i < len(s) && s[i] != '\''; i++ {
				if s[i] == '\\' {
					i++
				}
			}
			if i >= len(s) {
				return nil, fmt.Errorf("the value of its word %d has no closing quote", len(keys)+1)
			}
			i++
		} else {
			for ; i < len(s) && !space(s[i]); i++ {
				if s[i] == '\\' {
					i++
				}
			}
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, errors.New("it is empty")
	}
	return keys, nil
}

// kvPassword is the value of a keyword/value string's keyword that ends
// in password, quoted or not.
var kvPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)`)

// redact is a URL or connection string with any password in it
// replaced, for messages.
func redact(rawURL string) string {
	if !strings.Contains(rawURL, "://") {
		return kvPassword.ReplaceAllString(rawURL, "${1}xxxxx")
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(an unreadable URL)"
	}
	// Any password among the parameters too (sslpassword, a key's).
	q := u.Query()
	for k := range q {
		if strings.Contains(strings.ToLower(k), "password") {
			q.Set(k, "xxxxx")
			u.RawQuery = q.Encode()
		}
	}
	return u.Redacted()
}

// check reaches the server and refuses one too old.
func (s *Store) check(ctx context.Context) error {
	var v int
	if err := s.pool.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&v); err != nil {
		return fmt.Errorf("postgres: cannot reach the database: %w", explain(err))
	}
	if v < MinServerVersion {
		return fmt.Errorf("postgres: the server is version %d.%d; engram needs %d or later", v/10000, v%10000, MinServerVersion/10000)
	}
	return nil
}

// explain adds what a user can do to the errors they meet first.
func explain(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "28P01", "28000":
			return fmt.Errorf("%w (the password: %s, %s, PGPASSWORD or ~/.pgpass)", err, PasswordEnv, PasswordFileEnv)
		case "3D000":
			return fmt.Errorf("%w (create it: createdb NAME)", err)
		}
	}
	return err
}

// migration is one forward-only schema step; steps are never edited once
// released: a change is a new step.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations are applied in order; the version applied last is the
// schema's.
var migrations = []migration{
	{1, "the schema's own version", `
CREATE TABLE IF NOT EXISTS engram_schema (
	version    integer PRIMARY KEY,
	name       text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
)`},
	{2, "the store", schemaV2()},
	{3, "keys of window appends", schemaWindowAppends},
	{4, "the next place of a window's ledger", schemaWindowNext},
}

// SchemaVersion is the schema version this build of engram writes.
func SchemaVersion() int { return migrations[len(migrations)-1].version }

// migrationLock is the advisory lock key of migrations ("ENGRAMMI").
const migrationLock int64 = 0x454e4752414d4d49

// Migrate applies the migrations the database lacks, each in its own
// transaction, under a session advisory lock: a second server starting
// at once waits, then finds them applied. It returns the schema's
// version before and after.
func (s *Store) Migrate(ctx context.Context) (from, to int, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("postgres: %w", explain(err))
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrationLock); err != nil {
		return 0, 0, fmt.Errorf("postgres: waiting for the migration lock: %w", err)
	}
	defer func() {
		// A lost connection drops the lock with it.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", migrationLock)
	}()
	have, err := schemaVersion(ctx, conn.Conn())
	if err != nil {
		return 0, 0, err
	}
	if have > SchemaVersion() {
		return have, have, fmt.Errorf("postgres: %w: its schema is version %d, this engram writes %d; upgrade engram", ErrNewerSchema, have, SchemaVersion())
	}
	for _, m := range migrations {
		if m.version <= have {
			continue
		}
		err := pgx.BeginFunc(ctx, conn.Conn(), func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO engram_schema (version, name) VALUES ($1, $2)", m.version, m.name)
			return err
		})
		if err != nil {
			return have, m.version - 1, fmt.Errorf("postgres: migration %d (%s): %w", m.version, m.name, err)
		}
		s.log.Info("migrated the store", "version", m.version, "name", m.name)
	}
	return have, SchemaVersion(), nil
}

// schemaVersion is the version of the last migration applied, 0 for a
// database engram never migrated.
func schemaVersion(ctx context.Context, conn *pgx.Conn) (int, error) {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass('engram_schema') IS NOT NULL").Scan(&exists); err != nil {
		return 0, fmt.Errorf("postgres: %w", err)
	}
	if !exists {
		return 0, notForeign(ctx, conn)
	}
	var v int
	if err := conn.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM engram_schema").Scan(&v); err != nil {
		return 0, fmt.Errorf("postgres: %w", err)
	}
	return v, nil
}

// ErrForeign is the refusal of a database whose schema holds another
// application's tables: engram keeps its own.
var ErrForeign = errors.New("not an engram store")

// notForeign refuses a database engram never migrated whose schema (the
// first of the search path, where engram would create its tables) holds
// tables, views or sequences, but for extensions' own: engram's tables
// are not put beside another application's, as the SQLite backend does
// not write into another application's file.
func notForeign(ctx context.Context, conn *pgx.Conn) error {
	var (
		schema *string
		n      int
		some   []string
	)
	err := conn.QueryRow(ctx, `SELECT current_schema(),
		(SELECT count(*) FROM pg_class c WHERE c.relnamespace = n.oid AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
			AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')),
		ARRAY(SELECT c.relname::text FROM pg_class c WHERE c.relnamespace = n.oid AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
			AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')
			ORDER BY c.relname LIMIT 5)
		FROM (SELECT current_schema() AS name) AS cs LEFT JOIN pg_namespace n ON n.nspname = cs.name`).Scan(&schema, &n, &some)
	switch {
	case err != nil:
		return fmt.Errorf("postgres: %w", err)
	case schema == nil:
		return fmt.Errorf("postgres: no schema of the search path exists to hold engram's tables: create one (CREATE SCHEMA engram) and name it in the URL (?search_path=engram)")
	case n > 0:
		names := strings.Join(some, ", ")
		if n > len(some) {
			names += fmt.Sprintf(" and %d more", n-len(some))
		}
		return fmt.Errorf("postgres: %w: schema %s holds another application's tables (%s): give engram a database of its own (createdb NAME), or a schema (CREATE SCHEMA engram, and ?search_path=engram in the URL)",
			ErrForeign, *schema, names)
	}
	return nil
}

// Version is the database's schema version.
func (s *Store) Version(ctx context.Context) (int, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	return schemaVersion(ctx, conn.Conn())
}
