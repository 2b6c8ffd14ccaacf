package sqlite

import "testing"

// Migrate takes the step after a store's version as migrations[version]
// (migrate.go), so step i must be version i+1: a gap or a repeat, as two
// branches that each add a step can leave when they merge, would run the
// wrong step on every store past it.
func TestMigrations_Numbered(t *testing.T) {
	for i, m := range migrations {
		if m.version != i+1 {
			t.Errorf("migrations[%d] (%s) is version %d, want %d: number the steps 1, 2, 3, ... in order", i, m.name, m.version, i+1)
		}
	}
}
