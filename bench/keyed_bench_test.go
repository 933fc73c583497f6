package bench

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/keyed"
)

// keyedCapacity and keyedRate make every call an admission on a key already
// held: a key's 1e7 tokens outlast any benchmark, and at one token per 100 s
// its bucket never refills to full between two visits, so keyed never drops
// it. (At 1 token/s, the rate before, a 1M-key fill pass on a loaded machine
// took over a second, keyed rightly dropped the refilled buckets, and the
// timed loop measured insertions.) capacity/rate = 1e9 s is the longest
// window httprate's and go-limiter's time.Duration arithmetic can hold.
const (
	keyedCapacity = 1e7
	keyedRate     = 0.01
)

// keyCounts are the keys= values: one hot key, a working set that fits in
// cache, and one that does not.
var keyCounts = []struct {
	name string
	n    int
}{{"1", 1}, {"10k", 10_000}, {"1M", 1 << 20}}

var (
	keysOnce sync.Once
	allKeys  []string // 16 bytes each, so a copy of one is exactly one 16-byte allocation
)

func benchKeys(n int) []string {
	keysOnce.Do(func() {
		allKeys = make([]string, 1<<20)
		for i := range allKeys {
			allKeys[i] = fmt.Sprintf("key-%012d", i)
		}
	})
	return allKeys[:n]
}

// keyBytesCopied is what an implementation that copies each key it stores
// spends on the copy: keyed clones keys (so that it never pins a caller's
// larger buffer); the peers keep the caller's string. Key bytes are
// excluded from the B/key metric.
func keyBytesCopied(name string) int64 {
	if name == "keyed" {
		return 16
	}
	return 0
}

// BenchmarkKeyed measures one admission on a key already held, keys visited
// in turn (each goroutine of mode=parallel from its own offset), for every
// per-key limiter. Names:
//
//	BenchmarkKeyed/keys=10k/mode=parallel/impl=keyed-2
//
// At keys=1M the setup also reports B/key: heap bytes per key held, after a
// GC, keys' own bytes excluded (see keyBytesCopied).
func BenchmarkKeyed(b *testing.B) {
	for _, kc := range keyCounts {
		keys := benchKeys(kc.n)
		for _, mode := range benchModes {
			for _, im := range KeyedImpls {
				b.Run(fmt.Sprintf("keys=%s/mode=%s/impl=%s", kc.name, mode, im.Name), func(b *testing.B) {
					benchKeyed(b, im, keys, mode == "parallel", kc.n == 1<<20)
				})
			}
		}
	}
}

func benchKeyed(b *testing.B, im KeyedImpl, keys []string, parallel, measure bool) {
	var before runtime.MemStats
	if measure {
		runtime.GC()
		runtime.ReadMemStats(&before)
	}
	l, closer, err := im.New(keyedCapacity, keyedRate, 2*len(keys))
	if err != nil {
		b.Fatal(err)
	}
	if closer != nil {
		defer closer.Close()
	}
	for _, k := range keys {
		if !l.Allow(k) {
			b.Fatalf("%s: the first call on key %q was rejected", im.Name, k)
		}
	}
	perKey := 0.0
	if measure {
		var after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&after)
		perKey = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(len(keys)) - float64(keyBytesCopied(im.Name))
	}
	b.ReportAllocs()
	// cpu-ns/op is CPU time per call: the benchmark thread's own (serial,
	// the goroutine locked to its thread) or the whole process's
	// (parallel). Unlike ns/op it leaves out the time the benchmark waited
	// for a CPU, so it stays comparable on a machine shared with other
	// work; in parallel it also counts other threads' work (GC, say).
	cpu := processCPU
	if !parallel {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cpu = threadCPU
	}
	cpu0, cpuOK := cpu()
	b.ResetTimer() // b.Loop does this itself; RunParallel does not
	var admitted, calls atomic.Int64
	if !parallel {
		var n, i int64
		for b.Loop() {
			if l.Allow(keys[i]) {
				n++
			}
			if i++; i == int64(len(keys)) {
				i = 0
			}
		}
		admitted.Add(n)
		calls.Store(int64(b.N))
	} else {
		var seq atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			// Goroutines start far apart so that they do not walk in
			// lockstep over the same keys.
			i := int(seq.Add(1)*7919) % len(keys)
			var n, k int64
			for pb.Next() {
				if l.Allow(keys[i]) {
					n++
				}
				if i++; i == len(keys) {
					i = 0
				}
				k++
			}
			admitted.Add(n)
			calls.Add(k)
		})
	}
	cpu1, _ := cpu()
	if measure {
		b.ReportMetric(perKey, "B/key")
	}
	if cpuOK && b.N > 0 {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}
	if c := calls.Load(); c > 0 {
		b.ReportMetric(float64(admitted.Load())/float64(c), "admit/op")
	}
	runtime.KeepAlive(l)
}

// keyedAllowN and keyedLimits3 drive keyed the way BenchmarkKeyedLimits
// compares it: AllowN on a one-limit limiter, and AllowLimits with three
// limits per call (each as slow to refill as the one limit), both
// returning the whole Decision.
type keyedAllowN struct{ l *keyed.Limiter }

func (k keyedAllowN) Allow(key string) bool {
	d, _ := k.l.AllowN(context.Background(), key, 1)
	return d.Allowed
}

type keyedLimits3 struct {
	l      *keyed.Limiter
	limits []admit.Limit
}

func (k keyedLimits3) Allow(key string) bool {
	d, _ := k.l.AllowLimits(context.Background(), key, 1, k.limits...)
	return d.Allowed
}

var keyedLimitImpls = []KeyedImpl{
	{Name: "allown", Exact: true, New: func(capacity int64, r float64, maxKeys int) (KeyedLimiter, io.Closer, error) {
		l, err := keyed.New(capacity, r, keyed.WithMaxKeys(maxKeys))
		return keyedAllowN{l}, nil, err
	}},
	{Name: "allowlimits3", Exact: true, New: func(capacity int64, r float64, maxKeys int) (KeyedLimiter, io.Closer, error) {
		l, err := keyed.New(capacity, r, keyed.WithMaxKeys(maxKeys))
		limits := []admit.Limit{
			{Name: "burst", Capacity: capacity, Rate: r},
			{Name: "hourly", Capacity: capacity, Rate: r / 2},
			{Name: "daily", Capacity: capacity, Rate: r / 10},
		}
		return keyedLimits3{l, limits}, nil, err
	}},
}

// BenchmarkKeyedLimits measures the cost of several limits per call: keyed's
// AllowN under one limit against AllowLimits under three, on 10k held keys,
// every call admitted. Names:
//
//	BenchmarkKeyedLimits/keys=10k/mode=serial/impl=allowlimits3-2
func BenchmarkKeyedLimits(b *testing.B) {
	keys := benchKeys(10_000)
	for _, mode := range benchModes {
		for _, im := range keyedLimitImpls {
			b.Run(fmt.Sprintf("keys=10k/mode=%s/impl=%s", mode, im.Name), func(b *testing.B) {
				benchKeyed(b, im, keys, mode == "parallel", false)
			})
		}
	}
}
