package mcpserver

import (
	"runtime"
	"testing"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
)

// BenchmarkNew measures what a server costs, as engram serve makes one per
// MCP session: time, and the heap each server keeps. The baseline, in the
// same run, infers and resolves the tools' schemas for each server, as
// before they were cached.
func BenchmarkNew(b *testing.B) {
	st := sqlitetest.Open(b, sqlite.Options{})
	eng, err := engine.New(st, engine.Options{Embed: engine.EmbedOptions{Provider: "none"}})
	if err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		keep := make([]*Server, 0, 256)
		for b.Loop() {
			keep = append(keep, New(eng, Options{Session: "s"}))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/float64(len(keep)), "heap-B/server")
	}
	b.Run("schemas-per-server", func(b *testing.B) {
		saved := schemas
		schemas = nil
		defer func() { schemas = saved }()
		run(b)
	})
	b.Run("shared-schema-cache", run)
}
