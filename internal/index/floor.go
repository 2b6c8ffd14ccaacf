package index

import (
	"context"
	"crypto/sha256"
	"io"
	"os"
	"sync"
	"time"
)

// FloorResult is what Floor measured.
type FloorResult struct {
	Files   int
	Bytes   int64
	Elapsed time.Duration
}

// Floor measures the physical floor of indexing root: walking it as Run
// does and reading and hashing (SHA-256) every file Run would read, with the
// same number of workers, storing nothing. Benchmarks compare Run with it.
func Floor(ctx context.Context, root string, opts Options) (FloorResult, error) {
	opts.defaults()
	start := time.Now()
	abs, err := resolveRoot(root)
	if err != nil {
		return FloorResult{}, err
	}
	found, err := walk(ctx, abs, nil, nil, opts.Exclude)
	if err != nil {
		return FloorResult{}, err
	}
	files := make(chan candidate)
	var mu sync.Mutex // guards res
	var res FloorResult
	var wg sync.WaitGroup
	for range opts.Workers {
		wg.Go(func() {
			buf := make([]byte, 64<<10)
			for c := range files {
				f, err := os.Open(c.abs)
				if err != nil {
					continue
				}
				h := sha256.New()
				n, _ := io.CopyBuffer(h, io.LimitReader(f, opts.MaxFileBytes+1), buf)
				_ = h.Sum(nil)
				f.Close()
				mu.Lock()
				res.Files++
				res.Bytes += n
				mu.Unlock()
			}
		})
	}
	for _, c := range found.files {
		if opts.nameReason(c.path) != "" || c.size > opts.MaxFileBytes || c.size == 0 {
			continue
		}
		files <- c
	}
	close(files)
	wg.Wait()
	res.Elapsed = time.Since(start)
	return res, nil
}
