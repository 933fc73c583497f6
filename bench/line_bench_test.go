package bench

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/cpu"
)

// BenchmarkLineTransfer measures what one cache line costs to move from one
// core to another on this machine, the unit of every contended figure
// here: two goroutines hand a counter back and forth through one padded
// word, each waiting (spinning on loads) for the other's store. An op is
// one round trip, two transfers. Run it at -cpu 2; at -cpu 1 it is
// skipped, as the two goroutines would share one core. It belongs to the
// machine, not to any limiter: the docs divide contended costs by it.
func BenchmarkLineTransfer(b *testing.B) {
	if runtime.GOMAXPROCS(0) < 2 {
		b.Skip("needs two cores: run with -cpu 2")
	}
	var w struct {
		_ cpu.CacheLinePad
		v atomic.Int64
		_ cpu.CacheLinePad
	}
	b.ReportAllocs()
	n := int64(b.N)
	var wg sync.WaitGroup
	b.ResetTimer()
	for g := range int64(2) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < 2*n; i += 2 {
				for w.v.Load() != i {
				}
				w.v.Store(i + 1)
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(2*b.N), "ns/transfer")
}
