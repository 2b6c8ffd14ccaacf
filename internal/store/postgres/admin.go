package postgres

import (
	"context"
	"fmt"
	"net/url"
	"regexp"

	"github.com/jackc/pgx/v5"
)

// Databases made for a run and dropped after it: engram eval and engram
// bench measure the PostgreSQL backend on databases of their own, made on
// a server whose URL names a user who may create databases.

var databaseName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// CreateDatabase creates the database name on the server of adminURL
// (whose password, if any, comes from the environment as for Open) and
// returns the URL of the new database. A database of that name is
// dropped first.
func CreateDatabase(ctx context.Context, adminURL, name string, o Options) (string, error) {
	if !databaseName.MatchString(name) {
		return "", fmt.Errorf("postgres: %q is not a database name engram makes (lower case letters, digits, _)", name)
	}
	conn, err := adminConn(ctx, adminURL, o)
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return "", fmt.Errorf("postgres: drop database %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("postgres: create database %s: %w", name, explain(err))
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

// DropDatabase drops the database name on the server of adminURL,
// closing its connections.
func DropDatabase(ctx context.Context, adminURL, name string, o Options) error {
	if !databaseName.MatchString(name) {
		return fmt.Errorf("postgres: %q is not a database name engram makes", name)
	}
	conn, err := adminConn(ctx, adminURL, o)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("postgres: drop database %s: %w", name, err)
	}
	return nil
}

func adminConn(ctx context.Context, adminURL string, o Options) (*pgx.Conn, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = osGetenv
	}
	cfg, err := config(adminURL, getenv)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		return nil, fmt.Errorf("postgres: cannot reach the server: %w", explain(err))
	}
	return conn, nil
}
