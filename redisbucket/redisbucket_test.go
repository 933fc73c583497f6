package redisbucket_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/redisbucket"
	"github.com/redis/go-redis/v9"
)

// srv is the server most tests share, started by TestMain. Tests that kill
// or freeze a server start their own.
var (
	srv    *server
	tmpDir string
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	redis.SetLogger(quiet{}) // outage tests make the pool log every failed dial
	var err error
	tmpDir, err = os.MkdirTemp("", "redisbucket-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmpDir)
	if addr := os.Getenv("REDISBUCKET_ADDR"); addr != "" {
		// A server someone else started and measures (the redisbench
		// command runs the benchmarks this way, beside redis-benchmark).
		srv = &server{Addr: addr}
	} else if srv, err = startServer(tmpDir); err != nil {
		fmt.Fprintln(os.Stderr, "redisbucket tests need a real redis-server:", err)
		return 1
	}
	defer srv.Stop()
	defer stopSharedCluster()
	return m.Run()
}

// testTimeout bounds decisions in the tests that are not about outages:
// generous, so that a loaded machine's stalls never read as Redis failing.
const testTimeout = 10 * time.Second

// prefixRun numbers the prefixes uniquePrefix hands out.
var prefixRun atomic.Int64

// uniquePrefix returns base with a number no other call in this process
// got, so that a test run again (-count) starts from keys of its own.
func uniquePrefix(base string) string { return fmt.Sprintf("%s%d:", base, prefixRun.Add(1)) }

// newLimiter returns a limiter on the shared server with a prefix unique
// to the test and the run, so tests never see each other's keys, nor a
// test its own from an earlier run.
func newLimiter(t testing.TB, capacity int64, rate float64, opts ...redisbucket.Option) (*redisbucket.Limiter, *redis.Client, string) {
	t.Helper()
	c := client(t, srv)
	prefix := uniquePrefix("t:" + strings.NewReplacer("/", ":", " ", "_").Replace(t.Name()) + ":")
	l, err := redisbucket.New(c, capacity, rate, append([]redisbucket.Option{redisbucket.WithPrefix(prefix), redisbucket.WithTimeout(testTimeout)}, opts...)...)
	if err != nil {
		t.Fatalf("New(%d, %v): %v", capacity, rate, err)
	}
	return l, c, prefix
}

func TestNewRejects(t *testing.T) {
	good := client(t, srv)
	lax := redis.NewClient(&redis.Options{Addr: srv.Addr}) // ignores ctx deadlines
	defer lax.Close()
	// A Ring that honours deadlines: still refused (its rehash on a shard's
	// failure reads drained buckets as full).
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr}, ContextTimeoutEnabled: true})
	defer ring.Close()
	ap, err := good.AutoPipeline() // ignores them too, options notwithstanding
	if err != nil {
		t.Fatal(err)
	}
	defer ap.Close()
	for _, tc := range []struct {
		name     string
		client   redis.UniversalClient
		capacity int64
		rate     float64
		opts     []redisbucket.Option
	}{
		{"nil client", nil, 1, 1, nil},
		{"client ignores deadlines", lax, 1, 1, nil},
		{"go-redis AutoPipeliner", ap, 1, 1, nil},
		{"go-redis Ring", ring, 1, 1, nil},
		{"capacity 0", good, 0, 1, nil},
		{"rate NaN", good, 1, math.NaN(), nil},
		{"rate negative", good, 1, -1, nil},
		{"rate above 1e9", good, 1, 2e9, nil},
		{"inexact rate on a huge capacity", good, 1 << 52, 0.7, nil},
		{"hash tag prefix", good, 1, 1, []redisbucket.Option{redisbucket.WithPrefix("{x}")}},
		{"zero timeout", good, 1, 1, []redisbucket.Option{redisbucket.WithTimeout(0)}},
		{"nil option", good, 1, 1, []redisbucket.Option{nil}},
		{"nil fallback", good, 1, 1, []redisbucket.Option{redisbucket.WithFallback(nil)}},
		{"batch of 1", good, 1, 1, []redisbucket.Option{redisbucket.WithBatch(1, time.Millisecond)}},
		{"batch age 0", good, 1, 1, []redisbucket.Option{redisbucket.WithBatch(10, 0)}},
	} {
		l, err := redisbucket.New(tc.client, tc.capacity, tc.rate, tc.opts...)
		if !errors.Is(err, admit.ErrInvalidConfig) || l != nil {
			t.Errorf("%s: New = %v, %v; want nil and ErrInvalidConfig", tc.name, l, err)
		}
	}
	if l, err := redisbucket.NewRueidis(nil, 1, 1); !errors.Is(err, admit.ErrInvalidConfig) || l != nil {
		t.Errorf("NewRueidis(nil) = %v, %v; want nil and ErrInvalidConfig", l, err)
	}
}

// Decisions on a slow bucket, where the refill during the test is far
// below one unit of what is checked.
func TestDecisions(t *testing.T) {
	ctx := context.Background()
	l, c, _ := newLimiter(t, 5, 0.001) // one token per 1000 s
	d, err := l.AllowN(ctx, "k", 0)
	if err != nil || d != (admit.Decision{Allowed: true, Limit: 5, Remaining: 5}) {
		t.Fatalf("peek of a new key = %+v, %v", d, err)
	}
	if n := c.Exists(ctx, redisbucket.RedisKey(l, "k")).Val(); n != 0 {
		t.Fatalf("a peek created the key")
	}
	d, err = l.AllowN(ctx, "k", 3)
	if err != nil || !d.Allowed || d.Remaining != 2 || d.RetryAfter != 0 {
		t.Fatalf("AllowN(3) = %+v, %v", d, err)
	}
	if d.ResetAfter <= 3000*time.Second-time.Second || d.ResetAfter > 3000*time.Second {
		t.Errorf("ResetAfter = %v, want just under 3000s", d.ResetAfter)
	}
	d, err = l.AllowN(ctx, "k", 3)
	if err != nil || d.Allowed || d.Remaining != 2 {
		t.Fatalf("AllowN(3) with 2 left = %+v, %v", d, err)
	}
	if d.RetryAfter <= 1000*time.Second-time.Second || d.RetryAfter > 1000*time.Second {
		t.Errorf("RetryAfter = %v, want just under 1000s", d.RetryAfter)
	}
	for _, n := range []int64{-1, 6, math.MaxInt64} {
		d, err = l.AllowN(ctx, "k", n)
		if !errors.Is(err, admit.ErrUnsatisfiable) || d.Allowed || d.Limit != 5 {
			t.Errorf("AllowN(%d) = %+v, %v; want ErrUnsatisfiable", n, d, err)
		}
	}
	d, err = l.AllowN(ctx, "k", 2)
	if err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("AllowN(2) = %+v, %v", d, err)
	}
	// The stored state is exactly 5 tokens of debt.
	pttl := c.PTTL(ctx, redisbucket.RedisKey(l, "k")).Val()
	if pttl <= 4999*time.Second || pttl > 5000*time.Second {
		t.Errorf("PTTL = %v, want just under 5000s", pttl)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.AllowN(cctx, "k", 1); err != context.Canceled {
		t.Errorf("AllowN on a cancelled ctx = %v, want context.Canceled unchanged", err)
	}
}

func TestRateZero(t *testing.T) {
	ctx := context.Background()
	l, c, _ := newLimiter(t, 2, 0)
	for i := 0; i < 2; i++ {
		if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed || d.ResetAfter != redisbucket.Never {
			t.Fatalf("take %d = %+v, %v", i, d, err)
		}
	}
	d, err := l.AllowN(ctx, "k", 1)
	if err != nil || d.Allowed || d.RetryAfter != redisbucket.Never || d.ResetAfter != redisbucket.Never {
		t.Fatalf("empty rate-0 bucket = %+v, %v", d, err)
	}
	if ttl := c.PTTL(ctx, redisbucket.RedisKey(l, "k")).Val(); ttl != -1 {
		t.Errorf("rate-0 key has TTL %v, want none", ttl)
	}
}

// The script's integer arithmetic at the edge of what New accepts: stored
// debts near 2^52 units, read back exactly. The stored time is put in the
// future, so the script applies no refill (a clock reading at or before the
// stored time adds nothing) and the results are exact.
func TestArithmeticExact(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		capacity int64
		rate     float64
	}{
		{1 << 52, 0}, {1<<52 - 1, 0}, {4503, 1e-6}, {1 << 32, 1000}, {1e9, 1e9}, {3, 1.0 / 3}, {1e9, 0.7},
		{1e9, 1e-6}, {1e6, 1e-6}, // ticks of 1 s and 1 ms
	}
	for i, tc := range cases {
		l, c, prefix := newLimiter(t, tc.capacity, tc.rate, redisbucket.WithPrefix(fmt.Sprintf("arith:%d:", i)))
		_ = prefix
		per, capUnits := redisbucket.Units(l)
		future := (serverTime(t, c) + 3600e6) / redisbucket.Tick(l)
		for _, debtTokens := range []int64{0, 1, tc.capacity / 3, tc.capacity - 1, tc.capacity} {
			for _, extra := range []int64{0, 1, per / 2, per - 1} {
				d := debtTokens*per + extra
				if d > capUnits {
					continue
				}
				key := fmt.Sprintf("k%d-%d", debtTokens, extra)
				c.Set(ctx, redisbucket.RedisKey(l, key), redisbucket.Stored(l, d, future), 0)
				got, err := l.AllowN(ctx, key, 0)
				if err != nil {
					t.Fatal(err)
				}
				want := new(big.Int).Quo(big.NewInt(capUnits-d), big.NewInt(per)).Int64()
				if got.Remaining != want {
					t.Errorf("cap %d rate %v debt %d units: Remaining %d, want %d", tc.capacity, tc.rate, d, got.Remaining, want)
				}
				if want >= 1 {
					got, err = l.AllowN(ctx, key, want)
					if err != nil || !got.Allowed || got.Remaining != 0 {
						t.Errorf("cap %d rate %v debt %d: AllowN(%d) = %+v, %v", tc.capacity, tc.rate, d, want, got, err)
					}
				}
				if want < tc.capacity {
					got, err = l.AllowN(ctx, key, want+1)
					if err != nil || got.Allowed {
						t.Errorf("cap %d rate %v debt %d: AllowN(%d) over the balance = %+v, %v", tc.capacity, tc.rate, d, want+1, got, err)
					}
				}
			}
		}
	}
}

// A bucket on a fast rate refills on the server's clock: drained, then
// after a pause the balance is the refill of the server time between the
// drain and the peek, which lies between the TIME readings around them.
func TestRefillOnServerTime(t *testing.T) {
	ctx := context.Background()
	l, c, _ := newLimiter(t, 1000, 1000) // 1 token per ms
	tb := serverTime(t, c)
	if d, err := l.AllowN(ctx, "k", 1000); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("drain = %+v, %v", d, err)
	}
	time.Sleep(50 * time.Millisecond)
	d, err := l.AllowN(ctx, "k", 0)
	ta := serverTime(t, c)
	if err != nil {
		t.Fatal(err)
	}
	// The sleep makes at least 50ms pass between drain and peek; the
	// readings around them bound it from above.
	if hi := (ta - tb) / 1000; d.Remaining < 49 || d.Remaining > hi {
		t.Errorf("Remaining %d after the pause, want in [49, %d] (server elapsed %dµs)", d.Remaining, hi, ta-tb)
	}
	if want := time.Duration(1000-d.Remaining) * time.Millisecond; d.ResetAfter > want || d.ResetAfter <= want-time.Millisecond {
		t.Errorf("ResetAfter %v with %d left, want in (%v, %v]", d.ResetAfter, d.Remaining, want-time.Millisecond, want)
	}
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...interface{}) {}

// On a tick coarser than 1 µs an admission inside a tick counts from the
// tick's end: the next boundary, less than a tick later, credits nothing.
// Capacity 2^50 at 3/s runs on 1 s ticks; the bucket is drained mid-tick,
// then tokens are taken as they come, and at every step the admitted count
// stays within rate × the server time since before the drain.
func TestCoarseTickCountsFromTickEnd(t *testing.T) {
	ctx := context.Background()
	const capacity, rate = 1 << 50, 3
	l, c, _ := newLimiter(t, capacity, rate)
	if q := redisbucket.Tick(l); q != 1e6 {
		t.Fatalf("tick %dµs, want 1s for this configuration", q)
	}
	// Drain about 0.4 s into a second, so that the next boundary comes
	// well inside a tick's length (margins of hundreds of ms either way).
	sub := serverTime(t, c) % 1e6
	time.Sleep(time.Duration((400_000-sub+1e6)%1e6) * time.Microsecond)
	t0 := serverTime(t, c)
	if d, err := l.AllowN(ctx, "k", capacity); err != nil || !d.Allowed {
		t.Fatalf("drain = %+v, %v", d, err)
	}
	// Ask every 50 ms until two ticks' refill has been admitted, checking
	// the bound after every call. The loop ends on the server's clock, not
	// on a count of calls in a wall-clock span, so a loaded machine that
	// makes few calls cannot fail it: it only takes longer.
	admitted := int64(0)
	for {
		d, err := l.AllowN(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		t1 := serverTime(t, c)
		if d.Allowed {
			admitted++
		}
		if bound := rate * (t1 - t0) / 1e6; admitted > bound {
			t.Fatalf("%d admitted %dµs of server time after the drain (drained %dµs into its tick): bound %d",
				admitted, t1-t0, t0%1e6, bound)
		}
		if admitted >= 2*rate {
			break
		}
		if t1-t0 > 30e6 {
			t.Fatalf("%d admitted in %dµs of server time after the drain at %v/s: refill lost", admitted, t1-t0, rate)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
