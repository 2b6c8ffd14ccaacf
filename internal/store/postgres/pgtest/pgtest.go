// Package pgtest gives tests a PostgreSQL database of their own on the
// server ENGRAM_TEST_POSTGRES names, and skips them, saying why, when it
// names none.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Database makes a database of its own for the test on the server that
// ENGRAM_TEST_POSTGRES names (a URL whose user may create databases),
// drops it when the test ends, and returns its URL; it skips the test
// when no server is named.
func Database(t testing.TB) string {
	t.Helper()
	admin := os.Getenv("ENGRAM_TEST_POSTGRES")
	if admin == "" {
		t.Skip("ENGRAM_TEST_POSTGRES names no PostgreSQL server (postgres://user@host:port/db of a user who may create databases; .ci/run starts one)")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("ENGRAM_TEST_POSTGRES: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "engram_test_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), admin)
		if err != nil {
			t.Error(err)
			return
		}
		defer func() { _ = c.Close(context.Background()) }()
		if _, err := c.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Error(err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}
