// Package redisstore implements admit-rls's Redis store: every replica of
// the service shares one token bucket per descriptor key, kept in Redis and
// decided by a Lua script on the server's clock.
//
// # One Redis
//
// A request's buckets are decided by one script over all its keys, atomic
// on the server (see script.go): it admits only if every enforced bucket
// holds its cost, and a refused request writes nothing. So on one Redis (a
// single instance, or a Cluster where the request's keys share a slot) the
// all-or-nothing rule holds exactly, as in memory.
//
// # A Cluster whose keys span nodes
//
// A script may touch keys of one slot only, so on a Cluster each bucket is
// decided by its own script on its own node, concurrently; if an enforced
// one refuses, every bucket that took is given back, by a second script,
// what its take still accounts for: all of it, unless the bucket was
// within one round trip's refill of full (then refill has already made up
// part of the take, and returning it all could lift the bucket above its
// bound; see script.go). What holds then: every bucket alone keeps the
// token bucket bound (never more than burst + rate × T); a refused request
// ends up taking from none of its buckets, except at most one round trip's
// refill from a bucket that was nearly full; between its take and its
// give-back another request may see those tokens missing and be refused
// (never over-admitted); and if a give-back fails (a node down or past the
// timeout), its tokens stay taken, which errs on the side of refusing, and
// the request fails with an error wrapping admit.ErrUnavailable.
//
// # Units
//
// Rates are requests_per_unit per unit, a whole number of seconds, so they
// are exact: time is counted in ticks of q microseconds (the finest power of
// ten from 1 µs to 1 s that fits), a token is per units and a bucket
// refills m units per tick, per/m being the ticks per token reduced. A
// bucket must fit capacity·per < 2^53 − 2^34 (at the coarsest tick, a second,
// per is the unit's seconds divided by their gcd with requests_per_unit: a
// burst of 10^8 at one a year fits); Decide rejects one that does not
// with an error wrapping admit.ErrInvalidConfig.
//
// # Failure
//
// Every Decide is bounded by the store's timeout. When Redis errs or does
// not answer in time, Decide returns an error wrapping admit.ErrUnavailable
// and the cause; ctx's own error is returned unchanged. The client must
// honour context deadlines (ContextTimeoutEnabled in go-redis's options).
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/rls"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// DefaultPrefix starts every key the store writes.
const DefaultPrefix = "admit-rls:"

// Store is the Redis rls.Store. It is safe for concurrent use; build one
// with New.
type Store struct {
	exec    runner
	split   bool // decide each key alone, then give back (a Cluster)
	prefix  string
	timeout time.Duration
	params  sync.Map // paramsKey → params
}

var _ rls.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// WithPrefix sets the key prefix (DefaultPrefix by default). On a Cluster
// it must not hold a hash tag.
func WithPrefix(p string) Option { return func(s *Store) { s.prefix = p } }

// WithTimeout bounds each Decide (default 1 s).
func WithTimeout(d time.Duration) Option { return func(s *Store) { s.timeout = d } }

// runner runs the script once; the client's own retry of EVALSHA as EVAL
// on NOSCRIPT is inside.
type runner func(ctx context.Context, keys, args []string) ([]int64, error)

// New returns a Store on a go-redis client. A *redis.ClusterClient is
// decided key by key (see the package doc); any other client with one
// script per request. go-redis sends one command per connection at a time.
func New(c redis.UniversalClient, opts ...Option) (*Store, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", admit.ErrInvalidConfig)
	}
	s := &Store{prefix: DefaultPrefix, timeout: time.Second}
	s.exec = func(ctx context.Context, keys, args []string) ([]int64, error) {
		a := make([]any, len(args))
		for i := range args {
			a[i] = args[i]
		}
		return script.Run(ctx, c, keys, a...).Int64Slice()
	}
	switch c := c.(type) {
	case *redis.Client:
		if !c.Options().ContextTimeoutEnabled {
			return nil, fmt.Errorf("%w: the client ignores context deadlines; set ContextTimeoutEnabled", admit.ErrInvalidConfig)
		}
	case *redis.ClusterClient:
		if !c.Options().ContextTimeoutEnabled {
			return nil, fmt.Errorf("%w: the client ignores context deadlines; set ContextTimeoutEnabled", admit.ErrInvalidConfig)
		}
		s.split = true
	}
	return s.apply(opts)
}

// NewRueidis returns a Store on a rueidis client, which pipelines
// concurrent commands on shared connections by itself (the faster client
// under concurrency). A Cluster client is decided key by key, as in New.
func NewRueidis(c rueidis.Client, opts ...Option) (*Store, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", admit.ErrInvalidConfig)
	}
	s := &Store{prefix: DefaultPrefix, timeout: time.Second, split: c.Mode() == rueidis.ClientModeCluster}
	s.exec = func(ctx context.Context, keys, args []string) ([]int64, error) {
		return rueidisScript.Exec(ctx, c, keys, args).AsIntSlice()
	}
	return s.apply(opts)
}

func (s *Store) apply(opts []Option) (*Store, error) {
	for _, o := range opts {
		o(s)
	}
	if s.timeout <= 0 {
		return nil, fmt.Errorf("%w: timeout %v is not positive", admit.ErrInvalidConfig, s.timeout)
	}
	return s, nil
}

type paramsKey struct {
	capacity, count int64
	period          time.Duration
}

// params is a bucket's integer arithmetic; see the package doc.
type params struct {
	capU, per, m, q int64
	args            [5]string // capU, per, m, q and the signature "capU:per:m:q", formatted once
}

func (p *params) format() params {
	c, pe, m, q := strconv.FormatInt(p.capU, 10), strconv.FormatInt(p.per, 10), strconv.FormatInt(p.m, 10), strconv.FormatInt(p.q, 10)
	p.args = [5]string{c, pe, m, q, c + ":" + pe + ":" + m + ":" + q}
	return *p
}

// maxCapUnits keeps capU + 2·m below 2^53 (m < 2^32).
const maxCapUnits = int64(1)<<53 - int64(1)<<34

func (s *Store) paramsFor(h *rls.Hit) (params, error) {
	k := paramsKey{h.Capacity, h.Count, h.Period}
	if p, ok := s.params.Load(k); ok {
		return p.(params), nil
	}
	p, err := newParams(k)
	if err != nil {
		return params{}, err
	}
	s.params.Store(k, p)
	return p, nil
}

// Check implements rls.Store.
func (s *Store) Check(h rls.Hit) error {
	_, err := s.paramsFor(&h)
	return err
}

func newParams(k paramsKey) (params, error) {
	switch {
	case k.capacity < 1 || k.capacity > maxCapUnits:
		return params{}, fmt.Errorf("%w: capacity %d is outside [1, 2^53)", admit.ErrInvalidConfig, k.capacity)
	case k.count < 0 || k.count > math.MaxUint32:
		return params{}, fmt.Errorf("%w: count %d is outside [0, 2^32)", admit.ErrInvalidConfig, k.count)
	case k.period < time.Second || k.period%time.Second != 0:
		return params{}, fmt.Errorf("%w: period %v is not a whole number of seconds", admit.ErrInvalidConfig, k.period)
	case k.count == 0:
		p := params{capU: k.capacity, per: 1, m: 0, q: 1e6}
		return p.format(), nil
	}
	periodUs := k.period.Microseconds()
	for q := int64(1); q <= 1e6; q *= 10 {
		ticks := periodUs / q // ticks per period; a whole number as the period is whole seconds
		g := gcd(ticks, k.count)
		per, m := ticks/g, k.count/g
		if per <= maxCapUnits/k.capacity {
			p := params{capU: k.capacity * per, per: per, m: m, q: q}
			return p.format(), nil
		}
	}
	return params{}, fmt.Errorf("%w: %d per %v with burst %d does not fit Redis's integers (burst × seconds per token must stay below 2^53)", admit.ErrInvalidConfig, k.count, k.period, k.capacity)
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Decide implements rls.Store.
func (s *Store) Decide(ctx context.Context, hits []rls.Hit, results []rls.Result) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	ps := make([]params, len(hits))
	for i := range hits {
		p, err := s.paramsFor(&hits[i])
		if err != nil {
			return false, err
		}
		ps[i] = p
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if !s.split || len(hits) == 1 {
		admitted, err := s.run(cctx, hits, ps, results, nil, nil)
		return admitted, s.wrap(ctx, err)
	}
	return s.decideSplit(ctx, cctx, hits, ps, results)
}

// run runs the script over hits. back, when not nil, makes it a give-back:
// back[i] is hit i's take, whose N tokens it returns as far as they still
// count (see script.go). taken, when not nil, receives each hit's debt and
// tick after the decision, for a later give-back.
func (s *Store) run(ctx context.Context, hits []rls.Hit, ps []params, results []rls.Result, back, taken []take) (bool, error) {
	keys := make([]string, len(hits))
	args := make([]string, 0, 9*len(hits))
	for i := range hits {
		h, p := &hits[i], ps[i]
		keys[i] = s.prefix + h.Key
		cost := strconv.FormatInt(min(h.N, h.Capacity+1), 10) // n·per stays below 2^53 whatever N was asked
		d1, t1 := "0", "0"
		if back != nil {
			cost = strconv.FormatInt(-h.N, 10)
			d1, t1 = strconv.FormatInt(back[i].d, 10), strconv.FormatInt(back[i].t, 10)
		}
		shadow := "0"
		if h.Shadow {
			shadow = "1"
		}
		args = append(args, p.args[0], p.args[1], p.args[2], p.args[3], cost, shadow, p.args[4], d1, t1)
	}
	out, err := s.exec(ctx, keys, args)
	if err != nil {
		return false, err
	}
	if len(out) != 1+6*len(hits) {
		return false, fmt.Errorf("redisstore: script returned %d values for %d keys", len(out), len(hits))
	}
	for i := range hits {
		r := out[1+6*i:]
		ok := r[0] == 1 && hits[i].N >= 0 && hits[i].N <= hits[i].Capacity
		results[i] = rls.Result{OK: ok, Remaining: r[1], ResetAfter: wait(r[2], r[3], ps[i].q)}
		if taken != nil {
			taken[i] = take{d: r[4], t: r[5]}
		}
	}
	return out[0] == 1, nil
}

// take is a bucket's debt and tick right after a take.
type take struct{ d, t int64 }

// decideSplit decides each hit alone, concurrently, and gives back what
// the taking hits took when an enforced one refused.
func (s *Store) decideSplit(ctx, cctx context.Context, hits []rls.Hit, ps []params, results []rls.Result) (bool, error) {
	errs := make([]error, len(hits))
	taken := make([]take, len(hits))
	var wg sync.WaitGroup
	for i := range hits {
		wg.Go(func() {
			_, errs[i] = s.run(cctx, hits[i:i+1], ps[i:i+1], results[i:i+1], nil, taken[i:i+1])
		})
	}
	wg.Wait()
	admitted := true
	var failed error
	for i := range hits {
		if errs[i] != nil {
			failed = errors.Join(failed, errs[i])
		} else if !results[i].OK && !hits[i].Shadow {
			admitted = false
		}
	}
	if admitted && failed == nil {
		return true, nil
	}
	// Give back what was taken: by the hits that held their cost.
	for i := range hits {
		if errs[i] != nil || !results[i].OK || hits[i].N == 0 {
			continue
		}
		wg.Go(func() {
			back := make([]rls.Result, 1)
			if _, err := s.run(cctx, hits[i:i+1], ps[i:i+1], back, taken[i:i+1], nil); err != nil {
				errs[i] = fmt.Errorf("giving back %d tokens of %q: %w", hits[i].N, hits[i].Key, err)
				return
			}
			results[i].Remaining, results[i].ResetAfter = back[0].Remaining, back[0].ResetAfter
		})
	}
	wg.Wait()
	for i := range hits {
		if errs[i] != nil {
			failed = errors.Join(failed, errs[i])
		}
	}
	return false, s.wrap(ctx, failed)
}

func (s *Store) wrap(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return fmt.Errorf("%w: redis: %w", admit.ErrUnavailable, err)
}

// wait converts ticks from the current tick's start to a duration.
func wait(ticks, sub, q int64) time.Duration {
	switch {
	case ticks == 0:
		return 0
	case ticks < 0 || ticks > (math.MaxInt64/int64(time.Microsecond))/q:
		return rls.Never
	}
	return time.Duration(ticks*q-sub) * time.Microsecond
}
