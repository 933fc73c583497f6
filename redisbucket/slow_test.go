package redisbucket_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/admit-go/admit/redisbucket/redistest"
	"github.com/redis/go-redis/v9"
)

// slowProxy forwards loopback connections to a real redis-server and holds
// each chunk of its replies for delay: a healthy Redis that answers slowly.
// It stops when t ends.
func slowProxy(t *testing.T, upstream string, delay time.Duration) string {
	t.Helper()
	addr, _ := redistest.Proxy(t, upstream, func() bool { time.Sleep(delay); return true })
	return addr
}

// warmPool opens n of c's pooled connections at once, before a test's
// timed part: through slowProxy each new connection's handshake takes
// several delayed round trips.
func warmPool(c *redis.Client, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_ = c.Ping(ctx).Err()
		}()
	}
	wg.Wait()
}
