package postgres_test

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/engramhq/engram/internal/store/postgres"
	"github.com/engramhq/engram/internal/store/postgres/pgtest"
)

// database makes a database of its own for the test (pgtest.Database).
func database(t testing.TB) string { return pgtest.Database(t) }

// servers opens n stores on one database, as n engram servers would.
func servers(t *testing.T, n int) []*postgres.Store {
	t.Helper()
	dsn := database(t)
	var out []*postgres.Store
	for range n {
		s, err := postgres.Open(t.Context(), dsn, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		out = append(out, s)
	}
	return out
}

func TestOpen_Migrates(t *testing.T) {
	dsn := database(t)
	ctx := t.Context()
	s, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.Version(ctx); err != nil || v != postgres.SchemaVersion() {
		t.Errorf("schema version %d, %v; want %d", v, err, postgres.SchemaVersion())
	}
	_ = s.Close()
	// Opened again, it has nothing to do.
	s, err = postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
}

// Servers starting at once: one migrates, the others wait for it and find
// the migrations applied, each once.
func TestOpen_ConcurrentMigrations(t *testing.T) {
	dsn := database(t)
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := postgres.Open(ctx, dsn, postgres.Options{})
			if err == nil {
				_ = s.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("server %d: %v", i, err)
		}
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	var rows, distinct int
	if err := conn.QueryRow(ctx, "SELECT count(*), count(DISTINCT version) FROM engram_schema").Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != postgres.SchemaVersion() || distinct != rows {
		t.Errorf("engram_schema has %d rows (%d versions), want each of the %d migrations once", rows, distinct, postgres.SchemaVersion())
	}
}

// A database a newer engram migrated is refused, and left as it is.
func TestOpen_NewerSchema(t *testing.T) {
	dsn := database(t)
	ctx := t.Context()
	s, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, "INSERT INTO engram_schema (version, name) VALUES (999, 'from the future')"); err != nil {
		t.Fatal(err)
	}
	_, err = postgres.Open(ctx, dsn, postgres.Options{})
	if !errors.Is(err, postgres.ErrNewerSchema) || !strings.Contains(err.Error(), "999") {
		t.Errorf("Open = %v; want ErrNewerSchema naming version 999", err)
	}
}

// TestOpen_Foreign: a database whose schema holds another application's
// tables is refused and left as it was; a schema of engram's own in the
// same database, named by search_path, is not; a search path naming no
// schema is refused, saying what to do.
func TestOpen_Foreign(t *testing.T) {
	dsn := database(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, "CREATE TABLE public.orders (id int); CREATE SEQUENCE public.invoice_seq"); err != nil {
		t.Fatal(err)
	}
	tables := func() []string {
		t.Helper()
		rows, err := conn.Query(ctx, "SELECT schemaname || '.' || tablename FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1")
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	for _, noMigrate := range []bool{false, true} {
		s, err := postgres.Open(ctx, dsn, postgres.Options{NoMigrate: noMigrate})
		if err == nil && noMigrate {
			_, err = s.Version(ctx) // what engram migrate --check and other commands ask
			_ = s.Close()
		}
		if !errors.Is(err, postgres.ErrForeign) || !strings.Contains(err.Error(), "orders, invoice_seq") && !strings.Contains(err.Error(), "invoice_seq, orders") {
			t.Errorf("NoMigrate %v: %v; want ErrForeign naming the tables found", noMigrate, err)
		}
	}
	if got := tables(); len(got) != 1 || got[0] != "public.orders" {
		t.Errorf("after a refused open the database holds %q; want only public.orders", got)
	}

	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	if _, err := postgres.Open(ctx, dsn+sep+"search_path=nosuch", postgres.Options{}); err == nil || !strings.Contains(err.Error(), "CREATE SCHEMA") {
		t.Errorf("a search path of no schema: %v; want an error saying to create one", err)
	}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA mem"); err != nil {
		t.Fatal(err)
	}
	s, err := postgres.Open(ctx, dsn+sep+"search_path=mem", postgres.Options{})
	if err != nil {
		t.Fatalf("a schema of its own: %v", err)
	}
	defer func() { _ = s.Close() }()
	if v, err := s.Version(ctx); err != nil || v != postgres.SchemaVersion() {
		t.Errorf("in a schema of its own: version %d, %v", v, err)
	}
	got := tables()
	if !slices.Contains(got, "mem.engram_schema") || !slices.Contains(got, "public.orders") || slices.Contains(got, "public.engram_schema") {
		t.Errorf("tables after the open in schema mem: %q", got)
	}
}

// The password never comes from the URL; it comes from the environment or
// a file; a server that cannot be reached is said so, quickly.
func TestOpen_BadInput(t *testing.T) {
	ctx := t.Context()
	for _, dsn := range []string{"postgres://engram:secret@127.0.0.1:5432/engram", "postgres://engram@127.0.0.1/engram?password=secret",
		"postgres://engram@127.0.0.1/engram?Password=secret", "host=127.0.0.1 user=engram password=secret dbname=engram",
		"host=127.0.0.1 dbname=engram sslpassword = 'a secret'"} {
		if _, err := postgres.Open(ctx, dsn, postgres.Options{}); !errors.Is(err, postgres.ErrPasswordInURL) || strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%s) = %v; want ErrPasswordInURL, without the password", dsn, err)
		}
	}
	for _, dsn := range []string{"mysql://x@h/db", "postgres:///nohost", "not a url", "host=db user='secret password=secret", "secret host=db"} {
		if _, err := postgres.Open(ctx, dsn, postgres.Options{}); err == nil || !strings.Contains(err.Error(), "postgres://") || strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%s) = %v; want an error showing the URL's shape, without the password", dsn, err)
		}
	}
	// A closed port: connection refused at once.
	start := time.Now()
	_, err := postgres.Open(ctx, "postgres://engram@127.0.0.1:1/engram?sslmode=disable", postgres.Options{ConnectTimeout: 2 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "cannot reach the database") {
		t.Errorf("Open of a closed port = %v; want it said that the database cannot be reached", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("Open of a closed port took %v", d)
	}
	// The password file: missing, it is an error naming the variable.
	env := map[string]string{postgres.PasswordFileEnv: filepath.Join(t.TempDir(), "none")}
	_, err = postgres.Open(ctx, "postgres://engram@127.0.0.1:1/engram", postgres.Options{Getenv: func(k string) string { return env[k] }})
	if err == nil || !strings.Contains(err.Error(), postgres.PasswordFileEnv) {
		t.Errorf("Open with a missing password file = %v", err)
	}
}

// A keyword/value connection string, as libpq takes one, opens the
// database as its URL does.
func TestOpen_ConnectionString(t *testing.T) {
	u, err := url.Parse(database(t))
	if err != nil {
		t.Fatal(err)
	}
	kv := fmt.Sprintf("host=%s port=%s user=%s dbname='%s'", u.Hostname(), u.Port(), u.User.Username(), strings.TrimPrefix(u.Path, "/"))
	if mode := u.Query().Get("sslmode"); mode != "" {
		kv += " sslmode=" + mode
	}
	s, err := postgres.Open(t.Context(), kv, postgres.Options{})
	if err != nil {
		t.Fatalf("Open(%s): %v", kv, err)
	}
	defer func() { _ = s.Close() }()
	if v, err := s.Version(t.Context()); err != nil || v != postgres.SchemaVersion() {
		t.Errorf("Open(%s): version %d, %v", kv, v, err)
	}
}

// In a schema of its own beside another application's tables, the
// store's statistics are of engram's schema: its location names the
// schema, and its size is that of engram's tables, not the database's.
func TestStats_SchemaOfItsOwn(t *testing.T) {
	dsn := database(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	// Another application's 5 MB, and a schema for engram.
	if _, err := conn.Exec(ctx, `CREATE TABLE public.orders AS SELECT g AS id, repeat('x', 500) AS note FROM generate_series(1, 10000) AS g;
		CREATE SCHEMA mem`); err != nil {
		t.Fatal(err)
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	s, err := postgres.Open(ctx, dsn+sep+"search_path=mem", postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var orders, mem int64
	if err := conn.QueryRow(ctx, `SELECT pg_total_relation_size('public.orders'),
		(SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'mem' AND c.relkind IN ('r', 'm', 'S'))`).Scan(&orders, &mem); err != nil {
		t.Fatal(err)
	}
	if st.SizeBytes != mem {
		t.Errorf("size %d bytes; want %d, that of schema mem's tables (public.orders takes %d)", st.SizeBytes, mem, orders)
	}
	if !strings.Contains(st.Location, "search_path=mem") {
		t.Errorf("location %q does not name the schema", st.Location)
	}
}
