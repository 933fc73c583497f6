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
// A changed limit is carried over by the first script that meets it, and
// written back whatever the request's outcome (see script.go); so are the
// charges of debt hits. A hit of capacity 0 has no key: the script refuses
// any cost but 0 in the same atomic step.
//
// # A Cluster whose keys span nodes
//
// A script may touch keys of one slot only, so on a Cluster each key is
// decided by its own script on its own node, concurrently (the hits of one
// key, two limits of one descriptor say, in one script, in order, as on one
// Redis); if an enforced hit refuses, every key that took gets a second
// script: a key as the decision left it is set to the state a refused
// request leaves (exact); one another request changed since is given back
// what its takes still account for (their sum, under the key's last
// limit): no more than they added when the decision ended (the request's
// own clamps and cut charges absorb a take too), and only as far as the
// bucket's debt stayed above it at every write since and now, which the
// store keeps per key on a Cluster (its version and the low points of its
// debt over the last 10 s, at most 8, about 180 bytes on a busy key; see
// script.go). A refill to full, a clamp under another limit, a debt charge
// cut at the bound or another give-back in between is then not returned
// again. Where the points merge, or a carry or a cut charge intervened, it
// gives back less than the take (the request's tokens stay taken), never
// more; and a give-back that finds its key changed more than 10 s after
// its decision returns nothing (one that finds it untouched restores it
// exactly, however late). Between its take and its give-back another
// request may see those tokens missing and be refused. The token bucket
// bound (never more than burst + rate × T, plus one tick's refill where
// the tick is coarser than a microsecond: docs/rls.md) holds on the
// Cluster too, given that a master's clock does not step back (a failover
// to a replica, or a slot's move to a master, whose clock is behind) while
// a key is emptied and refilled within a round trip, and that a give-back
// reaches its key within 10 s of its decision (WithTimeout at most 5 s).
// A give-back sent twice finds its receipt in the key and changes nothing,
// unless eight others gave back to the key in between; neither client
// sends a script twice (go-redis is told not to retry it: a decision
// retried after a lost reply would take twice), so a lost reply is an
// outage. A request that an enforced hit refused is refused (no
// error) even when another key's node or a give-back (on a timeout of its
// own) failed: what those left taken errs on the side of refusing. Only
// a request that nothing refused and some node failed to decide fails,
// with an error wrapping admit.ErrUnavailable; one that some node answered
// with an error reply no retry changes fails with a plain error.
//
// # Units
//
// Rates are requests_per_unit per unit, a whole number of seconds, so they
// are exact: the arithmetic is package rls/internal/tick's, the memory
// store's, with time in ticks of q microseconds (the finest power of ten
// from 1 µs to 1 s that fits). Every bucket may hold a balance down to
// minus one burst (charged by debt hits, and kept when its limit changes),
// so a bucket must fit 2·capacity·per ≤ 2^52, per being the ticks per token
// at that tick, reduced: at the coarsest tick, a second, per is the unit's
// seconds divided by their gcd with requests_per_unit. So a burst of 5·10^7
// at one a year fits and 10^8 does not; 4294967295 a year (per 2102400)
// does not either, nor 4294967291 a month (per 2592000), while 4294967295 a
// month (per 172800), a day or any shorter unit fits. Within that, every
// number the script handles is an integer below 2^53, exact in Lua's
// doubles; Check and Decide reject a bucket that does not fit with an error
// wrapping admit.ErrInvalidConfig. A key is written with an expiry at the
// instant its bucket would be full again, except a bucket that never
// refills (Count 0 with a Capacity), which lives until deleted: admit-rls's
// configuration refuses such rules (requests_per_unit: 0 with a burst), so
// only a caller that asks for one gets such keys. The parameters of the
// limits seen are kept in a memo of 256 entries, so the limits clients
// bring (overrides) cannot grow the process.
//
// # Failure
//
// Every Decide's decision is bounded by the store's timeout. On a Cluster
// a refused request's give-backs then get one timeout more of their own,
// detached from ctx (a give-back cut short would leave its tokens taken),
// so such a Decide may take up to twice the timeout, and outlast ctx's
// deadline by one (a review on 2026-12-07). When Redis cannot
// decide (no answer in time, a connection error, or an error reply saying
// it cannot now: LOADING, BUSY, OOM, READONLY, a Cluster failing over, MOVED
// from a Cluster client out of redirects while a slot moves), Decide
// returns an error wrapping admit.ErrUnavailable and the cause. Any other
// error reply (a key of another type or a value this store did not write,
// CROSSSLOT or MOVED from a single-node client on a Cluster, NOPERM) is a
// plain error, which no failure mode turns into an admission. ctx's own
// error is returned unchanged. The client must
// honour context deadlines (ContextTimeoutEnabled in go-redis's options).
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/internal/redisreply"
	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/internal/memo"
	"github.com/admit-go/admit/rls/internal/tick"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// DefaultPrefix starts every key the store writes.
const DefaultPrefix = "admit-rls:"

// maxUnits bounds a bucket's debt in units (twice its capacity·per, a
// balance of minus one burst), so that with a cost of up to one more burst
// every number the script handles stays below 2^53.
const maxUnits = 1 << 52

// Store is the Redis rls.Store. It is safe for concurrent use; build one
// with New or NewRueidis.
type Store struct {
	exec    runner
	split   bool // decide each key alone, then give back (a Cluster)
	track   bool // keep versions and points without split (tests)
	prefix  string
	timeout time.Duration
	params  *memo.Memo[limit, params]
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
// decided key by key (see the package doc); a *redis.Client, or another
// client that sends every command to one server, with one script per
// request. go-redis sends one command per connection at a time.
//
// Refused, with an error wrapping admit.ErrInvalidConfig: a client that
// ignores context deadlines (set ContextTimeoutEnabled), go-redis's
// AutoPipeliner (which does not honour them either), and a *redis.Ring,
// which sends a script to the shard of its first key: a request's other
// buckets would be read and written there, beside the same buckets on
// their own shards, so a bucket would admit up to once per shard.
func New(c redis.UniversalClient, opts ...Option) (*Store, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", admit.ErrInvalidConfig)
	}
	s := &Store{prefix: DefaultPrefix, timeout: time.Second}
	s.exec = func(ctx context.Context, keys, args []string) ([]int64, error) {
		cmd := scriptCmd(ctx, "evalsha", script.Hash(), keys, args)
		_ = c.Process(ctx, onceCmd{cmd})
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			// A restarted or flushed server, or a new Cluster node: EVAL
			// loads the script too.
			cmd = scriptCmd(ctx, "eval", src, keys, args)
			_ = c.Process(ctx, onceCmd{cmd})
		}
		return cmd.Int64Slice()
	}
	deadlines := true
	switch c := c.(type) {
	case *redis.Client:
		deadlines = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		deadlines = c.Options().ContextTimeoutEnabled
		s.split = true
	case *redis.Ring:
		return nil, fmt.Errorf("%w: a *redis.Ring sends a request's script to the shard of its first key, so a bucket would be kept on several shards and admit up to once on each; use a *redis.ClusterClient or a *redis.Client", admit.ErrInvalidConfig)
	case *redis.AutoPipeliner:
		return nil, fmt.Errorf("%w: go-redis's AutoPipeliner does not bound a command by its context's deadline, so WithTimeout could not bound a decision; for pipelining use NewRueidis", admit.ErrInvalidConfig)
	}
	if !deadlines {
		return nil, fmt.Errorf("%w: the client ignores context deadlines; set ContextTimeoutEnabled", admit.ErrInvalidConfig)
	}
	return s.apply(opts)
}

// scriptCmd is the script's command, EVALSHA or EVAL, with its key
// position and step count set, so that a ClusterClient routes it by its
// first key without looking the command up in COMMAND's table (which it
// does on a context of its own, ignoring the decision's deadline).
func scriptCmd(ctx context.Context, name, body string, keys, args []string) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, body, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	for _, v := range args {
		a = append(a, v)
	}
	cmd := redis.NewCmd(ctx, a...)
	cmd.SetFirstKeyPos(3)
	cmd.SetStepCount(1)
	return cmd
}

// onceCmd is the script's command as go-redis runs it: never sent again
// after a failed attempt. go-redis retries a command whose connection
// ended or timed out (MaxRetries, 3 by default), which for the script may
// be after Redis ran it: a decision would take its tokens twice
// (TestLostReplyTakesOnce: 2 of 3 taken for one, and admitted). Such a
// failure is an outage instead. A ClusterClient still follows MOVED and
// ASK (the script did not run there), and the pool still dials again after
// a refused dial.
type onceCmd struct{ *redis.Cmd }

func (onceCmd) NoRetry() bool { return true }

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
	s.params = memo.New(newParams)
	return s, nil
}

// limit is what a Hit's bucket is computed from.
type limit struct {
	capacity, count int64
	period          time.Duration
}

// params is a bucket's arithmetic (package tick) and its script arguments:
// capU, per, m, q and the signature "capU:per:m:q", formatted once.
type params struct {
	tick.Params
	args [5]string
}

func newParams(l limit) (params, error) {
	tp, err := tick.New(l.capacity, l.count, l.period, time.Microsecond, maxUnits)
	if err != nil {
		return params{}, err
	}
	c, pe, m, q := strconv.FormatInt(tp.CapU, 10), strconv.FormatInt(tp.Per, 10), strconv.FormatInt(tp.M, 10), strconv.FormatInt(tp.Q, 10)
	return params{Params: tp, args: [5]string{c, pe, m, q, c + ":" + pe + ":" + m + ":" + q}}, nil
}

func (s *Store) paramsFor(h *rls.Hit) (params, error) {
	if h.Capacity == 0 {
		return params{}, nil // a limit of zero: no bucket
	}
	return s.params.Get(limit{h.Capacity, h.Count, h.Period})
}

// Check implements rls.Store.
func (s *Store) Check(h rls.Hit) error {
	_, err := s.paramsFor(&h)
	return err
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
		admitted, err := s.run(cctx, hits, ps, results, nil, nil, false)
		return admitted, s.wrap(ctx, err)
	}
	return s.decideSplit(ctx, cctx, hits, ps, results)
}

// Script flags, per hit.
const (
	flagShadow  = 1  // may lack its cost without refusing
	flagDebt    = 2  // charged whatever the outcome
	flagRefused = 4  // the request is refused already: take nothing
	flagMarked  = 16 // a give-back: the decision wrote the bucket marked
	flagRefMark = 32 // a give-back: a refused request leaves it marked
	flagTrack   = 64 // keep the key's version and points, for give-backs
)

// run runs the script over hits. back, when not nil, makes it a give-back:
// back[i] is hit i's take; a key untouched since is set to the state a
// refused request leaves, another gets the take's N tokens back as far as
// they still count (see script.go). taken, when not nil, receives each hit's debt and
// tick after the decision, for a later give-back. refused runs the hits of
// a request already refused: nothing is taken, but changed limits and
// debt charges are applied and each hit's OK says whether it held its cost.
func (s *Store) run(ctx context.Context, hits []rls.Hit, ps []params, results []rls.Result, back, taken []take, refused bool) (bool, error) {
	keys := make([]string, len(hits))
	args := make([]string, 0, 11*len(hits))
	for i := range hits {
		h, p := &hits[i], &ps[i]
		keys[i] = s.prefix + h.Key
		limit := h.Capacity + 1 // n·per stays below 2^53 whatever N was asked
		if h.Debt {
			limit = 2*h.Capacity + 1
		}
		cost := strconv.FormatInt(min(h.N, limit), 10)
		d1, t1, dref, ver := "0", "0", "0", "0"
		if back != nil {
			cost = strconv.FormatInt(-h.N, 10)
			d1, t1 = strconv.FormatInt(back[i].d, 10), strconv.FormatInt(back[i].t, 10)
			dref, ver = strconv.FormatInt(back[i].dref, 10), strconv.FormatInt(back[i].ver, 10)
		}
		flags := 0
		if h.Shadow {
			flags |= flagShadow
		}
		if h.Debt {
			flags |= flagDebt
		}
		if refused {
			flags |= flagRefused
		}
		if back == nil && h.N < 0 {
			// never held (rls.Store's rule 4): a check, which refuses
			// the request unless shadow (the script reads a negative n
			// as a give-back's)
			cost = "0"
			if !h.Shadow {
				flags |= flagRefused
			}
		}
		if back != nil && back[i].marked {
			flags |= flagMarked
		}
		if back != nil && back[i].refMark {
			flags |= flagRefMark
		}
		if s.split || s.track {
			flags |= flagTrack
		}
		if h.Capacity == 0 {
			args = append(args, "0", "1", "0", "1", cost, strconv.Itoa(flags), "", d1, t1, dref, ver)
			continue
		}
		args = append(args, p.args[0], p.args[1], p.args[2], p.args[3], cost, strconv.Itoa(flags), p.args[4], d1, t1, dref, ver)
	}
	out, err := s.exec(ctx, keys, args)
	if err != nil {
		return false, err
	}
	if len(out) != 1+10*len(hits) {
		return false, fmt.Errorf("redisstore: script returned %d values for %d keys", len(out), len(hits))
	}
	for i := range hits {
		r := out[1+10*i:]
		ok := r[0] == 1 && hits[i].N >= 0 && hits[i].N <= hits[i].Capacity
		results[i] = rls.Result{OK: ok, Remaining: max(0, r[1]), ResetAfter: wait(r[2], r[3], ps[i].Q)}
		if taken != nil {
			taken[i] = take{d: r[4], t: r[5], dref: r[6], marked: r[7] == 1, refMark: r[8] == 1, ver: r[9]}
		}
	}
	return out[0] == 1, nil
}

// take is a bucket's debt and tick right after a take.
type take struct {
	d, t int64
	// What the decision wrote was marked, and what a refused request
	// leaves (its debt charges and carries, no take): debt dref, marked
	// if refMark. A give-back that finds the key as the decision wrote it
	// sets that state exactly; one that finds it changed gives back what
	// it can.
	dref            int64
	marked, refMark bool
	// ver is the key's version the decision wrote (a tracked key's, else
	// 0): a give-back counts the points after it.
	ver int64
}

// decideSplit decides each key on its own node, concurrently (the hits of
// one key in one script, in order, as on one Redis: one key is one slot),
// and gives back what the ordinary hits took when an enforced one refused.
// A hit of capacity 0 that refuses is known before any round trip: the
// others then run as a refused request's, taking nothing.
func (s *Store) decideSplit(ctx, cctx context.Context, hits []rls.Hit, ps []params, results []rls.Result) (bool, error) {
	refused := false
	for i := range hits {
		h := &hits[i]
		if h.Capacity == 0 {
			results[i] = rls.Result{OK: h.N == 0}
			refused = refused || h.N != 0 && !h.Shadow
		}
	}
	// groups[g] are the indexes of one key's hits, in order.
	var groups [][]int
	byKey := map[string]int{}
	for i := range hits {
		if hits[i].Capacity == 0 {
			continue
		}
		g, ok := byKey[hits[i].Key]
		if !ok {
			g = len(groups)
			byKey[hits[i].Key] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	errs := make([]error, len(groups))
	took := make([]bool, len(groups)) // the group's script took its hits' costs
	taken := make([]take, len(hits))
	var wg sync.WaitGroup
	for g, idx := range groups {
		wg.Go(func() {
			gh, gp, gr, gt := make([]rls.Hit, len(idx)), make([]params, len(idx)), make([]rls.Result, len(idx)), make([]take, len(idx))
			for j, i := range idx {
				gh[j], gp[j] = hits[i], ps[i]
			}
			took[g], errs[g] = s.run(cctx, gh, gp, gr, nil, gt, refused)
			for j, i := range idx {
				results[i], taken[i] = gr[j], gt[j]
			}
		})
	}
	wg.Wait()
	// denied: an enforced hit that Redis answered (or a limit of zero)
	// refused, so the request is refused whatever else failed: an error
	// would be an outage, which a failure mode may admit.
	denied := refused
	var failed error
	for g, idx := range groups {
		if errs[g] != nil {
			failed = errors.Join(failed, errs[g])
			continue
		}
		for _, i := range idx {
			if !results[i].OK && !hits[i].Shadow {
				denied = true
			}
		}
	}
	switch {
	case refused:
		return false, nil // the others ran as a refused request's: nothing to give back
	case !denied && failed == nil:
		return true, nil
	}
	// Give back what each key's script took.
	backErrs := make([]error, len(groups))
	for g, idx := range groups {
		if errs[g] != nil || !took[g] {
			continue
		}
		h := giveBack(hits, results, idx)
		if h.N == 0 {
			continue
		}
		last := idx[len(idx)-1]
		wg.Go(func() {
			back := make([]rls.Result, 1)
			// A timeout of its own: the decision's may be spent by the
			// node that failed.
			bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
			defer cancel()
			if _, err := s.run(bctx, []rls.Hit{h}, ps[last:last+1], back, taken[last:last+1], nil, false); err != nil {
				backErrs[g] = fmt.Errorf("giving back %d tokens of %q: %w", h.N, h.Key, err)
				return
			}
			for _, i := range idx {
				results[i].Remaining, results[i].ResetAfter = back[0].Remaining, back[0].ResetAfter
			}
		})
	}
	wg.Wait()
	if denied {
		// Refused by Redis: that answer stands. Tokens that a failed
		// node's script or give-back left taken err on the side of
		// refusing, as documented.
		return false, nil
	}
	failed = errors.Join(append([]error{failed}, backErrs...)...)
	return false, s.wrap(ctx, failed)
}

// giveBack is the hit that gives back what one key's hits (idx, in order)
// took: the costs of its ordinary hits that held (a debt hit's charge
// stands whatever the outcome), under the key's last limit, which its
// balance was carried into. Its N is 0 when they took nothing.
func giveBack(hits []rls.Hit, results []rls.Result, idx []int) rls.Hit {
	var n int64
	for _, i := range idx {
		if h := &hits[i]; results[i].OK && !h.Debt && h.N > 0 {
			n = min(n+h.N, math.MaxInt64/2)
		}
	}
	h := hits[idx[len(idx)-1]]
	h.N = min(n, 2*h.Capacity) // no more than a bucket can owe
	return h
}

func (s *Store) wrap(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if s.refusal(err) {
		// Redis answered, and no retry would change the answer: not an
		// outage, so REDIS_FAILURE_MODE_ALLOW must not admit it.
		msg := "redisstore: redis refused the decision"
		if !s.split && crossSlot(err) {
			msg += " (a single-node client on a Redis Cluster? admit-rls's REDIS_TYPE=CLUSTER)"
		}
		return fmt.Errorf("%s: %w", msg, err)
	}
	return fmt.Errorf("%w: redis: %w", admit.ErrUnavailable, err)
}

// refusal reports whether err holds an error reply that does not say Redis
// cannot decide now (redisreply.Unavailable): a key of another type, a value
// this store did not write, CROSSSLOT, NOPERM, MOVED to a single-node
// client. One is enough: that key's decision fails whatever the others' (a
// timeout beside it included), so no retry or failure mode would make the
// request right. MOVED or ASK from a Cluster client (s.split) is an outage:
// it ran out of redirects while the masters disagreed about the slot, as
// they do while it moves or a replica takes over (TestClusterRedirectsRunOut).
func (s *Store) refusal(err error) bool {
	return anyReply(err, func(msg string) bool {
		return !redisreply.Unavailable(msg) && !(s.split && redisreply.Redirect(msg))
	})
}

// crossSlot reports whether err holds a reply that a single-node client
// gets from a Redis Cluster.
func crossSlot(err error) bool {
	return anyReply(err, func(msg string) bool {
		code, _, _ := strings.Cut(msg, " ")
		return code == "CROSSSLOT" || code == "MOVED" || code == "ASK"
	})
}

// anyReply reports whether any error reply in err's tree (joined errors,
// wrapped ones), from either client, has a message that f accepts. A nil
// reply (no value) is not an error reply.
func anyReply(err error, f func(msg string) bool) bool {
	switch e := err.(type) {
	case nil:
		return false
	case *rueidis.RedisError:
		if !e.IsNil() && f(e.Error()) {
			return true
		}
	case redis.Error:
		if e != redis.Nil && e != redis.TxFailedErr && f(e.Error()) {
			return true
		}
	case interface{ Unwrap() []error }:
		for _, x := range e.Unwrap() {
			if anyReply(x, f) {
				return true
			}
		}
		return false
	}
	return anyReply(errors.Unwrap(err), f)
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
