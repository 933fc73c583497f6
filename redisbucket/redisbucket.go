// Package redisbucket implements admit.KeyedLimiter on Redis, so that every
// replica of a service shares one token bucket per key.
//
// # Algorithm
//
// Each decision is one Lua script, run atomically on the node that owns the
// key (EVALSHA, falling back to EVAL when the server answers NOSCRIPT). The
// script reads the server's clock with TIME, derives the key's balance
// lazily from its stored debt and the time of that debt, checks, consumes,
// and sets PEXPIRE to the moment the bucket would be full again, so Redis
// holds only keys that are not full; an absent key is a full bucket, which is
// what makes the expiry exact. Client clocks never enter the arithmetic.
// Key k is stored as prefix|k (the prefix may not hold '|'), and the stored
// record carries the limiter's parameters: a limiter with another capacity
// or rate that meets the key is denied with an error wrapping
// admit.ErrInvalidConfig, and writes nothing, rather than misreading it.
// Each decision touches one key, so a Redis Cluster serves it without
// CROSSSLOT errors and keys spread over all slots (the prefix may not hold a
// hash tag). The script needs Redis 5 or later (effects replication, so a
// script may call TIME before writing).
//
// # Units
//
// Lua numbers are doubles, so every stored and computed value is kept an
// integer below 2^53. Time is the server's clock in ticks of q
// microseconds; q is 1 µs unless the bucket is so slow for its size that it
// would not fit (capacity 1e9 at 1e-6/s runs on 1 s ticks). A token is per
// units and the bucket refills m units per tick, where per/m is 1e6/(rate·q)
// reduced; every rate with a short decimal form is exact (3/s, 0.5/s,
// 1e-6/s, 1e9/s), others are rounded down by under one part in 2^20. New
// accepts every capacity in [1, 2^31] with every rate 0 or in [1e-6, 1e9],
// and larger capacities up to 2^52 where capacity·per fits in 2^52; it
// rejects the rest with an error wrapping admit.ErrInvalidConfig. RetryAfter
// and ResetAfter are exact to the microsecond, rounded up (on coarser
// ticks, exact to the tick: refill lands at whole ticks); a wait longer than
// a time.Duration holds is reported as Never.
//
// # Failure
//
// Every decision is bounded by WithTimeout. When Redis errs or times out,
// AllowN returns an error wrapping admit.ErrUnavailable and the cause, and a
// Decision chosen by the policy: denied (the default), admitted
// (WithFailOpen), or decided by a local limiter (WithFallback). After a
// network failure the Limiter stops sending: one decision per timeout probes
// Redis and the rest are decided by the policy at once, so nothing piles up
// while Redis is down, and the first probe that succeeds resumes normal
// operation. A caller whose context ends sooner than the timeout gets
// ctx.Err() at its deadline, never the policy's decision; its request runs
// on to the timeout on a goroutine of its own, so that the breaker still
// learns whether Redis answers. An outage's error names Redis's cause and
// never matches the caller's context errors. A Redis restart or failover
// that loses data refills every bucket: an absent key is a full one.
// The client must honour context deadlines
// (ContextTimeoutEnabled: true in go-redis's options); New rejects a
// *redis.Client or *redis.ClusterClient that does not, and go-redis's
// AutoPipeliner, which does not even with that option. New rejects a
// *redis.Ring: when one of its shards dies the Ring moves that shard's keys
// to the others, where a drained bucket reads as a full one with no error,
// which no failure policy could see.
//
// # Pipelining
//
// go-redis sends one command per connection round trip. NewRueidis takes a
// rueidis client instead, which pipelines concurrent commands on shared
// connections by itself: the same decisions, options and failure policy,
// measured at 1.8× to 3.3× go-redis's throughput at 64 goroutines.
//
// # When to pick it
//
// Pick it over the in-process keyed limiter when a limit must hold across
// processes or machines. Its cost is one Redis round trip per decision (tens
// of microseconds on loopback against about a hundred nanoseconds in
// process, one decision per round trip with go-redis); NewRueidis pipelines
// concurrent decisions, and WithBatch trades a documented amount of
// precision for far fewer round trips on hot keys. See docs/redis.md for the
// measured numbers.
package redisbucket

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/admit-go/admit"
	"github.com/redis/go-redis/v9"
)

// Limiter is a keyed token bucket stored in Redis. It is safe for
// concurrent use by any number of goroutines and processes sharing the same
// Redis, prefix, capacity and rate. The zero value is not usable; create one
// with New. A Limiter must not be copied after first use.
type Limiter struct {
	tr     transport
	p      params
	prefix string

	timeout  time.Duration
	open     bool
	fallback admit.KeyedLimiter
	batch    *batcher // nil without WithBatch

	brk breaker
}

var _ admit.KeyedLimiter = (*Limiter)(nil)

// New returns a Limiter whose keys each hold capacity tokens and refill at
// refillPerSecond tokens per second, stored through client (a *redis.Client,
// a *redis.ClusterClient or a failover client; a *redis.Ring is rejected, see
// the package doc). See the package doc for the supported ranges; errors wrap
// admit.ErrInvalidConfig.
func New(client redis.UniversalClient, capacity int64, refillPerSecond float64, opts ...Option) (*Limiter, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", admit.ErrInvalidConfig)
	}
	if err := checkClient(client); err != nil {
		return nil, err
	}
	return newLimiter(func(p params) transport { return newGoRedis(client, p) }, capacity, refillPerSecond, opts)
}

func newLimiter(tr func(params) transport, capacity int64, refillPerSecond float64, opts []Option) (*Limiter, error) {
	cfg := config{prefix: DefaultPrefix, timeout: DefaultTimeout}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: option %d is nil", admit.ErrInvalidConfig, i)
		}
		o(&cfg)
		if cfg.err != nil {
			return nil, cfg.err
		}
	}
	p, err := newParams(capacity, refillPerSecond)
	if err != nil {
		return nil, err
	}
	l := &Limiter{
		tr:       tr(p),
		p:        p,
		prefix:   cfg.prefix,
		timeout:  cfg.timeout,
		open:     cfg.open,
		fallback: cfg.fallback,
	}
	if cfg.batchN > 0 {
		l.batch = newBatcher(min(cfg.batchN, capacity), cfg.batchAge)
	}
	return l, nil
}

// checkClient rejects the clients whose options New can read and that
// would let a frozen server hold a decision past its timeout.
func checkClient(c redis.UniversalClient) error {
	var ok bool
	switch c := c.(type) {
	case *redis.Client:
		ok = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		ok = c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		// A Ring rehashes a dead shard's keys onto the live shards, where
		// each reads as an absent key, a full bucket: every drained bucket
		// on that shard refills at once, silently, whatever the policy.
		return fmt.Errorf("%w: a *redis.Ring moves a failed shard's keys to the other shards, where every bucket reads as full, so a shard failure would admit without any error; use a *redis.ClusterClient (or one *redis.Client per limiter)", admit.ErrInvalidConfig)
	case *redis.AutoPipeliner:
		// Measured (TestOutage): with ContextTimeoutEnabled set, a frozen
		// server still held a decision for minutes.
		return fmt.Errorf("%w: go-redis's AutoPipeliner does not bound a command by its context's deadline, so WithTimeout could not bound a decision; for pipelining use NewRueidis", admit.ErrInvalidConfig)
	default:
		return nil
	}
	if !ok {
		return fmt.Errorf("%w: the client ignores context deadlines, so WithTimeout could not bound a decision; set ContextTimeoutEnabled: true in its options", admit.ErrInvalidConfig)
	}
	return nil
}

// Never is the RetryAfter of a request no refill will satisfy (rate 0) and
// the ResetAfter of a bucket that will never be full again.
const Never = time.Duration(math.MaxInt64)

// AllowN takes n tokens from key's bucket if all n are there, as documented
// on admit.KeyedLimiter: n == 0 peeks; n < 0 or n above the capacity is
// denied with an error wrapping admit.ErrUnsatisfiable, without a round
// trip. If ctx ends first, AllowN returns ctx.Err() unchanged and a zero
// Decision. If Redis cannot decide within the timeout, the error wraps
// admit.ErrUnavailable and the cause, and the Decision is the failure
// policy's.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (admit.Decision, error) {
	if n < 0 || n > l.p.capacity {
		return admit.Decision{Limit: l.p.capacity}, fmt.Errorf("%w: n=%d is outside [0, capacity %d]", admit.ErrUnsatisfiable, n, l.p.capacity)
	}
	if err := ctx.Err(); err != nil {
		return admit.Decision{}, err
	}
	if l.batch != nil && n > 0 {
		return l.batch.allow(ctx, l, key, n)
	}
	d, _, err := l.remote(ctx, key, n, n, time.Time{})
	return d, err
}

// mismatch begins the script's error reply for a key stored with other
// parameters.
const mismatch = "ADMITPARAMS "

// rkey is key's name in Redis: the prefix, which cannot hold the separator,
// then the separator, then the key, so that no two (prefix, key) pairs
// share a name.
func (l *Limiter) rkey(key string) string { return l.prefix + Separator + key }

// remote runs the script, taking want tokens when at least n are there, and
// returns the decision and the tokens taken. The caller waits until ctx ends
// or until by, the decision's own deadline (its start plus the timeout, for a
// decision that already waited; zero for one that starts now), whichever is
// first.
//
// Every request to Redis is bounded by the full timeout and nothing else, so
// that its outcome tells the breaker whether Redis is failing: a request
// bounded by a caller's shorter deadline would end in a timeout whatever
// Redis's health. When the caller waits less than a request's timeout (its
// ctx deadline, or by, is earlier), the request runs on its own goroutine
// and the caller stops waiting at its deadline: ctx.Err() if ctx ended (a
// caller's own deadline never triggers the failure policy), the policy's
// decision if by passed. Otherwise it runs on the caller's goroutine, the
// healthy path's cost: no goroutine, one timer.
func (l *Limiter) remote(ctx context.Context, key string, n, want int64, by time.Time) (admit.Decision, int64, error) {
	if cause := l.brk.allow(); cause != nil {
		return l.unavailable(ctx, key, n, cause)
	}
	own := time.Now().Add(l.timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(own) || !by.IsZero() && by.Before(own) {
		return l.detached(ctx, key, n, want, by)
	}
	sent := int64(time.Since(mono))
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	res, err := l.tr.run(cctx, l.rkey(key), n, want)
	cancel()
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		// The caller gave up; Redis may be fine. (A caller's deadline
		// cannot end the request first: it is not before the timeout.)
		l.brk.release()
		return admit.Decision{}, 0, ctx.Err()
	}
	return l.result(ctx, key, n, res, l.settle(res, err, sent))
}

// detached is remote for a caller that waits less than the timeout.
func (l *Limiter) detached(ctx context.Context, key string, n, want int64, by time.Time) (admit.Decision, int64, error) {
	f := &flight{done: make(chan struct{})}
	go func() {
		// Without the caller's cancellation, with its values (tracing).
		sent := int64(time.Since(mono))
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.timeout)
		res, err := l.tr.run(cctx, l.rkey(key), n, want)
		cancel()
		f.res, f.err = res, l.settle(res, err, sent)
		close(f.done) // publishes res and err
	}()
	var byC <-chan time.Time
	if !by.IsZero() {
		stop := time.NewTimer(time.Until(by))
		defer stop.Stop()
		byC = stop.C
	}
	select {
	case <-f.done:
		return l.result(ctx, key, n, f.res, f.err)
	case <-ctx.Done():
		return admit.Decision{}, 0, ctx.Err()
	case <-byC:
		return l.unavailable(ctx, key, n, &timeoutError{after: l.timeout, what: "no decision (waiting behind another on the key)"})
	}
}

// flight is one request's outcome, written before done is closed.
type flight struct {
	done chan struct{}
	res  []int64
	err  error
}

// settle checks the script's reply and tells the breaker what it shows:
// Redis answered (a decision or an error reply such as WRONGTYPE), or it
// failed (a network error, or no reply within the timeout). It returns the
// error to report: a failure's cause never matches context.DeadlineExceeded
// or context.Canceled, which would read as the caller's context ending. sent
// is when the request started (monotonic ns).
func (l *Limiter) settle(res []int64, err error, sent int64) error {
	if err == nil && len(res) != 6 {
		err = fmt.Errorf("redisbucket: script returned %d values, want 6", len(res))
		l.brk.succeed()
		return err
	}
	if err == nil || l.tr.isReply(err) {
		l.brk.succeed()
		return err
	}
	return l.brk.fail(err, l.timeout, l.tr.dialFailure(sent))
}

// result turns a settled reply into AllowN's answer.
func (l *Limiter) result(ctx context.Context, key string, n int64, res []int64, err error) (admit.Decision, int64, error) {
	if err != nil {
		if msg := err.Error(); l.tr.isReply(err) && strings.HasPrefix(msg, mismatch) {
			// Not Redis failing: a limiter with other parameters wrote the
			// key. Denied, nothing written, whatever the policy.
			stored := strings.TrimPrefix(msg, mismatch)
			return admit.Decision{Limit: l.p.capacity}, 0, fmt.Errorf("%w: key %q holds a bucket of %s, this limiter's is %s: limiters sharing a prefix must agree on capacity and rate",
				admit.ErrInvalidConfig, key, describe(stored), describe(l.p.args()[4]))
		}
		return l.unavailable(ctx, key, n, err)
	}
	return admit.Decision{
		Allowed:    res[0] == 1,
		Limit:      l.p.capacity,
		Remaining:  res[1],
		RetryAfter: l.wait(res[2], res[5]),
		ResetAfter: l.wait(res[3], res[5]),
	}, res[4], nil
}

// wait converts the script's ticks from the current tick's start, sub µs
// ago, to a duration: 0 stays 0, -1 is Never, and a wait past what a
// Duration holds (292 years) is Never too.
func (l *Limiter) wait(ticks, sub int64) time.Duration {
	switch {
	case ticks == 0:
		return 0
	case ticks < 0 || ticks > (math.MaxInt64/int64(time.Microsecond))/l.p.q:
		return Never
	}
	return time.Duration(ticks*l.p.q-sub) * time.Microsecond
}

// unavailable returns the failure policy's decision.
func (l *Limiter) unavailable(ctx context.Context, key string, n int64, cause error) (admit.Decision, int64, error) {
	err := fmt.Errorf("%w: key %q: %w", admit.ErrUnavailable, key, cause)
	switch {
	case l.fallback != nil:
		d, ferr := l.fallback.AllowN(ctx, key, n)
		if ferr != nil {
			err = fmt.Errorf("%w (fallback: %w)", err, ferr)
		}
		return d, 0, err
	case l.open:
		return admit.Decision{Allowed: true, Limit: l.p.capacity}, 0, err
	default:
		return admit.Decision{Limit: l.p.capacity}, 0, err
	}
}
