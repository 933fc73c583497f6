package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	xrate "golang.org/x/time/rate"

	admitrate "github.com/admit-go/admit/rate"
)

// BenchmarkRate compares github.com/admit-go/admit/rate with
// golang.org/x/time/rate call for call, each called directly (no adapter
// interface), in the implementation order rate, xrate:
//
//	BenchmarkRate/op=allow/case=admit/mode=serial/impl=rate
//
// op is the call: allow is Allow(); allown is AllowN(time.Now(), 1), the way
// callers that pass a time use it; wait is Wait(ctx) on a limiter that never
// runs dry (it rarely waits: never, here); reserve is Reserve(), whose
// *Reservation allocates in both. case=admit runs on burst 1e9 refilled at
// 1e9/s, which no caller here can empty; case=reject on a drained limiter
// refilling at 1e-6/s. mode=serial is one goroutine; mode=parallel is
// RunParallel, so run it with -cpu 2 (GOMAXPROCS only through -cpu).
func BenchmarkRate(b *testing.B) {
	type op struct {
		name  string
		cases []string
		mine  func(*admitrate.Limiter) bool
		x     func(*xrate.Limiter) bool
	}
	ctx := context.Background()
	ops := []op{
		{"allow", []string{"admit", "reject"},
			func(l *admitrate.Limiter) bool { return l.Allow() },
			func(l *xrate.Limiter) bool { return l.Allow() }},
		{"allown", []string{"admit", "reject"},
			func(l *admitrate.Limiter) bool { return l.AllowN(time.Now(), 1) },
			func(l *xrate.Limiter) bool { return l.AllowN(time.Now(), 1) }},
		{"wait", []string{"admit"},
			func(l *admitrate.Limiter) bool { return l.Wait(ctx) == nil },
			func(l *xrate.Limiter) bool { return l.Wait(ctx) == nil }},
		{"reserve", []string{"admit"},
			func(l *admitrate.Limiter) bool { return l.Reserve().OK() },
			func(l *xrate.Limiter) bool { return l.Reserve().OK() }},
	}
	for _, o := range ops {
		for _, c := range o.cases {
			for _, mode := range benchModes {
				for _, impl := range []string{"rate", "xrate"} {
					b.Run(fmt.Sprintf("op=%s/case=%s/mode=%s/impl=%s", o.name, c, mode, impl), func(b *testing.B) {
						var call func() bool
						if impl == "rate" {
							l := admitrate.NewLimiter(1e9, 1e9)
							if c == "reject" {
								l = admitrate.NewLimiter(1e-6, 1)
								l.Allow()
							}
							call = func() bool { return o.mine(l) }
						} else {
							l := xrate.NewLimiter(1e9, 1e9)
							if c == "reject" {
								l = xrate.NewLimiter(1e-6, 1)
								l.Allow()
							}
							call = func() bool { return o.x(l) }
						}
						runRate(b, call, c == "admit", mode == "parallel")
					})
				}
			}
		}
	}
}

// runRate times call and checks, outside the timer, that every call had
// the expected outcome; failures in the parallel body are counted, not
// fatal.
func runRate(b *testing.B, call func() bool, want, parallel bool) {
	b.ReportAllocs()
	var wrong int64
	if !parallel {
		for b.Loop() {
			if call() != want {
				wrong++
			}
		}
	} else {
		var bad [256]paddedCount
		var next int64
		var mu = make(chan struct{}, 1)
		mu <- struct{}{}
		b.RunParallel(func(pb *testing.PB) {
			<-mu
			i := next % int64(len(bad))
			next++
			mu <- struct{}{}
			for pb.Next() {
				if call() != want {
					bad[i].n++
				}
			}
		})
		for i := range bad {
			wrong += bad[i].n
		}
	}
	if wrong != 0 {
		b.Fatalf("%d calls did not return %v", wrong, want)
	}
}

// paddedCount is one goroutine's failure count on its own cache lines.
type paddedCount struct {
	_ [64]byte
	n int64
	_ [56]byte
}
