package redisbucket_test

import (
	"context"
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/redisbucket"
)

// The decision benchmarks: one decision per op against the shared server,
// each implementation on its own key prefix, with capacity 1e9 and 1 token
// per second, so that every decision admits and writes (GET and SET PX for
// redisbucket; redis_rate's GCRA script likewise GETs and SETs with EX) and
// no key expires during a run. (At 1e9 tokens/s every key is full again a
// nanosecond after each decision, so redisbucket's millisecond PX makes
// Redis expire and recreate keys constantly while redis_rate's EX, rounded
// up to a second, keeps them: that case measures expiry churn, not the
// decision.)
//
//	BenchmarkDecision/keys=1/goroutines=64/impl=redisbucket
//
// Reported: decisions/s over the whole run, and p50/p99 latency of single
// decisions from a log-linear histogram (6% buckets). Run with -cpu 2 on
// this machine; goroutines=64 is RunParallel at ceil(64/GOMAXPROCS) per
// core.
func BenchmarkDecision(b *testing.B) {
	const capacity, rate = 1_000_000_000, 1
	for _, keys := range []int{1, 10_000} {
		names := make([]string, keys)
		for i := range names {
			names[i] = fmt.Sprintf("user-%d", i)
		}
		if keys == 1 {
			names[0] = "hot"
		}
		for _, g := range []int{1, 64} {
			for _, impl := range benchImpls {
				b.Run(fmt.Sprintf("keys=%s/goroutines=%d/impl=%s", keyLabel(keys), g, impl.name), func(b *testing.B) {
					if impl.hotOnly && keys != 1 {
						b.Skip("batching is for hot keys")
					}
					decide, done := impl.make(b, capacity, rate)
					defer done()
					runDecisions(b, g, names, decide)
				})
			}
		}
	}
}

func keyLabel(k int) string {
	if k >= 1000 {
		return fmt.Sprintf("%dk", k/1000)
	}
	return fmt.Sprint(k)
}

type decideFunc func(ctx context.Context, key string) (bool, error)

type benchImpl struct {
	name    string
	hotOnly bool
	make    func(b *testing.B, capacity int64, rate float64) (decideFunc, func())
}

// Fixed order: the peer, then ours plain, pipelined and batched, then the
// floors.
var benchImpls = []benchImpl{
	{name: "redis_rate", make: func(b *testing.B, capacity int64, rate float64) (decideFunc, func()) {
		c := newBenchClient(b)
		l := redis_rate.NewLimiter(c)
		limit := redis_rate.Limit{Rate: int(rate), Burst: int(capacity), Period: time.Second}
		return func(ctx context.Context, key string) (bool, error) {
			res, err := l.Allow(ctx, "bench:rr:"+key, limit)
			if err != nil {
				return false, err
			}
			return res.Allowed > 0, nil
		}, func() { c.Close() }
	}},
	{name: "redisbucket", make: func(b *testing.B, capacity int64, rate float64) (decideFunc, func()) {
		c := newBenchClient(b)
		return limiterDecide(b, c, capacity, rate, "bench:rb:"), func() { c.Close() }
	}},
	{name: "redisbucket-rueidis", make: func(b *testing.B, capacity int64, rate float64) (decideFunc, func()) {
		// NewRueidis: the same script through rueidis's automatic
		// pipelining. (go-redis's AutoPipeliner pipelines too, but New
		// rejects it: it does not honour context deadlines.)
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
		if err != nil {
			b.Fatal(err)
		}
		l, err := redisbucket.NewRueidis(rc, capacity, rate, redisbucket.WithPrefix("bench:rue:"), redisbucket.WithTimeout(benchTimeout))
		if err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context, key string) (bool, error) {
			d, err := l.AllowN(ctx, key, 1)
			return d.Allowed, err
		}, func() { rc.Close() }
	}},
	{name: "redisbucket-batch", hotOnly: true, make: func(b *testing.B, capacity int64, rate float64) (decideFunc, func()) {
		c := newBenchClient(b)
		return limiterDecide(b, c, capacity, rate, "bench:rbb:", redisbucket.WithBatch(100, 10*time.Millisecond)), func() { c.Close() }
	}},
	{name: "floor-ping", make: func(b *testing.B, _ int64, _ float64) (decideFunc, func()) {
		c := newBenchClient(b)
		return func(ctx context.Context, _ string) (bool, error) {
			return true, c.Ping(ctx).Err()
		}, func() { c.Close() }
	}},
	{name: "floor-evalsha-empty", make: func(b *testing.B, _ int64, _ float64) (decideFunc, func()) {
		c := newBenchClient(b)
		s := redis.NewScript("return 1")
		if err := s.Load(context.Background(), c).Err(); err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context, key string) (bool, error) {
			return true, s.EvalSha(ctx, c, []string{"bench:empty:" + key}).Err()
		}, func() { c.Close() }
	}},
}

// benchTimeout bounds redisbucket's decisions in the benchmarks: go-redis's
// default ReadTimeout, which bounds redis_rate's, so that a stall of a
// loaded machine fails neither side sooner.
const benchTimeout = 3 * time.Second

func newBenchClient(b *testing.B) *redis.Client {
	// Pool as large as the goroutines, so that the pool is not what limits
	// the plain clients.
	return redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 64})
}

func limiterDecide(b *testing.B, c redis.UniversalClient, capacity int64, rate float64, prefix string, opts ...redisbucket.Option) decideFunc {
	l, err := redisbucket.New(c, capacity, rate, append([]redisbucket.Option{redisbucket.WithPrefix(prefix), redisbucket.WithTimeout(benchTimeout)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context, key string) (bool, error) {
		d, err := l.AllowN(ctx, key, 1)
		return d.Allowed, err
	}
}

// hist is a log-linear latency histogram: 16 buckets per power of two.
type hist [64 * 16]int64

func (h *hist) add(d time.Duration) {
	v := uint64(max(d, 1))
	e := bits.Len64(v) - 1
	sub := uint64(0)
	if e >= 4 {
		sub = (v >> (e - 4)) & 15
	} else {
		sub = (v << (4 - e)) & 15
	}
	h[e*16+int(sub)]++
}

// quantile returns the lower edge of the bucket holding quantile q.
func (h *hist) quantile(q float64) time.Duration {
	var total int64
	for _, c := range h {
		total += c
	}
	want := int64(q * float64(total))
	var seen int64
	for i, c := range h {
		seen += c
		if seen > want {
			e, sub := i/16, uint64(i%16)
			return time.Duration((uint64(1) << e) + (sub<<e)>>4)
		}
	}
	return 0
}

// runDecisions runs b.N decisions over names from g goroutines and reports
// throughput and latency. A failed decision fails the benchmark after the
// run (no b.Fatal in spawned goroutines).
func runDecisions(b *testing.B, g int, names []string, decide decideFunc) {
	ctx := context.Background()
	var (
		mu       sync.Mutex
		total    hist
		firstErr error
		denied   int64
	)
	// Warm the connections and load the scripts before timing.
	for i := 0; i < 64 && i < len(names); i++ {
		if _, err := decide(ctx, names[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	body := func(next func() bool, offset int) {
		var h hist
		var err error
		var den int64
		i := offset
		for next() {
			t0 := time.Now()
			ok, e := decide(ctx, names[i%len(names)])
			h.add(time.Since(t0))
			if e != nil && err == nil {
				err = e
			}
			if !ok {
				den++
			}
			i++
		}
		mu.Lock()
		for j := range h {
			total[j] += h[j]
		}
		if firstErr == nil {
			firstErr = err
		}
		denied += den
		mu.Unlock()
	}
	if g == 1 {
		n := 0
		body(func() bool { n++; return n <= b.N }, 0)
	} else {
		b.SetParallelism((g + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		var id sync.Mutex
		next := 0
		b.RunParallel(func(pb *testing.PB) {
			id.Lock()
			offset := next * 7919
			next++
			id.Unlock()
			body(pb.Next, offset)
		})
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	if denied > 0 {
		b.Fatalf("%d of %d decisions denied; the benchmark measures admits", denied, b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(total.quantile(0.50).Microseconds()), "p50-µs")
	b.ReportMetric(float64(total.quantile(0.99).Microseconds()), "p99-µs")
}

// BenchmarkLimits: NewLimits' AllowN with one limit against three, through
// go-redis at 64 goroutines over 10k keys, capacity 1e9 at rates near 1/s
// as in BenchmarkDecision (every decision admits and writes, no key
// expires). Both are one round trip; three limits send two more arguments
// and store three records. Run the two alternately for a ratio (see
// docs/redis.md).
//
//	BenchmarkLimits/limits=3
func BenchmarkLimits(b *testing.B) {
	names := make([]string, 10_000)
	for i := range names {
		names[i] = fmt.Sprintf("user-%d", i)
	}
	all := []admit.Limit{
		{Name: "second", Capacity: 1_000_000_000, Rate: 1},
		{Name: "minute", Capacity: 1_000_000_000, Rate: 2},
		{Name: "day", Capacity: 1_000_000_000, Rate: 0.5},
	}
	for _, k := range []int{1, 3} {
		b.Run(fmt.Sprintf("limits=%d", k), func(b *testing.B) {
			c := newBenchClient(b)
			defer c.Close()
			l, err := redisbucket.NewLimits(c, all[:k], redisbucket.WithPrefix(fmt.Sprintf("bench:lim%d:", k)), redisbucket.WithTimeout(benchTimeout))
			if err != nil {
				b.Fatal(err)
			}
			runDecisions(b, 64, names, func(ctx context.Context, key string) (bool, error) {
				d, err := l.AllowN(ctx, key, 1)
				return d.Allowed, err
			})
		})
	}
}
