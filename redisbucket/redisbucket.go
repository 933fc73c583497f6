// Package redisbucket implements admit.KeyedLimiter and admit.PolicyLimiter
// on Redis, so that every replica of a service shares one token bucket per
// key and limit.
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
// Key k is stored as prefix|k (the prefix may not hold '|'; a k longer than
// MaxKeyBytes as prefix|~ and its SHA-256 in hex). Its value holds
// one record per limit Name the key is not full under, and each record
// carries its limit's parameters, so a call that brings other ones for a
// Name never misreads it (see Several limits). Each decision touches one
// key, whatever the number of limits, so a Redis Cluster serves it without
// CROSSSLOT errors and keys spread over all slots (the prefix may not hold a
// hash tag). The script needs Redis 5 or later (effects replication, so a
// script may call TIME before writing).
//
// # Several limits
//
// NewLimits builds a Limiter whose AllowN applies several limits (a burst
// and a daily quota, say) to each key, and every Limiter implements
// admit.PolicyLimiter: AllowLimits takes the limits with each call (a tier
// read from the request), at most MaxLimits of them. Either way all of a
// key's limits are decided in the one script, on the one key, on the
// server's clock, in one round trip, all or nothing, by the rules on
// admit.PolicyLimiter: state per (key, Name), shared between AllowN and
// AllowLimits calls that name the same limit; the Decision names the
// deciding limit in Policy. A call that brings another Capacity or Rate for
// a Name the key holds:
//
//   - through AllowLimits, carries the balance over: advanced to now at the
//     old rate; full there, full under the new limit (a full bucket equals
//     a Name never used); else converted to the new units rounding down (by
//     under one unit, what the new limit refills in one tick: 1 µs unless
//     the bucket is slow for its size) and clamped to the new capacity; written
//     even by a peek or a denial, so that the new rate applies from that
//     call on (from the end of the old limit's tick, when that was coarser
//     than a microsecond and an admission was booked there: docs/redis.md);
//   - through AllowN (New's or NewLimits' own limits), is refused: an error
//     wrapping admit.ErrInvalidConfig that names the limit and both
//     configurations, nothing written, whatever the failure policy. A
//     limiter built with fixed limits states what every replica enforces,
//     and a replica configured otherwise on the same prefix is a deployment
//     error that should be loud, not a runtime change to be absorbed; limits
//     that are meant to change go through AllowLimits.
//
// A record whose bucket is full is dropped when the key is next written and
// the key is deleted (or expires, by its PX) once every record is full:
// exact, since a full bucket and a Name without a record answer alike. The
// carry-over keeps it exact: a record still stored while full (until that
// next write, or beside a Name that is not full, or within the millisecond
// PX rounds up) is full under a changed limit, as a dropped one would be,
// so a client's balance never depends on when its key was last written. So
// a Name full under capacity 10 starts full at 20, and a Name clamped full
// by a smaller capacity starts full at a later, larger one, as a Name never
// used does; a bucket not full keeps its balance, clamped.
//
// # Units
//
// Lua numbers are doubles, so every stored and computed value is kept an
// integer below 2^53. Time is the server's clock in ticks of q
// microseconds; q is 1 µs unless the bucket is so slow for its size that it
// would not fit (capacity 1e9 at 1e-6/s runs on 1 s ticks). A token is per
// units and the bucket refills m units per tick, where per/m is 1e6/(rate·q)
// reduced; every rate with a short decimal form is exact (3/s, 0.5/s,
// 1e-6/s, 1e9/s), others are rounded down by under one part in 2^20. Each
// limit picks its own units. New, NewLimits and AllowLimits accept every
// capacity in [1, 2^31] with every rate 0 or in [1e-6, 1e9], and larger
// capacities up to 2^52 where capacity·per fits in 2^52; they reject the
// rest with an error wrapping admit.ErrInvalidConfig. RetryAfter and
// ResetAfter are exact to the microsecond, rounded up (on coarser ticks,
// exact to the tick: refill lands at whole ticks); a wait of 2^53 µs (285
// years) or more is reported as Never.
//
// # Failure
//
// Every decision is bounded by WithTimeout. When Redis errs or times out,
// AllowN returns an error wrapping admit.ErrUnavailable and the cause, and a
// Decision chosen by the policy: denied (the default), admitted
// (WithFailOpen), or decided by a local limiter (WithFallback; one that is
// an admit.PolicyLimiter is handed an AllowLimits call's limits). After a
// network failure the Limiter stops sending: one decision per timeout probes
// Redis and the rest are decided by the policy at once, so nothing piles up
// while Redis is down, and the first probe that succeeds resumes normal
// operation. A caller whose context ends sooner than the timeout gets
// ctx.Err() at its deadline, never the policy's decision; its request runs
// on to the timeout on a goroutine of its own, so that the breaker still
// learns whether Redis answers. A caller cancelled without such a deadline
// gets ctx.Err() when its request ends (within the timeout). An outage's error names Redis's cause and
// never matches the caller's context errors. A Redis restart or failover
// that loses data refills every bucket: an absent key is a full one. A
// decision is sent once: go-redis is told not to retry the script (a
// retry after a lost reply would take its tokens twice), so a connection
// that fails mid-request is an outage, for the policy.
// An error reply is an outage only when it says that Redis cannot decide
// now (LOADING, BUSY, OOM, READONLY, MASTERDOWN, CLUSTERDOWN, TRYAGAIN,
// NOREPLICAS, MISCONF, too many clients, and MOVED or ASK from a Cluster
// client that ran out of redirects while a slot moved); any other (a script
// error, WRONGTYPE, NOPERM, MOVED to a single-node client on a Cluster or to
// a ClusterClient with MaxRedirects -1, which follows none) is a
// refusal of this decision: denied, with an error wrapping
// admit.ErrInvalidConfig, whatever the policy.
// The client must honour context deadlines
// (ContextTimeoutEnabled: true in go-redis's options); New rejects a
// *redis.Client or *redis.ClusterClient that does not, and go-redis's
// AutoPipeliner, which does not even with that option. New rejects a
// *redis.Ring: when one of its shards dies the Ring moves that shard's keys
// to the others, where a drained bucket reads as a full one with no error,
// which no failure policy could see. For the same reason New refuses a
// Redis whose maxmemory-policy may evict keys (anything but noeviction,
// read with CONFIG GET or, where CONFIG is refused, INFO memory), unless
// WithEvictionAccepted says the risk is known: an evicted bucket reads as
// full.
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
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/internal/ratelimit"
	"github.com/admit-go/admit/internal/redisreply"
	"github.com/redis/go-redis/v9"
)

// Limiter is a keyed token bucket stored in Redis, under one limit (New),
// several (NewLimits) or limits chosen per call (AllowLimits). It is safe
// for concurrent use by any number of goroutines and processes sharing the
// same Redis and prefix; limiters built with fixed limits on one prefix must
// agree on each Name's capacity and rate (see Several limits in the package
// doc). The zero value is not usable; create one with New or NewLimits. A
// Limiter must not be copied after first use.
type Limiter struct {
	tr     transport
	fixed  *limitSet // AllowN's limits
	cache  setCache  // AllowLimits' sets
	prefix string

	timeout  time.Duration
	open     bool
	fallback admit.KeyedLimiter
	batch    *batcher // nil without WithBatch

	brk       breaker
	deadlines deadlines
}

var _ admit.KeyedLimiter = (*Limiter)(nil)

// New returns a Limiter whose keys each hold capacity tokens and refill at
// refillPerSecond tokens per second, stored through client (a *redis.Client,
// a *redis.ClusterClient or a failover client; a *redis.Ring is rejected, see
// the package doc). See the package doc for the supported ranges; errors wrap
// admit.ErrInvalidConfig. Unless WithEvictionAccepted is given, New asks
// each node for its maxmemory-policy, within WithTimeout, and refuses one
// that may evict keys (see WithEvictionAccepted); a node that cannot be
// asked is not checked.
//
// It is NewLimits with the one limit {Name: "", Capacity: capacity, Rate:
// refillPerSecond}.
func New(client redis.UniversalClient, capacity int64, refillPerSecond float64, opts ...Option) (*Limiter, error) {
	return NewLimits(client, []admit.Limit{{Capacity: capacity, Rate: refillPerSecond}}, opts...)
}

func newLimiter(tr transport, limits []admit.Limit, opts []Option) (*Limiter, error) {
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
	set, err := newLimitSet(limits, false)
	if err != nil {
		return nil, err
	}
	if !cfg.eviction {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
		err := checkEviction(ctx, tr)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	l := &Limiter{
		tr:       tr,
		fixed:    set,
		prefix:   cfg.prefix,
		timeout:  cfg.timeout,
		open:     cfg.open,
		fallback: cfg.fallback,
	}
	l.deadlines.timeout = cfg.timeout
	if cfg.batchN > 0 {
		l.batch = newBatcher(min(cfg.batchN, set.minCap), cfg.batchAge)
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
// the ResetAfter of a bucket that will never be full again, and stands for
// any wait of 2^53 µs (285 years) or more.
const Never = time.Duration(math.MaxInt64)

// AllowN takes n tokens from key's bucket if all n are there, as documented
// on admit.KeyedLimiter: n == 0 peeks; n < 0 or n above the capacity is
// denied with an error wrapping admit.ErrUnsatisfiable, without a round
// trip. Under several limits (NewLimits) it takes n from each if each holds
// n, and its Decision is as admit.PolicyLimiter's rule 4 says. If ctx ends first, AllowN returns ctx.Err() unchanged and a zero
// Decision. If Redis cannot decide within the timeout, the error wraps
// admit.ErrUnavailable and the cause, and the Decision is the failure
// policy's.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (admit.Decision, error) {
	if s := l.fixed; n < 0 || n > s.minCap {
		m := s.limits[s.minIdx]
		return admit.Decision{Limit: m.Capacity, Policy: m.Name}, fmt.Errorf("%w: n=%d is outside [0, capacity %d]", admit.ErrUnsatisfiable, n, m.Capacity)
	}
	if err := ctx.Err(); err != nil {
		return admit.Decision{}, err
	}
	if l.batch != nil && n > 0 {
		return l.batch.allow(ctx, l, key, n)
	}
	d, _, err := l.remote(ctx, key, n, n, time.Time{}, l.fixed, nil)
	return d, err
}

// mismatch begins the script's error reply for a key that holds one of a
// strict call's Names with other parameters; malformed, for a key whose
// value this package did not write.
const (
	mismatch  = "ADMITPARAMS "
	malformed = "ADMITFORMAT "
)

// rkey is key's name in Redis: the prefix, which cannot hold the separator,
// then the separator, then the key's form (keyForm), so that no two
// (prefix, key) pairs share a name.
func (l *Limiter) rkey(key string) string { return l.prefix + Separator + keyForm(key) }

// MaxKeyBytes is the longest key held in Redis, and in WithBatch's lease
// table, as its own bytes. A longer key (a client may send a megabyte in a
// header) is held as "~" and the 64 hex digits of its SHA-256, 65 bytes,
// so that a key costs at most 65 bytes of key name, whatever the caller
// passes. A key of up to 64 bytes never has that length, so no short key
// names a long key's bucket; two long keys share one only if their
// SHA-256 sums are equal. The sum has no secret, since every replica must
// name a key's bucket alike.
const MaxKeyBytes = 64

// keyForm returns key itself if it has at most MaxKeyBytes bytes, else its
// digest form. Errors name a key by it too: a key is client data, and an
// error (logged, say, by a WithOnError function on every request of an
// outage) that quoted a megabyte key would cost up to four megabytes.
func keyForm(key string) string {
	if len(key) <= MaxKeyBytes {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "~" + hex.EncodeToString(sum[:])
}

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
// healthy path's cost: no goroutine, no timer of its own (see deadlines),
// one clock reading.
//
// h, when not nil, is a batched request's (see handoff): it runs on its own
// goroutine whenever the caller might leave before the reply (ctx can end),
// since a request cancelled in flight may have taken its tokens with no one
// told, and a reply that comes after the caller left goes to h.
func (l *Limiter) remote(ctx context.Context, key string, n, want int64, by time.Time, set *limitSet, h *handoff) (admit.Decision, int64, error) {
	if cause := l.brk.allow(); cause != nil {
		return l.unavailable(ctx, key, n, cause, set)
	}
	now := int64(time.Since(mono))
	own := mono.Add(time.Duration(now) + l.timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(own) || !by.IsZero() && by.Before(own) || h != nil && ctx.Done() != nil {
		return l.detached(ctx, key, n, want, by, set, h)
	}
	res, err := l.tr.run(&callCtx{Context: ctx, deadline: own, s: l.deadlines.get(now)}, l.rkey(key), n, want, set)
	// The request ends by its own deadline, never by the caller's context,
	// so its outcome tells the breaker whether Redis answers.
	err = l.settle(err, now)
	if err != nil && ctx.Err() != nil {
		// The caller's context ended meanwhile (cancelled: a deadline is
		// not before the request's): the caller's error, not the policy's.
		return admit.Decision{}, 0, ctx.Err()
	}
	return l.result(ctx, key, n, res, err, set)
}

// handoff takes the reply to a batched request whose caller stopped
// waiting before it came: land runs on the request's goroutine with the
// script's reply and the settled error, and remote sets left before it
// returns, so that the caller knows the outcome is no longer its own. The
// batcher puts the tokens taken into the key's lease, where later callers
// spend them: a batch taken for a caller who left is not lost (a review saw
// capacity 100 spent by one caller whose deadline passed, then 0 of the
// next 99 admitted).
type handoff struct {
	land func(res []int64, err error)
	left bool
}

// detached is remote for a caller that may stop waiting before the reply.
func (l *Limiter) detached(ctx context.Context, key string, n, want int64, by time.Time, set *limitSet, h *handoff) (admit.Decision, int64, error) {
	f := &flight{done: make(chan struct{})}
	go func() {
		// Without the caller's cancellation, with its values (tracing).
		sent := int64(time.Since(mono))
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.timeout)
		res, err := l.tr.run(cctx, l.rkey(key), n, want, set)
		cancel()
		f.res, f.err = res, l.settle(err, sent)
		if !f.state.CompareAndSwap(flightWaiting, flightDelivered) && h != nil {
			h.land(f.res, f.err) // the caller left
		}
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
	case <-ctx.Done():
		if f.state.CompareAndSwap(flightWaiting, flightLeft) {
			h.leave()
			return admit.Decision{}, 0, ctx.Err()
		}
		<-f.done // delivered just now: the outcome is this caller's
	case <-byC:
		if f.state.CompareAndSwap(flightWaiting, flightLeft) {
			h.leave()
			return l.unavailable(ctx, key, n, &timeoutError{after: l.timeout, what: "no decision (waiting behind another on the key)"}, set)
		}
		<-f.done
	}
	return l.result(ctx, key, n, f.res, f.err, set)
}

func (h *handoff) leave() {
	if h != nil {
		h.left = true
	}
}

// A flight's state: the request's goroutine moves it from waiting to
// delivered, or the caller from waiting to left; whichever comes second
// knows the outcome is the other's (delivered: the caller's to read; left:
// the handoff's).
const (
	flightWaiting int32 = iota
	flightDelivered
	flightLeft
)

// flight is one request's outcome, written before done is closed.
type flight struct {
	done  chan struct{}
	state atomic.Int32
	res   []int64
	err   error
}

// settle tells the breaker what the script's outcome shows: Redis
// answered (a decision or an error reply such as WRONGTYPE), or it failed
// (a network error, or no reply within the timeout). It returns the error
// to report: a failure's cause never matches context.DeadlineExceeded or
// context.Canceled, which would read as the caller's context ending. sent
// is when the request started (monotonic ns).
func (l *Limiter) settle(err error, sent int64) error {
	if err == nil || l.tr.isReply(err) {
		l.brk.succeed()
		return err
	}
	return l.brk.fail(err, l.timeout, l.tr.dialFailure(sent))
}

// result turns a settled reply into AllowN's answer. Only a failure to
// reach Redis, or an error reply that says Redis cannot decide now
// (l.unavailableReply), goes to the failure policy: any other error reply, or
// a reply the script cannot have sent, is Redis refusing this decision, and
// no policy may admit it.
func (l *Limiter) result(ctx context.Context, key string, n int64, res []int64, err error, set *limitSet) (admit.Decision, int64, error) {
	if err != nil {
		if l.tr.isReply(err) && !l.unavailableReply(err.Error()) {
			d, err := l.refused(key, err, set)
			return d, 0, err
		}
		return l.unavailable(ctx, key, n, err, set)
	}
	d, taken, err := decision(res, set)
	if err != nil {
		m := set.limits[set.minIdx]
		return admit.Decision{Limit: m.Capacity, Policy: m.Name}, 0, fmt.Errorf("%w: key %q: %w", admit.ErrInvalidConfig, keyForm(key), err)
	}
	return d, taken, nil
}

// decision reads the script's reply: the Decision and the tokens taken.
func decision(res []int64, set *limitSet) (admit.Decision, int64, error) {
	if len(res) != 6 {
		return admit.Decision{}, 0, fmt.Errorf("redisbucket: the script replied %d values, want 6", len(res))
	}
	i := int(res[5]) - 1
	if i < 0 || i >= len(set.limits) {
		return admit.Decision{}, 0, fmt.Errorf("redisbucket: the script named limit %d of %d", i+1, len(set.limits))
	}
	return admit.Decision{
		Allowed:    res[0] == 1,
		Limit:      set.limits[i].Capacity,
		Remaining:  res[1],
		RetryAfter: wait(res[2]),
		ResetAfter: wait(res[3]),
		Policy:     set.limits[i].Name,
	}, res[4], nil
}

// unavailableReply reports whether an error reply says that Redis cannot
// decide now (redisreply.Unavailable: an outage, for the failure policy);
// every other reply is refused, never admitted (a review saw WithFailOpen
// admit 5 of 5 at capacity 2 on a healthy Redis when they were outages).
// MOVED or ASK from a Cluster client is an outage: it followed redirects
// until its limit (go-redis's MaxRedirects, 3 by default) while the masters
// disagreed about the slot, as they do while it moves or a replica takes
// over (TestClusterRedirectsRunOut). From any other client it is refused:
// a single-node client on a Cluster gets MOVED for every key of the other
// masters' slots, for good.
func (l *Limiter) unavailableReply(msg string) bool {
	return redisreply.Unavailable(msg) || redisreply.Redirect(msg) && l.tr.cluster()
}

// refused answers an error reply that is not an outage: one of the
// limiter's Names stored with other parameters by another limiter on the
// prefix, a value this package did not write, or any other error of the
// script or the key. Denied, nothing written, an error wrapping
// admit.ErrInvalidConfig, whatever the failure policy.
func (l *Limiter) refused(key string, reply error, set *limitSet) (admit.Decision, error) {
	msg := reply.Error()
	m := set.limits[set.minIdx]
	d := admit.Decision{Limit: m.Capacity, Policy: m.Name}
	if rest, ok := strings.CutPrefix(msg, mismatch); ok {
		idx, stored, _ := strings.Cut(rest, " ")
		i, err := strconv.Atoi(idx)
		if err != nil || i < 1 || i > len(set.limits) {
			return d, fmt.Errorf("%w: key %q: %s", admit.ErrInvalidConfig, keyForm(key), msg)
		}
		lim := set.limits[i-1]
		return d, fmt.Errorf("%w: key %q holds limit %q as a bucket of %s, this limiter's is %s: limiters sharing a prefix must agree on their limits' capacity and rate (AllowLimits carries a balance over instead)",
			admit.ErrInvalidConfig, keyForm(key), lim.Name, describe(stored), describe(set.params[i-1].numbers()))
	}
	if rest, ok := strings.CutPrefix(msg, malformed); ok {
		// The script sends the value's length and its first 64 bytes.
		size, head, _ := strings.Cut(rest, " ")
		return d, fmt.Errorf("%w: key %q holds a value of %s bytes, which this package did not write, beginning %q", admit.ErrInvalidConfig, keyForm(key), size, head)
	}
	if redisreply.Redirect(msg) {
		return d, fmt.Errorf("%w: key %q: %w: a Redis Cluster node redirected a client that does not follow redirects; use a Cluster client (a *redis.ClusterClient, or a rueidis client in cluster mode)", admit.ErrInvalidConfig, keyForm(key), reply)
	}
	return d, fmt.Errorf("%w: key %q: Redis refused the decision (not an outage, so the failure policy does not apply): %w", admit.ErrInvalidConfig, keyForm(key), reply)
}

// wait converts the script's µs to a duration: 0 stays 0 and -1 is Never
// (the script returns it for a wait of 2^53 µs, 285 years, or more).
func wait(us int64) time.Duration {
	if us < 0 {
		return Never
	}
	return time.Duration(us) * time.Microsecond
}

// unavailable returns the failure policy's decision. A fallback that is a
// PolicyLimiter, it and every limiter it wraps (a counting wrapper such as
// admitotel's has AllowLimits whatever it wraps), is handed a per-call
// set's limits; otherwise its AllowN decides with its own.
func (l *Limiter) unavailable(ctx context.Context, key string, n int64, cause error, set *limitSet) (admit.Decision, int64, error) {
	err := fmt.Errorf("%w: key %q: %w", admit.ErrUnavailable, keyForm(key), cause)
	m := set.limits[set.minIdx]
	switch {
	case l.fallback != nil:
		var d admit.Decision
		var ferr error
		if p, ok := ratelimit.Policy(l.fallback); ok && set.perCall {
			d, ferr = p.AllowLimits(ctx, key, n, set.limits...)
		} else {
			d, ferr = l.fallback.AllowN(ctx, key, n)
		}
		if ferr != nil {
			err = fmt.Errorf("%w (fallback: %w)", err, ferr)
		}
		return d, 0, err
	case l.open:
		return admit.Decision{Allowed: true, Limit: m.Capacity, Policy: m.Name}, 0, err
	default:
		return admit.Decision{Limit: m.Capacity, Policy: m.Name}, 0, err
	}
}
