// Package backend holds the logic that the store backends
// (internal/store/sqlite, internal/store/postgres) share and that touches
// no database: written once here, so that every backend does the same with
// the same input. What does need the database stays in each backend.
package backend
