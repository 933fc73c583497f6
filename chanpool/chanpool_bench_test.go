package chanpool_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/admit-go/admit/chanpool"
)

// The cross-library comparison lives in the bench module; these micro
// benchmarks track the pool's own paths.

func newBenchPool(b *testing.B, capacity int, opts ...chanpool.Option[*conn]) *chanpool.Pool[*conn] {
	b.Helper()
	p, err := chanpool.New(capacity, func(context.Context) (*conn, error) { return &conn{}, nil }, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := p.Close(context.Background()); err != nil {
			b.Error(err)
		}
	})
	return p
}

// acquireRelease measures serial Acquire+Release pairs on p.
func acquireRelease(b *testing.B, p *chanpool.Pool[*conn]) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l, err := p.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		l.Release()
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	b.Run("case=uncontended", func(b *testing.B) {
		p := newBenchPool(b, 4)
		acquireRelease(b, p)
	})
	b.Run("case=checks", func(b *testing.B) { // every option that reads the clock
		p := newBenchPool(b, 4,
			chanpool.WithMaxIdleTime[*conn](time.Hour),
			chanpool.WithMaxLifetime[*conn](time.Hour),
			chanpool.WithValidate(func(context.Context, *conn) error { return nil }),
			chanpool.WithValidateAfter[*conn](time.Second))
		acquireRelease(b, p)
	})
	for _, capacity := range []int{1, 4, 64} {
		b.Run("case=g8cap"+strconv.Itoa(capacity), func(b *testing.B) {
			p := newBenchPool(b, capacity)
			b.ReportAllocs()
			b.SetParallelism((8 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l, err := p.Acquire(ctx)
					if err != nil {
						b.Error(err)
						return
					}
					l.Release()
				}
			})
		})
	}
}

func BenchmarkTryAcquire(b *testing.B) {
	b.Run("case=hit", func(b *testing.B) {
		p := newBenchPool(b, 1)
		b.ReportAllocs()
		for b.Loop() {
			l, ok := p.TryAcquire()
			if !ok {
				b.Fatal("TryAcquire failed")
			}
			l.Release()
		}
	})
	b.Run("case=miss", func(b *testing.B) {
		p := newBenchPool(b, 1)
		l, _ := p.TryAcquire()
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := p.TryAcquire(); ok {
				b.Fatal("TryAcquire succeeded on an exhausted pool")
			}
		}
		l.Release()
	})
}

func BenchmarkStats(b *testing.B) {
	p := newBenchPool(b, 64)
	b.ReportAllocs()
	for b.Loop() {
		_ = p.Stats()
	}
}
