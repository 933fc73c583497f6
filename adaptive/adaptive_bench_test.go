package adaptive_test

import (
	"context"
	"testing"

	"github.com/admit-go/admit/adaptive"
)

// BenchmarkAcquire is the hot path, an Acquire and a Success that admit at
// once, against a buffered channel used as a semaphore in the same run:
// impl=chan is the floor a fixed limit costs.
func BenchmarkAcquire(b *testing.B) {
	ctx := context.Background()
	b.Run("impl=chan/case=serial", func(b *testing.B) {
		sem := make(chan struct{}, 1000)
		b.ReportAllocs()
		for b.Loop() {
			sem <- struct{}{}
			<-sem
		}
	})
	b.Run("impl=adaptive/case=serial", func(b *testing.B) {
		l, err := adaptive.New(adaptive.WithLimitBounds(1000, 1000))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			p, err := l.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			p.Success()
		}
	})
	b.Run("impl=chan/case=parallel", func(b *testing.B) {
		sem := make(chan struct{}, 1000)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				sem <- struct{}{}
				<-sem
			}
		})
	})
	b.Run("impl=adaptive/case=parallel", func(b *testing.B) {
		l, err := adaptive.New(adaptive.WithLimitBounds(1000, 1000))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p, err := l.Acquire(ctx)
				if err != nil {
					panic(err) // never: the limit is 1000
				}
				p.Success()
			}
		})
	})
}
