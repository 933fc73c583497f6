package buckettest

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/admit-go/admit"
)

// Bench runs the micro-benchmarks every bucket package shares, named so that
// benchstat can pivot on them:
//
//	case=clock   time.Since alone: the floor, since every call reads the clock
//	case=admit   TryAcquire on a bucket that never empties (1e9 tokens, 1e9/s)
//	case=reject  TryAcquire on an empty bucket that refills once per 10^6 s
//
// each in mode=serial and mode=parallel (RunParallel; set GOMAXPROCS with
// -cpu). The admit/op metric reports the fraction of calls admitted, so a
// run whose bucket emptied by accident shows it. The cross-library
// comparison lives in the bench module.
func Bench[L admit.Limiter](b *testing.B, newBucket Factory[L]) {
	origin := time.Now()
	for _, c := range []struct {
		name     string
		capacity int64
		rate     float64
		drain    bool
	}{{"clock", 0, 0, false}, {"admit", 1e9, 1e9, false}, {"reject", 1, 1e-6, true}} {
		for _, mode := range []string{"serial", "parallel"} {
			b.Run("case="+c.name+"/mode="+mode, func(b *testing.B) {
				op := func() bool { return time.Since(origin) >= 0 }
				if c.capacity > 0 {
					l, err := newBucket(c.capacity, c.rate)
					if err != nil {
						b.Fatal(err)
					}
					if c.drain {
						for l.TryAcquire() {
						}
					}
					op = l.TryAcquire
				}
				b.ReportAllocs()
				var admitted, calls atomic.Int64
				if mode == "serial" {
					var n, k int64
					for b.Loop() {
						if op() {
							n++
						}
						k++
					}
					admitted.Add(n)
					calls.Add(k)
				} else {
					b.RunParallel(func(pb *testing.PB) {
						var n, k int64
						for pb.Next() {
							if op() {
								n++
							}
							k++
						}
						admitted.Add(n)
						calls.Add(k)
					})
				}
				if c.capacity > 0 && calls.Load() > 0 {
					b.ReportMetric(float64(admitted.Load())/float64(calls.Load()), "admit/op")
				}
			})
		}
	}
}
