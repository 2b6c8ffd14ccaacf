package bench

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/tokens"
)

// ArchiveOptions shape the archivalist workload: the seed's stress test of
// several sessions with many agents each.
type ArchiveOptions struct {
	Sessions         int
	AgentsPerSession int
	// Storm is how long every agent writes as fast as it can: each writes
	// at least once, and a write begun within it completes and counts.
	Storm time.Duration
	// Mixed is how long readers read in the seed's mix while a writer
	// writes at WriteRate per second.
	Mixed     time.Duration
	WriteRate int
	Readers   int
	Seed      uint64
	// Prefill is how many records the agents write before the storm, not
	// timed, so that every backend briefs over at least as many records
	// whatever its write rate.
	Prefill int
}

// ArchiveReport is what the workload measured.
type ArchiveReport struct {
	Agents  int `json:"agents"`
	Servers int `json:"servers"`

	StormWrites    int            `json:"storm_writes"`
	StormSeconds   float64        `json:"storm_seconds"`
	WritesPerSec   float64        `json:"writes_per_sec"`
	StormWriteLat  Latencies      `json:"storm_write_latency"`
	MixedWrites    int            `json:"mixed_writes"`
	Reads          int            `json:"reads"`
	ReadsPerSec    float64        `json:"reads_per_sec"`
	Unchanged      float64        `json:"unchanged"` // fraction of conditional reads answered NOT_MODIFIED
	ByOp           map[string]int `json:"by_op"`
	TokensPerRead  float64        `json:"tokens_per_read"`
	StandardTokens float64        `json:"always_standard_tokens"` // the same reads, each a standard briefing
	FullTokens     float64        `json:"always_full_tokens"`     // the same reads, each a full briefing
	Briefing       Latencies      `json:"briefing_latency"`
	NotModified    Latencies      `json:"not_modified_latency"`
	Cached         Latencies      `json:"cached_latency"`     // briefings served whole from the cache
	Recomputed     Latencies      `json:"recomputed_latency"` // briefings assembled from components
}

// RunArchive runs the workload against a (the caller's fresh archive).
func RunArchive(ctx context.Context, a *archive.Archive, enc *tokens.Encoding, opts ArchiveOptions) (ArchiveReport, error) {
	return RunArchiveServers(ctx, []*archive.Archive{a}, enc, opts)
}

// RunArchiveServers runs the workload against several archivalists over
// one store, as several servers sharing a database run it: agent i is
// registered, writes and is briefed through servers[i%len(servers)], each
// server with its own caches and mirror of the global history.
func RunArchiveServers(ctx context.Context, servers []*archive.Archive, enc *tokens.Encoding, opts ArchiveOptions) (ArchiveReport, error) {
	if len(servers) == 0 {
		return ArchiveReport{}, errors.New("no server")
	}
	var handles []*archive.Handle
	var via []*archive.Archive // the server of each handle
	for s := range opts.Sessions {
		var root *archive.Handle
		for i := range opts.AgentsPerSession {
			spec := archive.AgentSpec{ID: fmt.Sprintf("s%da%d", s, i), SessionID: fmt.Sprintf("session-%d", s), Model: "claude-opus-4-5"}
			if root != nil {
				spec.ParentID = root.Agent().ID
				spec.SessionID = ""
			}
			a := servers[len(handles)%len(servers)]
			h, err := a.Register(ctx, spec)
			if err != nil {
				return ArchiveReport{}, err
			}
			if root == nil {
				root = h
			}
			handles = append(handles, h)
			via = append(via, a)
		}
	}
	rep := ArchiveReport{Agents: len(handles), Servers: len(servers), ByOp: map[string]int{}}
	var seq atomic.Int64

	// Phase 0: the records already there, written by 8 agents at a time.
	if opts.Prefill > 0 {
		var next atomic.Int64
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for w := range errs {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(opts.Seed, uint64(1<<32+w)))
				for i := next.Add(1); i <= int64(opts.Prefill); i = next.Add(1) {
					if err := write(ctx, handles[int(i)%len(handles)], r, seq.Add(1)); err != nil {
						errs[w] = err
						return
					}
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return rep, err
		}
	}

	// Phase 1: the write storm.
	var lats []time.Duration
	var mu sync.Mutex
	stormCtx, cancel := context.WithTimeout(ctx, opts.Storm)
	start := time.Now()
	var wg sync.WaitGroup
	var firstErr error
	for _, h := range handles {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(opts.Seed, uint64(seq.Add(1))))
			var mine []time.Duration
			// Every agent writes at least once, and a write begun before
			// the storm ends runs to its end and counts (StormSeconds
			// runs until the last): cancelled in flight, a loaded
			// machine's storm could end with no write at all.
			for first := true; first || stormCtx.Err() == nil; first = false {
				t0 := time.Now()
				err := write(ctx, h, r, seq.Add(1))
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	cancel()
	if firstErr != nil {
		return rep, firstErr
	}
	rep.StormSeconds = time.Since(start).Seconds()
	rep.StormWrites = len(lats)
	rep.WritesPerSec = float64(len(lats)) / rep.StormSeconds
	rep.StormWriteLat = Summarize(lats)

	// Phase 2: reads in the seed's mix while writes go on.
	mixCtx, cancel := context.WithTimeout(ctx, opts.Mixed)
	defer cancel()
	var writes atomic.Int64
	wg.Go(func() {
		r := rand.New(rand.NewPCG(opts.Seed, 99))
		tick := time.NewTicker(time.Second / time.Duration(max(opts.WriteRate, 1)))
		defer tick.Stop()
		for {
			select {
			case <-mixCtx.Done():
				return
			case <-tick.C:
			}
			if err := write(mixCtx, handles[r.IntN(len(handles))], r, seq.Add(1)); err == nil {
				writes.Add(1)
			}
		}
	})
	type held struct {
		mu sync.Mutex
		v  map[string]archive.Versions // by tier or "delta"
	}
	helds := make([]held, len(handles))
	for i := range helds {
		helds[i].v = map[string]archive.Versions{}
	}
	var (
		reads, conditional, unchanged atomic.Int64
		tokensRead, stdTokens, fullT  atomic.Int64
		briefLat, nmLat, hitLat, miss []time.Duration
		byOp                          = map[string]int{}
	)
	nm := func(gv, sv uint64) int {
		return enc.Count(fmt.Sprintf(`{"status":"NOT_MODIFIED","gv":%d,"sv":%d}`, gv, sv))
	}
	// Agents start their work with a briefing (not measured).
	for i, h := range handles {
		b, err := via[i].Briefing(ctx, h.Session(), archive.Standard, nil)
		if err != nil {
			return rep, err
		}
		helds[i].v["standard"] = archive.Versions{GV: b.GV, SV: b.SV}
	}
	readers := max(opts.Readers, 1)
	start = time.Now()
	for w := range readers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(opts.Seed, uint64(1000+w)))
			var bl, nl, hl, ml []time.Duration
			ops := map[string]int{}
			for mixCtx.Err() == nil {
				i := r.IntN(len(handles))
				h, a := handles[i], via[i]
				hd := &helds[i]
				x := r.Float64()
				op := "full"
				switch {
				case x < 0.50:
					op = "micro"
				case x < 0.80:
					op = "standard"
				case x < 0.95:
					op = "delta"
				}
				ops[op]++
				hd.mu.Lock()
				have, ok := hd.v[op]
				if op == "delta" {
					// A sync asks for what changed since the newest version
					// the agent has seen, from whichever read.
					for _, v := range hd.v {
						if v.GV > have.GV {
							have, ok = v, true
						}
					}
				}
				hd.mu.Unlock()
				var tok int
				var gv, sv uint64
				switch op {
				case "delta":
					req := archive.GlobalRead{}
					if ok {
						req.IfGV, req.Since = have.GV, have.GV
						conditional.Add(1)
					}
					t0 := time.Now()
					res, err := a.ReadGlobal(mixCtx, req)
					if err != nil {
						continue
					}
					d := time.Since(t0)
					gv = res.GV
					if res.Status == archive.StatusNotModified {
						unchanged.Add(1)
						tok = nm(res.GV, 0)
						nl = append(nl, d)
					} else {
						b, _ := json.Marshal(res)
						tok = enc.Count(string(b))
					}
				default:
					tier := archive.Tier(op)
					var hv *archive.Versions
					if ok && tier != archive.Full {
						hv = &have
						conditional.Add(1)
					}
					t0 := time.Now()
					b, err := a.Briefing(mixCtx, h.Session(), tier, hv)
					if err != nil {
						continue
					}
					d := time.Since(t0)
					bl = append(bl, d)
					gv, sv = b.GV, b.SV
					switch {
					case b.Status == archive.StatusNotModified:
						unchanged.Add(1)
						tok = nm(b.GV, b.SV)
						nl = append(nl, d)
					case b.Cached:
						hl = append(hl, d)
						tok = b.Tokens
					default:
						ml = append(ml, d)
						tok = b.Tokens
					}
				}
				hd.mu.Lock()
				hd.v[op] = archive.Versions{GV: gv, SV: sv}
				hd.mu.Unlock()
				reads.Add(1)
				tokensRead.Add(int64(tok))
				// The baselines: what the same read would cost as an
				// unconditional standard or full briefing.
				if s, err := a.Briefing(mixCtx, h.Session(), archive.Standard, nil); err == nil {
					stdTokens.Add(int64(s.Tokens))
				}
				if f, err := a.Briefing(mixCtx, h.Session(), archive.Full, nil); err == nil {
					fullT.Add(int64(f.Tokens))
				}
			}
			mu.Lock()
			briefLat = append(briefLat, bl...)
			nmLat = append(nmLat, nl...)
			hitLat = append(hitLat, hl...)
			miss = append(miss, ml...)
			for k, v := range ops {
				byOp[k] += v
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	n := float64(reads.Load())
	rep.MixedWrites = int(writes.Load())
	rep.Reads = int(n)
	rep.ReadsPerSec = n / secs
	if c := conditional.Load(); c > 0 {
		rep.Unchanged = float64(unchanged.Load()) / float64(c)
	}
	if n > 0 {
		rep.TokensPerRead = float64(tokensRead.Load()) / n
		rep.StandardTokens = float64(stdTokens.Load()) / n
		rep.FullTokens = float64(fullT.Load()) / n
	}
	rep.ByOp = byOp
	rep.Briefing = Summarize(briefLat)
	rep.NotModified = Summarize(nmLat)
	rep.Cached = Summarize(hitLat)
	rep.Recomputed = Summarize(miss)
	return rep, nil
}

// write makes one write in the workload's mix: two thirds session state
// (files and the resume point), one third global history (insights,
// patterns and failures, each new).
func write(ctx context.Context, h *archive.Handle, r *rand.Rand, n int64) error {
	text := fmt.Sprintf("%x", sha256.Sum256(fmt.Appendf(nil, "%d", n)))[:24]
	var err error
	switch x := r.IntN(9); {
	case x < 4:
		_, err = h.UpdateFile(ctx, archive.FileState{Path: fmt.Sprintf("app/mod%d/file%d.py", r.IntN(20), r.IntN(50)),
			Status: archive.Modified, Summary: "changed " + text})
	case x < 6:
		_, err = h.UpdateResume(ctx, archive.Resume{Current: "step " + text, Next: []string{"test " + text[:8], "review"}})
	case x < 8:
		_, err = h.RecordInsight(ctx, archive.Insight{Insight: "observed " + text, Category: "structure.modules"})
	default:
		_, err = h.RecordFailure(ctx, archive.Failure{Approach: "tried " + text, Reason: "it broke " + text[:6], Category: "testing.unit",
			Resolution: &archive.Resolution{Approach: "fixed " + text[:10], Outcome: archive.Success}})
	}
	if ce := (*archive.ConflictError)(nil); errors.As(err, &ce) {
		return nil // a sub-agent may not override its parent: refused, as designed
	}
	return err
}
