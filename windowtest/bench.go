package windowtest

import (
	"sync/atomic"
	"testing"
	"time"
)

// Bench runs the micro-benchmarks every windowed package shares:
//
//	case=admit   TryAcquire on a limiter that admits every call (10^6 per ms)
//	case=reject  TryAcquire on a drained limiter whose window is an hour
//
// each in mode=serial and mode=parallel (RunParallel; set GOMAXPROCS with
// -cpu). admit/op reports the fraction admitted, so an accidental drain
// shows. The cross-algorithm comparison is make algorithms.
func Bench(b *testing.B, a Algorithm) {
	for _, c := range []struct {
		name  string
		limit int64
		w     time.Duration
		drain bool
	}{{"admit", 1e6, time.Millisecond, false}, {"reject", 1, time.Hour, true}} {
		for _, mode := range []string{"serial", "parallel"} {
			b.Run("case="+c.name+"/mode="+mode, func(b *testing.B) {
				l, err := a.New(c.limit, c.w)
				if err != nil {
					b.Fatal(err)
				}
				if c.drain {
					drain(l)
				}
				b.ReportAllocs()
				var admitted, calls int64
				if mode == "serial" {
					for b.Loop() {
						if l.TryAcquire() {
							admitted++
						}
						calls++
					}
				} else {
					var total, n atomicCounter
					b.RunParallel(func(pb *testing.PB) {
						var mine, k int64
						for pb.Next() {
							if l.TryAcquire() {
								mine++
							}
							k++
						}
						total.add(mine)
						n.add(k)
					})
					admitted, calls = total.load(), n.load()
				}
				if calls > 0 {
					b.ReportMetric(float64(admitted)/float64(calls), "admit/op")
				}
			})
		}
	}
}

type atomicCounter struct{ v atomic.Int64 }

func (c *atomicCounter) add(n int64) { c.v.Add(n) }
func (c *atomicCounter) load() int64 { return c.v.Load() }
