package redisbucket_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/admit-go/admit/redisbucket"
	"github.com/redis/go-redis/v9"
)

// With WithBatch, a caller that stops waiting before its round trip's reply
// (its deadline passes, or it is cancelled) leaves the batch the server took
// to later callers. Capacity 100, no refill to speak of, WithBatch(100): the
// first caller leaves with ctx.Err(), then 99 callers are all admitted, from
// the lease, with no further round trip (a review saw 0 of 99: the batch was
// dropped with the caller, though the server had taken it). Replies come
// through a proxy that delays each by 100 ms, so the first caller's 20 ms
// surely pass first. The later callers come while the round trip is in
// flight (they wait for it) or after it landed.
func TestBatchServesAfterCallerLeft(t *testing.T) {
	const rtt = 100 * time.Millisecond
	c := redis.NewClient(&redis.Options{Addr: slowProxy(t, srv.Addr, rtt), ContextTimeoutEnabled: true, PoolSize: 4})
	defer c.Close()
	direct := client(t, srv)
	ctx := context.Background()
	warmPool(c, 4)
	for _, leave := range []string{"deadline", "cancel"} {
		for _, later := range []string{"during", "after"} {
			t.Run(leave+"/"+later, func(t *testing.T) {
				prefix := "t:batchleft:" + leave + ":" + later
				l, err := redisbucket.New(c, 100, 1e-6, redisbucket.WithPrefix(prefix), redisbucket.WithTimeout(testTimeout), redisbucket.WithBatch(100, time.Hour))
				if err != nil {
					t.Fatal(err)
				}
				// One decision first, so that the script is loaded (a first
				// EVALSHA answered NOSCRIPT is a second call) and the
				// connections are open.
				if d, err := l.AllowN(ctx, "warm", 1); err != nil || !d.Allowed {
					t.Fatalf("a first decision: %+v, %v", d, err)
				}
				var lctx context.Context
				var cancel context.CancelFunc
				if leave == "deadline" {
					lctx, cancel = context.WithTimeout(ctx, 20*time.Millisecond)
				} else {
					lctx, cancel = context.WithCancel(ctx)
					time.AfterFunc(20*time.Millisecond, cancel)
				}
				defer cancel()
				calls := evalCalls(t, direct)
				if d, err := l.AllowN(lctx, "k", 1); err == nil || err != lctx.Err() || d.Allowed {
					t.Fatalf("the caller that leaves: %+v, %v; want its context's error", d, err)
				}
				if later == "after" && !eventually(10, func() bool {
					left, inFlight, ok := redisbucket.Lease(l, "k")
					return ok && !inFlight && left > 0
				}) {
					t.Fatal("the batch taken for the caller who left never reached the lease")
				}
				var admitted atomic.Int64
				var wg sync.WaitGroup
				for range 99 {
					call := func() {
						defer wg.Done()
						if d, err := l.AllowN(ctx, "k", 1); err != nil {
							t.Errorf("AllowN: %v", err)
						} else if d.Allowed {
							admitted.Add(1)
						}
					}
					wg.Add(1)
					if later == "during" {
						go call()
					} else {
						call()
					}
				}
				wg.Wait()
				if got := admitted.Load(); got != 99 {
					t.Errorf("%d of the 99 later callers admitted, want 99", got)
				}
				if n := evalCalls(t, direct) - calls; n != 1 {
					t.Errorf("%d round trips, want 1 (the batch of the caller who left)", n)
				}
				if left, _, _ := redisbucket.Lease(l, "k"); left != 1 {
					t.Errorf("the lease holds %d tokens, want 1", left)
				}
			})
		}
	}
}
