package redisbucket

import (
	"context"
	"testing"
	"time"
)

// ctxSink makes each request's context escape, as it does into go-redis.
var ctxSink context.Context

// BenchmarkRequestContext: what giving one request its deadline costs,
// context.WithTimeout against the shared slots of deadlines, each with
// what go-redis does with it on the healthy path (reads Deadline, checks
// Done once without waiting).
//
//	BenchmarkRequestContext/kind=shared
func BenchmarkRequestContext(b *testing.B) {
	ctx := context.Background()
	const timeout = 100 * time.Millisecond
	b.Run("kind=withtimeout", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c, cancel := context.WithTimeout(ctx, timeout)
				_, _ = c.Deadline()
				select {
				case <-c.Done():
				default:
				}
				ctxSink = c
				cancel()
			}
		})
	})
	b.Run("kind=shared", func(b *testing.B) {
		ds := deadlines{timeout: timeout}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				now := int64(time.Since(mono))
				c := &callCtx{Context: ctx, deadline: mono.Add(time.Duration(now) + timeout), s: ds.get(now)}
				_, _ = c.Deadline()
				select {
				case <-c.Done():
				default:
				}
				ctxSink = c
			}
		})
	})
}
