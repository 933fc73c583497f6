package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
)

// Benchmark names are key=value so that benchstat can pivot on any key:
//
//	BenchmarkTryAcquire/case=admit/mode=parallel/impl=shardedbucket-2
//
// `benchstat -col /impl` then gives one row per case and mode and one column
// per implementation, floors included. GOMAXPROCS is set only through -cpu.

// limiterCase is one workload: the bucket it runs on and the call it makes.
type limiterCase struct {
	name     string
	capacity int64
	rate     float64 // tokens per second
	n        int64   // tokens per call: 1 calls TryAcquire, more TryAcquireN(n)
	drain    bool    // empty the bucket before the timer starts
	block    bool    // call Acquire(context.Background()) instead
}

// mixedRate admits a part of the calls, not most and not none: at -cpu 1
// on the machine this was tuned on (2-core AMD EPYC, about 90 ns a call),
// roughly half of the
// serial calls of this module's buckets. Faster implementations see a lower
// fraction and parallel runs a lower one still; the admit/op metric reports
// what each run actually admitted, so read ns/op beside it.
const mixedRate = 6e6

// tryCases are the non-blocking workloads. limited is a realistic
// rate-limited service: capacity 100 at 1e4/s under saturating demand, so
// nearly every call is rejected while the bucket is dry and the few tokens
// that appear are fought over. admit and n=8 use capacity 1e9
// refilled at 1e9/s: a full second of calls would have to run faster than
// one per nanosecond (or one n=8 call per 8 ns) to empty it, which no
// implementation comes near, so every call is admitted; admit/op shows it.
var tryCases = []limiterCase{
	{name: "admit", capacity: 1e9, rate: 1e9, n: 1},
	{name: "reject", capacity: 1, rate: 1e-6, n: 1, drain: true},
	{name: "mixed", capacity: 100, rate: mixedRate, n: 1},
	{name: "limited", capacity: 100, rate: 1e4, n: 1},
	{name: "n=8", capacity: 1e9, rate: 1e9, n: 8},
}

// acquireCases are the blocking workloads: rarewait is Acquire on a bucket
// that never runs dry, so it measures the blocking path's fast path.
var acquireCases = []limiterCase{
	{name: "rarewait", capacity: 1e9, rate: 1e9, n: 1, block: true},
}

var benchModes = []string{"serial", "parallel"}

// BenchmarkTryAcquire runs the non-blocking cases. go.uber.org/ratelimit
// has no non-blocking call and is absent here; juju's TakeAvailable(8) in
// case=n=8 is all-or-nothing only because the bucket never empties (see
// jujuLimiter).
func BenchmarkTryAcquire(b *testing.B) {
	for _, c := range tryCases {
		for _, mode := range benchModes {
			for _, im := range append(Impls[:len(Impls):len(Impls)], Floors...) {
				if !im.Try {
					continue
				}
				b.Run(fmt.Sprintf("case=%s/mode=%s/impl=%s", c.name, mode, im.Name), func(b *testing.B) {
					benchLimiter(b, im, c, mode == "parallel")
				})
			}
		}
	}
}

// BenchmarkAcquire runs the blocking cases, uber included: its Take blocks
// like Acquire does. juju's Wait and uber's Take take no context.
func BenchmarkAcquire(b *testing.B) {
	for _, c := range acquireCases {
		for _, mode := range benchModes {
			for _, im := range append(Impls[:len(Impls):len(Impls)], Floors...) {
				b.Run(fmt.Sprintf("case=%s/mode=%s/impl=%s", c.name, mode, im.Name), func(b *testing.B) {
					benchLimiter(b, im, c, mode == "parallel")
				})
			}
		}
	}
}

// newCaseLimiter builds im's limiter for c, drained if c asks for it. It is
// called inside each sub-benchmark, after -cpu has set GOMAXPROCS, because
// shardedbucket sizes its shards from GOMAXPROCS.
func newCaseLimiter(tb testing.TB, im Impl, c limiterCase) Limiter {
	tb.Helper()
	l, err := im.New(c.capacity, c.rate)
	if err != nil {
		tb.Fatalf("%s: New(%d, %v): %v", im.Name, c.capacity, c.rate, err)
	}
	// Floors admit every call; they have nothing to drain.
	if c.drain && !im.Floor {
		for i := int64(0); i <= c.capacity && l.TryAcquire(); i++ {
		}
		if l.TryAcquire() {
			tb.Fatalf("%s: still admitting after draining capacity %d", im.Name, c.capacity)
		}
	}
	return l
}

// handle returns the limiter one goroutine should call: its own, for the
// floor that keeps one counter per goroutine, the shared one otherwise.
func handle(l Limiter) Limiter {
	if lo, ok := l.(Localizer); ok {
		return lo.Local()
	}
	return l
}

// benchLimiter times c's call on a fresh limiter from im, from one goroutine
// or from RunParallel's GOMAXPROCS goroutines, and reports the fraction of
// calls admitted as admit/op. Failures inside the parallel body are counted,
// never fatal.
func benchLimiter(b *testing.B, im Impl, c limiterCase, parallel bool) {
	l := newCaseLimiter(b, im, c)
	ctx := context.Background()
	b.ReportAllocs()

	// The loops are spelled out, one per call and mode, so that each
	// iteration is the call under test, one interface dispatch and a
	// counter: no closure and no per-call branch on the case.
	var admitted atomic.Int64
	if !parallel {
		h := handle(l)
		var ok int64
		switch {
		case c.block:
			for b.Loop() {
				if h.Acquire(ctx) == nil {
					ok++
				}
			}
		case c.n == 1:
			for b.Loop() {
				if h.TryAcquire() {
					ok++
				}
			}
		default:
			for b.Loop() {
				if h.TryAcquireN(c.n) {
					ok++
				}
			}
		}
		admitted.Store(ok)
	} else {
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			h := handle(l)
			var ok int64
			switch {
			case c.block:
				for pb.Next() {
					if h.Acquire(ctx) == nil {
						ok++
					}
				}
			case c.n == 1:
				for pb.Next() {
					if h.TryAcquire() {
						ok++
					}
				}
			default:
				for pb.Next() {
					if h.TryAcquireN(c.n) {
						ok++
					}
				}
			}
			admitted.Add(ok)
		})
	}
	b.ReportMetric(float64(admitted.Load())/float64(b.N), "admit/op")
}
