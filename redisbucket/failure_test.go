package redisbucket_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/mutexbucket"
	"github.com/admit-go/admit/redisbucket"
	"github.com/admit-go/admit/redisbucket/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// localKeyed is a small in-process keyed limiter over mutexbuckets, the
// fallback in these tests.
type localKeyed struct {
	mu sync.Mutex
	m  map[string]*mutexbucket.Bucket
	c  int64
}

func (k *localKeyed) AllowN(_ context.Context, key string, n int64) (admit.Decision, error) {
	k.mu.Lock()
	b, ok := k.m[key]
	if !ok {
		b, _ = mutexbucket.New(k.c, 0)
		k.m[key] = b
	}
	k.mu.Unlock()
	ok = b.TryAcquireN(n)
	return admit.Decision{Allowed: ok, Limit: k.c, Remaining: int64(b.Tokens())}, nil
}

// The outage cases: Redis killed, then started again on the same port; or
// frozen with SIGSTOP, then continued. For each policy, every decision in
// the outage returns within the timeout (checked against a bound far below
// the client's 30s read timeout, the wait without the limiter's bound),
// wraps ErrUnavailable, and is the policy's; goroutines and connections
// stay bounded; decisions resume by themselves after.
func TestOutage(t *testing.T) {
	for _, outage := range []string{"kill", "freeze"} {
		for _, policy := range []string{"closed", "open", "fallback"} {
			t.Run("outage="+outage+"/policy="+policy, func(t *testing.T) { testOutage(t, outage, policy, false) })
		}
		// The rueidis transport (NewRueidis), under the same bounds.
		t.Run("outage="+outage+"/policy=closed/client=rueidis", func(t *testing.T) { testOutage(t, outage, "closed", true) })
	}
}

// outageServer starts a redis-server of the test's own, killed when t ends.
func outageServer(t *testing.T) *server {
	t.Helper()
	s, err := startServer(tmpDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// outageClient is a go-redis client for s whose own timeouts (30 s) are far
// beyond the limiter's, so that only the limiter bounds a decision.
func outageClient(t *testing.T, s *server, poolSize int) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, PoolSize: poolSize,
		ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, DialTimeout: 30 * time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// beginOutage kills s, or freezes it with SIGSTOP (continued when t ends,
// though Stop continues it too).
func beginOutage(t *testing.T, s *server, outage string) {
	t.Helper()
	switch outage {
	case "kill":
		s.Stop()
	case "freeze":
		if err := s.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Signal(syscall.SIGCONT) })
	}
}

func testOutage(t *testing.T, outage, policy string, useRueidis bool) {
	s := outageServer(t)
	const poolSize = 8
	c := outageClient(t, s, poolSize)
	const timeout = 100 * time.Millisecond
	const fallbackCap = 5
	fb := &localKeyed{m: map[string]*mutexbucket.Bucket{}, c: fallbackCap}
	opts := []redisbucket.Option{redisbucket.WithTimeout(timeout)}
	switch policy {
	case "open":
		opts = append(opts, redisbucket.WithFailOpen())
	case "fallback":
		opts = append(opts, redisbucket.WithFallback(fb))
	}
	conns := func() int64 { return int64(c.PoolStats().TotalConns) }
	extraG := 0 // more goroutines the transport may hold
	var l *redisbucket.Limiter
	var err error
	if useRueidis {
		// ConnWriteTimeout near the limiter's timeout: rueidis leaves one
		// goroutine per abandoned command until it closes the connection
		// (docs/redis.md).
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true, ConnWriteTimeout: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		// rueidis multiplexes commands over a fixed set of connections it
		// redials itself; the goroutine bound covers it.
		conns = func() int64 { return 0 }
		extraG = int(600*time.Millisecond/timeout) + 16
		l, err = redisbucket.NewRueidis(rc, 1000, 1000, opts...)
		if err != nil {
			t.Fatal(err)
		}
	} else if l, err = redisbucket.New(c, 1000, 1000, opts...); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Healthy first. A loaded machine may stall a decision past the short
	// timeout, so this waits for one success rather than demanding it.
	if !eventually(20, func() bool { d, err := l.AllowN(ctx, "k", 1); return err == nil && d.Allowed }) {
		t.Fatal("no decision succeeded before the outage")
	}
	base := countGoroutines()

	beginOutage(t, s, outage)

	const workers = 32
	var (
		wg                     sync.WaitGroup
		slowest                atomic.Int64
		allowed, denied, wrong atomic.Int64
		outlived               atomic.Int64 // decisions ended by the caller's deadline
		maxG, maxConns         atomic.Int64
		firstWrong             atomic.Pointer[string]
	)
	end := time.Now().Add(600 * time.Millisecond)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				start := time.Now()
				// The caller's own deadline, far beyond the limiter's
				// timeout, only stops a decision that nothing else
				// ends (a frozen server holds a read for 30 s):
				// reaching it is the failure checked below.
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				d, err := l.AllowN(cctx, "k", 1)
				if cctx.Err() != nil {
					outlived.Add(1)
				}
				cancel()
				if took := int64(time.Since(start)); took > slowest.Load() {
					slowest.Store(took)
				}
				// Past the first wave (callers that were already in flight
				// when the server went, and their deadline timers firing),
				// only probes reach the client.
				if time.Until(end) < 400*time.Millisecond {
					if g := int64(countGoroutines()); g > maxG.Load() {
						maxG.Store(g)
					}
				}
				if n := conns(); n > maxConns.Load() {
					maxConns.Store(n)
				}
				if !errors.Is(err, admit.ErrUnavailable) {
					msg := "decision without ErrUnavailable: " + errString(err)
					firstWrong.CompareAndSwap(nil, &msg)
					wrong.Add(1)
					continue
				}
				if d.Allowed {
					allowed.Add(1)
				} else {
					denied.Add(1)
				}
				if policy == "closed" && d.Allowed || policy == "open" && !d.Allowed {
					wrong.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("outage: %d allowed, %d denied, slowest %v, max goroutines %d (base %d), max conns %d",
		allowed.Load(), denied.Load(), time.Duration(slowest.Load()), maxG.Load(), base, maxConns.Load())
	if w := wrong.Load(); w != 0 {
		msg := ""
		if p := firstWrong.Load(); p != nil {
			msg = *p
		}
		t.Errorf("%d decisions did not follow the %s policy %s", w, policy, msg)
	}
	if policy == "fallback" && allowed.Load() != fallbackCap {
		t.Errorf("fallback admitted %d, want its capacity %d", allowed.Load(), fallbackCap)
	}
	// Every decision was ended by the limiter (its timeout, or its probe
	// rule), never left to the caller's deadline.
	if n := outlived.Load(); n != 0 {
		t.Errorf("%d decisions outlived their caller's deadline, with a %v timeout (slowest %v)", n, timeout, time.Duration(slowest.Load()))
	}
	if maxG.Load() > int64(base+poolSize+4+extraG) {
		t.Errorf("goroutines piled up: %d in the clients and the limiter, base %d, %d workers", maxG.Load(), base, workers)
	}
	if maxConns.Load() > poolSize {
		t.Errorf("connections piled up: %d, pool size %d", maxConns.Load(), poolSize)
	}

	switch outage {
	case "kill":
		if err := s.Restart(); err != nil {
			t.Fatal(err)
		}
	case "freeze":
		if err := s.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	// Resumed: 20 decisions made by Redis (no error, and a Remaining near
	// the capacity of 1000, which neither policy reports).
	ok := 0
	resumed := eventually(20, func() bool {
		d, err := l.AllowN(ctx, "after", 1)
		switch {
		case err == nil && d.Allowed && d.Remaining >= 900:
			ok++
		case err == nil:
			t.Fatalf("after recovery: %+v", d)
		case !errors.Is(err, admit.ErrUnavailable):
			t.Fatalf("after recovery: %v", err)
		}
		return ok == 20
	})
	if !resumed {
		t.Fatalf("decisions did not resume after the outage ended (%d of 20)", ok)
	}
}

// eventually calls f until it reports true, every 10ms for up to seconds.
func eventually(seconds int, f func() bool) bool {
	for deadline := time.Now().Add(time.Duration(seconds) * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if f() {
			return true
		}
	}
	return false
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestOutageErrorKeyBounded: a key is client data (MaxKeyBytes's doc:
// a client may send a megabyte in a header); the error a failed decision
// returns must not carry the whole of it.
func TestOutageErrorKeyBounded(t *testing.T) {
	s := outageServer(t)
	c := outageClient(t, s, 2)
	l, err := redisbucket.New(c, 10, 1, redisbucket.WithTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	beginOutage(t, s, "kill")
	long := strings.Repeat("\x00", 1<<20)
	_, err = l.AllowN(context.Background(), long, 1)
	if !errors.Is(err, admit.ErrUnavailable) {
		t.Fatalf("outage: %v", err)
	}
	if len(err.Error()) > 4096 {
		t.Errorf("an outage's error for a %d-byte key is %d bytes", len(long), len(err.Error()))
	}
}

// wrapping is a counting wrapper as admitotel's is: it has AllowLimits
// whatever it wraps, and refuses the call when the wrapped limiter takes
// no per-call limits; Unwrap names what it wraps.
type wrapping struct{ inner admit.KeyedLimiter }

func (w wrapping) AllowN(ctx context.Context, key string, n int64) (admit.Decision, error) {
	return w.inner.AllowN(ctx, key, n)
}

func (w wrapping) AllowLimits(ctx context.Context, key string, n int64, limits ...admit.Limit) (admit.Decision, error) {
	p, ok := w.inner.(admit.PolicyLimiter)
	if !ok {
		return admit.Decision{}, fmt.Errorf("%w: not a PolicyLimiter", admit.ErrInvalidConfig)
	}
	return p.AllowLimits(ctx, key, n, limits...)
}

func (w wrapping) Unwrap() admit.KeyedLimiter { return w.inner }

// TestFallbackThroughWrapper: in an outage, AllowLimits hands its limits to
// a fallback only if the fallback, and every limiter it wraps, takes them;
// a wrapper of a plain keyed limiter (one counting decisions, say) decides
// with the plain one's AllowN, as the bare limiter would. (Checked with a
// type assertion on the wrapper alone, every such call failed with the
// wrapper's ErrInvalidConfig.)
func TestFallbackThroughWrapper(t *testing.T) {
	s := outageServer(t)
	c := outageClient(t, s, 2)
	fb := &localKeyed{m: map[string]*mutexbucket.Bucket{}, c: 5}
	l, err := redisbucket.New(c, 10, 1, redisbucket.WithTimeout(100*time.Millisecond), redisbucket.WithFallback(wrapping{fb}))
	if err != nil {
		t.Fatal(err)
	}
	beginOutage(t, s, "kill")
	d, err := l.AllowLimits(context.Background(), "k", 1, admit.Limit{Name: "a", Capacity: 3, Rate: 1})
	if !errors.Is(err, admit.ErrUnavailable) || errors.Is(err, admit.ErrInvalidConfig) {
		t.Fatalf("outage: %v", err)
	}
	if !d.Allowed || d.Limit != 5 {
		t.Errorf("outage with a wrapped plain fallback: %+v, want the fallback's own admission (limit 5)", d)
	}
}

// A connection that ends after Redis ran the script, before its reply came
// back, is an outage for the failure policy: the decision is not sent
// again, which would take its tokens a second time. go-redis retries a
// command on such an error (MaxRetries, 3 by default), so the limiter must
// tell it not to: here a default client took 2 tokens for 1 and admitted.
func TestLostReplyTakesOnce(t *testing.T) {
	for _, call := range []string{"AllowN", "AllowLimits"} {
		t.Run(call, func(t *testing.T) {
			addr, arm, _ := redistest.ReplyDropper(t, srv.Addr)
			c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 1})
			t.Cleanup(func() { c.Close() })
			lim, err := redisbucket.New(c, 3, 0, redisbucket.WithEvictionAccepted(), redisbucket.WithTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			limits := []admit.Limit{{Name: "burst", Capacity: 3}, {Name: "day", Capacity: 5}}
			allow := func(l *redisbucket.Limiter, key string, n int64) (admit.Decision, error) {
				if call == "AllowLimits" {
					return l.AllowLimits(ctx, key, n, limits...)
				}
				return l.AllowN(ctx, key, n)
			}
			key := "lost-reply-" + call
			// The pooled connection open and the script loaded, so that
			// the next reply through the proxy is the decision's.
			if _, err := allow(lim, "warm-"+key, 0); err != nil {
				t.Fatal(err)
			}
			arm()
			d, err := allow(lim, key, 1)
			if !errors.Is(err, admit.ErrUnavailable) || d.Allowed {
				t.Errorf("reply lost: %+v, %v; want denied (fail closed) with ErrUnavailable", d, err)
			}
			direct := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { direct.Close() })
			check, err := redisbucket.New(direct, 3, 0, redisbucket.WithEvictionAccepted())
			if err != nil {
				t.Fatal(err)
			}
			p, err := allow(check, key, 0)
			if err != nil {
				t.Fatal(err)
			}
			if p.Remaining != 2 {
				t.Errorf("after one request of 1 token (reply lost): %d of 3 left, want 2: the script ran %d times", p.Remaining, 3-p.Remaining)
			}
		})
	}
}

// A pooled connection closed while idle (Redis's timeout, a load
// balancer) is no outage: go-redis finds it closed when it takes it from
// the pool and dials another, which the script's NoRetry (see
// TestLostReplyTakesOnce) leaves alone.
func TestIdleConnectionClosedIsNoOutage(t *testing.T) {
	addr, _, cut := redistest.ReplyDropper(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 2})
	t.Cleanup(func() { c.Close() })
	lim, err := redisbucket.New(c, 3, 0, redisbucket.WithEvictionAccepted(), redisbucket.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := uniquePrefix("idle-closed-")
	limits := []admit.Limit{{Name: "burst", Capacity: 3}, {Name: "day", Capacity: 5}}
	for i := range 3 {
		if d, err := lim.AllowLimits(ctx, key, 1, limits...); err != nil || !d.Allowed || d.Remaining != int64(2-i) {
			t.Fatalf("call %d: %+v, %v", i, d, err)
		}
		cut()
		time.Sleep(50 * time.Millisecond) // the FIN reaches the client's socket
	}
}
