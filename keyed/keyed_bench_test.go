package keyed_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/keyed"
)

// BenchmarkAllow measures Allow on keys already held, at a rate that never
// rejects, serial and parallel (set GOMAXPROCS with -cpu). The cross-library
// comparison lives in the bench module (BenchmarkKeyed).
func BenchmarkAllow(b *testing.B) {
	for _, n := range []int{1, 10_000} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = "client-" + strconv.Itoa(i)
		}
		for _, mode := range []string{"serial", "parallel"} {
			b.Run(fmt.Sprintf("keys=%d/mode=%s", n, mode), func(b *testing.B) {
				l, err := keyed.New(1e9, 1, keyed.WithMaxKeys(2*n))
				if err != nil {
					b.Fatal(err)
				}
				for _, k := range keys {
					l.Allow(k)
				}
				b.ReportAllocs()
				visit(b, mode == "parallel", keys, func(k string) { l.Allow(k) })
			})
		}
	}
}

// BenchmarkAllowLongKey measures Allow on 1000 held keys longer than 64
// bytes, which the limiter holds as keyed digests (the digest's cost: the
// short keys of BenchmarkAllow never compute one). Names:
// BenchmarkAllowLongKey/keylen=100.
func BenchmarkAllowLongKey(b *testing.B) {
	for _, klen := range []int{65, 100, 1000} {
		b.Run(fmt.Sprintf("keylen=%d", klen), func(b *testing.B) {
			keys := make([]string, 1000)
			for i := range keys {
				keys[i] = fmt.Sprintf("%0*d", klen, i)
			}
			l, err := keyed.New(1e9, 1, keyed.WithMaxKeys(2*len(keys)))
			if err != nil {
				b.Fatal(err)
			}
			for _, k := range keys {
				l.Allow(k)
			}
			b.ReportAllocs()
			visit(b, false, keys, func(k string) { l.Allow(k) })
		})
	}
}

// BenchmarkBytesPerKey reports the heap bytes each held key costs after a
// GC, at 1M keys, the limiter's copies of the keys (16 bytes each here) and
// its tables' slack included. One iteration is a whole fill; run it with
// -benchtime 1x.
func BenchmarkBytesPerKey(b *testing.B) {
	const n = 1 << 20
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%012d", i) // 16 bytes, copied into the entry's own allocation
	}
	var perKey float64
	for b.Loop() {
		before := heapNow()
		l, err := keyed.New(1, 1e-6, keyed.WithMaxKeys(2*n))
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range keys {
			l.Allow(k)
		}
		after := heapNow()
		if l.Len() != n {
			b.Fatalf("%d keys held, want %d", l.Len(), n)
		}
		perKey = float64(after-before) / n
		runtime.KeepAlive(l)
	}
	b.ReportMetric(perKey, "B/key")
}

// BenchmarkAllowLimits compares one call on a held key under one limit
// (AllowN on New: the lock-free path) with the same under three limits
// chosen per call (AllowLimits: the key's lock), at 10k keys, serial and
// parallel. Names: BenchmarkAllowLimits/keys=10000/mode=serial/limits=3.
func BenchmarkAllowLimits(b *testing.B) {
	const n = 10_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	// As in BenchmarkAllow, buckets that never refill to full between two
	// visits, so that every call is on a held key.
	three := []admit.Limit{
		{Name: "burst", Capacity: 1e9, Rate: 1},
		{Name: "hourly", Capacity: 1e9, Rate: 0.5},
		{Name: "daily", Capacity: 1e9, Rate: 0.1},
	}
	for _, mode := range []string{"serial", "parallel"} {
		for _, k := range []int{1, 3} {
			b.Run(fmt.Sprintf("keys=%d/mode=%s/limits=%d", n, mode, k), func(b *testing.B) {
				l, err := keyed.New(1e9, 1, keyed.WithMaxKeys(2*n))
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				call := func(key string) {
					if k == 1 {
						_, _ = l.AllowN(ctx, key, 1)
					} else {
						_, _ = l.AllowLimits(ctx, key, 1, three...)
					}
				}
				for _, key := range keys {
					call(key)
				}
				b.ReportAllocs()
				visit(b, mode == "parallel", keys, call)
			})
		}
	}
}

// visit calls call on keys in turn, b.N times in all, from one goroutine or
// (parallel) from RunParallel's, each from its own offset.
func visit(b *testing.B, parallel bool, keys []string, call func(key string)) {
	if !parallel {
		i := 0
		for b.Loop() {
			call(keys[i])
			if i++; i == len(keys) {
				i = 0
			}
		}
		return
	}
	var seq atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(7919)) % len(keys)
		for pb.Next() {
			call(keys[i])
			if i++; i == len(keys) {
				i = 0
			}
		}
	})
}
