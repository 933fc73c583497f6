package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
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
			allKeys[i] = KeyName(i)
		}
	})
	return allKeys[:n]
}

// BenchmarkKeyed measures one admission on a key already held, keys visited
// in turn (each goroutine of mode=parallel from its own offset), for every
// per-key limiter. Names:
//
//	BenchmarkKeyed/keys=10k/mode=parallel/impl=keyed-2
//
// At keys=1M the setup also reports B/key: the heap bytes the limiter holds
// per held key, after a GC, its tables' slack and any copy it makes of the
// keys included (keyed copies each key, 16 bytes here, so that it never
// pins a caller's buffer; the peers keep the caller's string, which the
// benchmark allocated before it measures).
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
		perKey = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(len(keys))
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
	b.ResetTimer() // b.Loop does this itself; split does not
	// Every mode makes b.N calls (split's shares add up to it).
	var admitted atomic.Int64
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
	} else {
		split(b, func(g, count int) {
			// Goroutines start far apart, and Walk's directions
			// alternate, so that they do not walk in step.
			n, _ := Walk(l, keys, g, (g+1)*7919%len(keys), count)
			admitted.Add(n)
		})
	}
	cpu1, _ := cpu()
	if measure {
		b.ReportMetric(perKey, "B/key")
	}
	if cpuOK && b.N > 0 {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}
	if b.N > 0 {
		b.ReportMetric(float64(admitted.Load())/float64(b.N), "admit/op")
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

// scalingKeys is how many held keys BenchmarkKeyedScaling spreads over the
// goroutines: the 10k of the per-key comparison.
const scalingKeys = 10_000

// BenchmarkKeyedScaling measures how one keyed.Limiter's throughput on held
// keys grows from one core to two: run it at -cpu 1 and at -cpu 2 (one
// go test per value); the scaling ratio is ns/op at -cpu 1 over ns/op at
// -cpu 2, throughput at two cores over throughput at one, which
// cmd/report prints (2 is perfect; below 1, a second core slows every call
// down). Every call is an admission on a held key (capacity 1e7, 0.01
// tokens/s); split runs one goroutine per P, goroutine g making its share
// of b.N calls.
//
//   - pattern=walk: every goroutine walks all the keys in turn, each from
//     its own offset and the odd ones backwards (see Walk), so every key's
//     state is written by every core (the usual shape: clients are not
//     pinned to cores), in the keys' order in memory;
//   - pattern=shuffle: every goroutine visits all the keys, each in a
//     random order of its own, so every key's state is written by every
//     core and no hardware prefetcher can guess the next one: each call
//     finds its key's line last written by the other core about half the
//     time and waits for it, in any limiter that keeps one copy of a key's
//     state (the clients of a real service arrive in no order);
//   - pattern=halves: goroutine g walks only its own share of the keys,
//     keys[g·n/P : (g+1)·n/P], so no key is written by two cores and only
//     the table is shared;
//   - impl=keyed: one Limiter holds every key; impl=keyed-split (halves
//     only): each goroutine's share is held by a Limiter of its own, the
//     reference where the goroutines share nothing but the process;
//     impl=syncmap-xrate: the fastest peer in parallel at 10k keys, one
//     sync.Map.
//
// It also reports cpu-ns/op, the process's CPU time per call: on a machine
// shared with other work, where -cpu 2 may not get two cores, the ratio of
// cpu-ns/op at -cpu 2 to -cpu 1 says whether a call costs more CPU with a
// second core (the anti-scaling this benchmark watches for) even when the
// wall-clock ratio cannot show it. Names:
//
//	BenchmarkKeyedScaling/pattern=halves/impl=keyed-2
func BenchmarkKeyedScaling(b *testing.B) {
	keys := benchKeys(scalingKeys)
	syncmap, _ := LookupKeyed("syncmap-xrate")
	keyedImpl, _ := LookupKeyed("keyed")
	for _, pattern := range []string{"walk", "shuffle", "halves"} {
		for _, impl := range []string{"keyed", "keyed-split", "syncmap-xrate"} {
			if impl == "keyed-split" && pattern != "halves" {
				continue
			}
			b.Run(fmt.Sprintf("pattern=%s/impl=%s", pattern, impl), func(b *testing.B) {
				procs := runtime.GOMAXPROCS(0)
				im := keyedImpl
				if impl == "syncmap-xrate" {
					im = syncmap
				}
				// lims[g] is goroutine g's limiter: one for all but in
				// keyed-split.
				lims := make([]KeyedLimiter, procs)
				for g := range procs {
					if g > 0 && impl != "keyed-split" {
						lims[g] = lims[0]
						continue
					}
					l, closer, err := im.New(keyedCapacity, keyedRate, 2*len(keys))
					if err != nil {
						b.Fatal(err)
					}
					if closer != nil {
						defer closer.Close()
					}
					lims[g] = l
				}
				// shares[g] is goroutine g's keys, in its order.
				shares := make([][]string, procs)
				for g := range procs {
					switch pattern {
					case "walk":
						shares[g] = keys
					case "shuffle":
						ks := append([]string(nil), keys...)
						r := rand.New(rand.NewPCG(uint64(g), 1))
						r.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
						shares[g] = ks
					case "halves":
						shares[g] = keys[g*len(keys)/procs : (g+1)*len(keys)/procs]
					}
				}
				// Every key held, in the order allocated: by one limiter
				// (its own share each in keyed-split).
				fill := func(l KeyedLimiter, ks []string) {
					for _, k := range ks {
						if !l.Allow(k) {
							b.Fatalf("%s: the first call on key %q was rejected", impl, k)
						}
					}
				}
				if impl == "keyed-split" {
					for g := range procs {
						fill(lims[g], shares[g])
					}
				} else {
					fill(lims[0], keys)
				}
				b.ReportAllocs()
				cpu0, cpuOK := processCPU()
				b.ResetTimer()
				var admitted atomic.Int64 // split's shares add up to b.N
				split(b, func(g, count int) {
					l, ks := lims[g], shares[g]
					i := 0
					if pattern == "walk" {
						i = g * len(ks) / procs // far apart
					}
					n, _ := Walk(l, ks, g, i, count)
					admitted.Add(n)
				})
				b.StopTimer()
				cpu1, _ := processCPU()
				if cpuOK && b.N > 0 {
					b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
				}
				if b.N > 0 {
					b.ReportMetric(float64(admitted.Load())/float64(b.N), "admit/op")
				}
			})
		}
	}
}

// split runs body in GOMAXPROCS goroutines and waits for them: goroutine g
// makes n of the b.N calls, the shares fixed before any starts. The keyed
// benchmarks run at a fixed -benchtime Nx, where b.RunParallel would hand
// out the calls one at a time: it sizes its grain from the previous run,
// which for Nx is the one-call probe (setup included), so the grain is 1
// and every pb.Next is a locked add on one counter that every goroutine
// writes. On two cores that shared write cost as much as keyed's whole
// call (28% of the CPU profile at -cpu 2, where the Limiters shared
// nothing) and capped every implementation's scaling. Here nothing is
// shared per call but what the implementation shares. A goroutine that is
// descheduled is waited for, so ns/op is the whole run's wall time over
// b.N, as RunParallel's is.
func split(b *testing.B, body func(g, n int)) {
	procs := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	for g := range procs {
		n := b.N / procs
		if g < b.N%procs {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			body(g, n)
		}()
	}
	wg.Wait()
}
