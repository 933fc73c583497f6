package shardedbucket

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// BenchmarkHome measures ways to pick a home shard, each followed by an
// atomic add on the chosen shard's padded counter, as an admission would
// write its shard. What matters is not only the pick's own cost but whether
// goroutines running at the same moment land on different cache lines.
//
//	pick=procpin  the P id through runtime.procPin (home.go; the default)
//	pick=rand     math/rand/v2, the runtime's per-thread generator (home_purego.go)
//	pick=pool     a sync.Pool of per-P hints, the technique of xsync's counters
//	pick=stack    a hash of a stack address: per goroutine, not per P
//	pick=shared   one shared counter: the contention sharding exists to avoid
func BenchmarkHome(b *testing.B) {
	shards := 1 << bitsFor(runtime.GOMAXPROCS(0))
	type line struct {
		n atomic.Int64
		_ [max(unsafe.Sizeof(cpu.CacheLinePad{}), 8) - 8]byte
	}
	lines := make([]line, shards)
	mask := uint(shards - 1)
	var next atomic.Uint32
	pool := sync.Pool{New: func() any { h := uint(next.Add(1)); return &h }}
	for _, pick := range []struct {
		name string
		fn   func() uint
	}{
		{"procpin", home},
		{"rand", func() uint { return uint(rand.Uint64()) }},
		{"pool", func() uint { h := pool.Get().(*uint); v := *h; pool.Put(h); return v }},
		{"stack", func() uint { var x byte; return uint(uintptr(unsafe.Pointer(&x))>>13) * 0x9E3779B1 >> 7 }},
		{"shared", func() uint { return 0 }},
	} {
		b.Run("pick="+pick.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					lines[pick.fn()&mask].n.Add(1)
				}
			})
		})
	}
}

func bitsFor(n int) int {
	b := 0
	for 1<<b < n {
		b++
	}
	return b
}
