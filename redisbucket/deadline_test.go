package redisbucket_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/redisbucket"
	"github.com/redis/go-redis/v9"
)

// A caller's own deadline is the caller's: with a healthy Redis, callers
// whose deadlines end within microseconds of sending (so that go-redis's
// socket deadline may fire before the context's timer) get ctx.Err() or
// Redis's decision, never the failure policy's. The key is drained, so a
// fail-open limiter that mistook them for a Redis failure would admit.
func TestCallerDeadlineIsNotAFailure(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	l, err := redisbucket.New(c, 1, 0.001, redisbucket.WithPrefix("t:callerdl:"), redisbucket.WithTimeout(testTimeout), redisbucket.WithFailOpen())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("drain = %+v, %v", d, err)
	}
	var admitted, policy, expired, decided int
	for i := range 200 {
		cctx, cancel := context.WithTimeout(ctx, time.Duration(1+i%40)*5*time.Microsecond)
		d, err := l.AllowN(cctx, "k", 1)
		cancel()
		switch {
		case d.Allowed:
			admitted++
			t.Errorf("call %d admitted on a drained key: %+v, %v", i, d, err)
		case errors.Is(err, admit.ErrUnavailable):
			policy++
			t.Errorf("call %d: the caller's deadline read as a Redis failure: %v", i, err)
		case err == context.DeadlineExceeded:
			expired++
		case err == nil:
			decided++
		default:
			t.Errorf("call %d: %+v, %v", i, d, err)
		}
	}
	t.Logf("%d decided by Redis, %d caller deadlines, %d admitted, %d by the policy", decided, expired, admitted, policy)
	if d, err := l.AllowN(ctx, "k", 1); err != nil || d.Allowed {
		t.Errorf("afterwards, without a deadline: %+v, %v; want a denial from Redis", d, err)
	}
}

// countingHook counts the limiter's script commands a go-redis client is
// asked to run, and the connections it dials.
type countingHook struct{ scripts, dials atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.dials.Add(1)
		return next(ctx, network, addr)
	}
}

func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			h.scripts.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Callers whose deadlines are far shorter than the timeout still open the
// breaker when Redis is killed or frozen: past the first timeout, at most one
// probe per timeout reaches the client, and the connections dialled stay
// within the pool and those probes (each of which may need a new one).
func TestShortDeadlinesOpenTheBreaker(t *testing.T) {
	for _, outage := range []string{"kill", "freeze"} {
		t.Run(outage, func(t *testing.T) {
			s := outageServer(t)
			const poolSize = 4
			c := outageClient(t, s, poolSize)
			h := &countingHook{}
			c.AddHook(h)
			const timeout = 200 * time.Millisecond
			l, err := redisbucket.New(c, 1000, 1000, redisbucket.WithTimeout(timeout))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if !eventually(20, func() bool { d, err := l.AllowN(ctx, "k", 1); return err == nil && d.Allowed }) {
				t.Fatal("no decision succeeded before the outage")
			}
			beginOutage(t, s, outage)
			const workers = 16
			const settle = 3 * timeout // the first timeout, and slack for a loaded machine
			const span = 2 * time.Second
			start := time.Now()
			var wg sync.WaitGroup
			var scripts0, dials0 atomic.Int64
			var calls atomic.Int64
			var wrong atomic.Pointer[string]
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Since(start) < settle+span {
						cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
						d, err := l.AllowN(cctx, "k", 1)
						cancel()
						calls.Add(1)
						if d.Allowed || err == nil || !errors.Is(err, admit.ErrUnavailable) && err != context.DeadlineExceeded {
							msg := errString(err)
							wrong.CompareAndSwap(nil, &msg)
						}
					}
				}()
			}
			time.Sleep(settle)
			scripts0.Store(h.scripts.Load())
			dials0.Store(h.dials.Load())
			wg.Wait()
			elapsed := time.Since(start) - settle
			scripts, dials := h.scripts.Load()-scripts0.Load(), h.dials.Load()
			t.Logf("%d calls; after the first %v: %d requests in %v; %d dials in all", calls.Load(), settle, scripts, elapsed, dials)
			if p := wrong.Load(); p != nil {
				t.Errorf("a decision neither the caller's deadline nor the fail-closed policy: %s", *p)
			}
			if most := int64(elapsed/timeout) + 2; scripts > most {
				t.Errorf("%d requests in %v past the first timeout, want at most one per %v probe (%d)", scripts, elapsed, timeout, most)
			}
			// go-redis dials again for each of its retries (3 by default).
			if most := 4*(int64(poolSize)+int64((settle+span)/timeout)) + 4; dials > most {
				t.Errorf("%d connections dialled, want at most the pool (%d) and the probes' (%d in all, each retried)", dials, poolSize, most)
			}
		})
	}
}

// WithBatch bounds a decision by WithTimeout too: on a hot key whose
// requests each need their own round trip (n = the batch), callers do not
// queue behind one round trip after another on a slow, healthy Redis. Each
// returns within the timeout (plus slack for a loaded machine), decided by
// Redis or, if the timeout ran out, by the policy.
func TestBatchWaitsBoundedByTimeout(t *testing.T) {
	const rtt = 100 * time.Millisecond
	addr := slowProxy(t, srv.Addr, rtt)
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 32})
	defer c.Close()
	const timeout = 300 * time.Millisecond
	l, err := redisbucket.New(c, 1e9, 1, redisbucket.WithPrefix("t:batchwait:"), redisbucket.WithTimeout(timeout), redisbucket.WithBatch(2, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	warmPool(c, 32)
	if !eventually(20, func() bool { d, err := l.AllowN(ctx, "warm", 2); return err == nil && d.Allowed }) {
		t.Fatal("no decision through the proxy")
	}
	const callers = 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	var slowest time.Duration
	var decided, policy int
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				start := time.Now()
				d, err := l.AllowN(ctx, "hot", 2)
				took := time.Since(start)
				mu.Lock()
				slowest = max(slowest, took)
				switch {
				case err == nil && d.Allowed:
					decided++
				case errors.Is(err, admit.ErrUnavailable) && !d.Allowed:
					policy++
				default:
					t.Errorf("decision %+v, %v", d, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d decided by Redis, %d by the policy; slowest %v (timeout %v, round trip %v)", decided, policy, slowest, timeout, rtt)
	if slowest > timeout+500*time.Millisecond {
		t.Errorf("a batched decision took %v with a %v timeout", slowest, timeout)
	}
	if decided == 0 {
		t.Errorf("no decision made by Redis")
	}
}

// During an outage the error keeps Redis's cause and never reads as the
// caller's context ending: with Redis killed, a refused connection is
// reported (errors.Is ECONNREFUSED) rather than a bare "context deadline
// exceeded"; killed or frozen, no error matches context.DeadlineExceeded
// or context.Canceled while the caller's context is live.
func TestOutageErrorsKeepTheirCause(t *testing.T) {
	for _, outage := range []string{"kill", "freeze"} {
		t.Run(outage, func(t *testing.T) {
			s := outageServer(t)
			c := outageClient(t, s, 10)
			const timeout = 100 * time.Millisecond
			l, err := redisbucket.New(c, 10, 1, redisbucket.WithTimeout(timeout))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if !eventually(20, func() bool { _, err := l.AllowN(ctx, "k", 1); return err == nil }) {
				t.Fatal("no decision before the outage")
			}
			beginOutage(t, s, outage)
			refused := 0
			for end := time.Now().Add(10 * timeout); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
				_, err := l.AllowN(ctx, "k", 1)
				if !errors.Is(err, admit.ErrUnavailable) {
					t.Fatalf("during the outage: %v", err)
				}
				if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
					t.Fatalf("an outage's error matches the caller's context, which is live: %v", err)
				}
				if errors.Is(err, syscall.ECONNREFUSED) {
					refused++
				}
			}
			if outage == "kill" && refused == 0 {
				t.Errorf("no error during the outage names the refused connection")
			}
		})
	}
}
