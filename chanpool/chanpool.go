// Package chanpool implements a generic bounded resource pool (database
// connections, clients, buffers) whose one buffered channel is both the
// semaphore and the inventory.
//
// # Design
//
// A Pool of capacity n owns n slots. A slot is a fixed record that either
// holds an idle resource or is empty, meaning "permission to create one".
// The pool's channel has room for exactly n slot pointers, so holding a slot
// is holding a permit, and the resource travels with its permit:
//
//   - Acquire receives a slot from the channel. If the slot is empty it calls
//     create; if it holds a resource that is too old, has been idle too long
//     or fails validation, it destroys it and creates a replacement. Either
//     way the caller only ever sees a resource that passed the checks.
//   - Release sends the slot, resource inside, back on the channel. The send
//     cannot block: at most n slots exist and this one is not in the
//     channel. Destroy sends it back empty.
//   - When the channel is empty, callers block in the channel's own receive
//     queue, which the Go runtime serves first in, first out; a released
//     slot is handed directly to the longest-waiting caller, and nobody
//     arriving later can take it first. Before queueing, a caller that
//     finds the pool exhausted yields the processor twice and looks again,
//     so that holders that are runnable but not running get to release:
//     without it, direct hand-off turns contention into a convoy where
//     every Acquire parks.
//
// Slots are materialized lazily: a new pool's channel is empty and a count
// of unborn slots stands in for the permits not yet used, so a pool only
// grows past k resources when more than k are in use at once. Idle resources
// are handed out in FIFO order (the channel is a queue): every idle resource
// is used in turn, which keeps them all warm and spreads load evenly, at the
// price that WithMaxIdleTime only retires resources when the pool is
// idle as a whole, not when it is merely over-provisioned.
//
// There is no background goroutine: idle time, lifetime and validation are
// checked when a resource is checked out, and Close destroys what it finds.
//
// # When to use it
//
// Use chanpool when you want a small, auditable pool with strict FIFO
// fairness, context-aware waits, zero allocations per Acquire/Release and
// HikariCP-style checks on checkout. It does not keep a minimum of idle
// resources warm, does not pre-create or health-check resources in the
// background, and hands idle resources out oldest-released first rather
// than most-recently-used first; use jackc/puddle (through pgxpool) or
// database/sql where those matter.
package chanpool

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/admit-go/admit"
)

// Sentinel errors. Test for them with errors.Is.
var (
	// ErrClosed is returned by Acquire after Close has been called, including
	// to callers that were waiting when Close was called.
	ErrClosed = errors.New("chanpool: pool closed")
	// ErrSaturated is wrapped by the error Acquire returns when the pool is
	// exhausted and the number of waiting callers has reached the limit set
	// with WithMaxWaiters.
	ErrSaturated = errors.New("chanpool: too many waiters")
)

// Pool is a bounded pool of resources of type T: at most its capacity exist
// at once, and each is handed out as a Lease that the caller ends with
// exactly one Release or Destroy. It is safe for concurrent use. The zero
// value is not usable; create one with New. A Pool must not be copied after
// first use.
type Pool[T any] struct {
	// Immutable after New.
	ch       chan *slot[T] // the inventory; its capacity is the bound
	slots    []slot[T]
	closing  chan struct{} // closed by the first Close
	done     chan struct{} // closed when all slots are retired
	create   func(context.Context) (T, error)
	cfg      config[T]
	capacity int64
	checks   bool // some checkout check needs the clock or validate
	stamp    bool // Release must record lastUsed

	// closed is set once, before closing is closed. Every path that puts a
	// slot back reads it before sending (and retires the slot instead if it
	// is set) and again after sending (and then drains the channel). Close
	// sets it, then drains. Channel operations and atomics are all
	// synchronizing operations, which the Go memory model places in one
	// total order consistent with program order; so either the second read
	// sees true, or the send precedes Close's drain and the drain finds the
	// slot (or an acquirer received it first and handles it). No slot is
	// left in the channel after Close with nobody to destroy its resource.
	closed    atomic.Bool
	closeOnce sync.Once

	_ [64]byte // keep the write-heavy words below off the lines read above

	// unborn counts slots never yet handed out; slots[capacity-unborn] is
	// the next. It only decreases, so an acquirer that sees it at zero
	// knows every slot is in the channel or held, and may block.
	unborn atomic.Int64
	// retired counts slots withdrawn for good after Close; the one that
	// brings it to capacity closes done.
	retired atomic.Int64
	// alive counts created resources not yet destroyed.
	alive    atomic.Int64
	creating atomic.Int64
	waiting  atomic.Int64
	counters counters
}

// New returns an empty pool that creates at most capacity resources with
// create, lazily, as callers need them. It returns an error wrapping
// admit.ErrInvalidConfig for a capacity below 1, a nil create, a nil
// option or an invalid option value.
//
// When create returns an error, the pool discards the value returned with
// it: it is not handed out and not passed to the destroy hook, following the
// Go convention that a function's other results are unspecified when it
// fails (a destroy hook would otherwise have to cope with zero or
// half-built values). A create that acquires something before failing must
// release it itself. A create that panics is counted in
// Stats.CreateErrors, and its slot is freed before the panic continues.
//
// New allocates the bookkeeping of every slot up front, whether or not a
// resource is ever created for it: a channel entry of 8 bytes and a slot
// of 120 bytes on 64-bit platforms for a T of one word (more for a larger
// T), so a capacity of a million takes about 128 MB (TestSlotSize).
func New[T any](capacity int, create func(context.Context) (T, error), opts ...Option[T]) (*Pool[T], error) {
	if capacity < 1 || int64(capacity) > math.MaxInt32 {
		return nil, fmt.Errorf("%w: chanpool: capacity %d out of range [1, %d]", admit.ErrInvalidConfig, capacity, math.MaxInt32)
	}
	if create == nil {
		return nil, fmt.Errorf("%w: chanpool: nil create function", admit.ErrInvalidConfig)
	}
	cfg := config[T]{maxWaiters: -1}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: chanpool: option %d is nil", admit.ErrInvalidConfig, i)
		}
		o(&cfg)
		if cfg.err != nil {
			return nil, cfg.err
		}
	}
	if cfg.clock == nil {
		cfg.clock = admit.SystemClock()
	}
	p := &Pool[T]{
		ch:       make(chan *slot[T], capacity),
		slots:    make([]slot[T], capacity),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
		create:   create,
		cfg:      cfg,
		capacity: int64(capacity),
		checks:   cfg.maxIdle > 0 || cfg.maxLifetime > 0 || cfg.validate != nil,
		stamp:    cfg.maxIdle > 0 || (cfg.validate != nil && cfg.validateAfter > 0),
	}
	for i := range p.slots {
		p.slots[i].p = p
	}
	p.unborn.Store(int64(capacity))
	return p, nil
}

// Acquire returns a lease on a resource, waiting if every slot is in use.
// It returns ctx.Err() unchanged if ctx has ended on entry, ends while it
// waits or ends while it creates a resource; ErrClosed once Close has been
// called; an error wrapping ErrSaturated when the WithMaxWaiters limit is
// reached; and an error wrapping create's error if create fails. On error
// it holds nothing: the slot it may have taken is back in the pool.
//
// Callers that wait are served in the order they start waiting in the
// channel's queue, and none already queued is overtaken by a later caller;
// a caller still in its brief yield before queueing (see the package doc)
// can lose a released slot to one that arrived after it. The caller must end the
// lease with exactly one Release or Destroy.
func (p *Pool[T]) Acquire(ctx context.Context) (Lease[T], error) {
	if err := ctx.Err(); err != nil {
		p.counters.cancelled.Add(1)
		return Lease[T]{}, err
	}
	if p.closed.Load() {
		return Lease[T]{}, ErrClosed
	}
	var s *slot[T]
	select {
	case s = <-p.ch:
		p.took(s)
	default:
		if s = p.takeUnborn(); s == nil {
			if s = p.yieldRetry(); s == nil {
				var err error
				if s, err = p.wait(ctx); err != nil {
					return Lease[T]{}, err
				}
			}
		}
	}
	return p.checkout(ctx, s)
}

// TryAcquire returns a lease if a slot is free now, and false otherwise,
// without waiting for another caller to release one. A free slot may still
// have to be filled: TryAcquire then calls create (and validate on an idle
// resource) with context.Background, and returns false if create fails. It
// returns false once Close has been called.
func (p *Pool[T]) TryAcquire() (Lease[T], bool) {
	if p.closed.Load() {
		return Lease[T]{}, false
	}
	var s *slot[T]
	select {
	case s = <-p.ch:
		p.took(s)
	default:
		if s = p.takeUnborn(); s == nil {
			return Lease[T]{}, false
		}
	}
	l, err := p.checkout(context.Background(), s)
	return l, err == nil
}

// takeUnborn claims a slot that has never been used, or returns nil if none
// is left.
func (p *Pool[T]) takeUnborn() *slot[T] {
	for n := p.unborn.Load(); n > 0; n = p.unborn.Load() {
		if p.unborn.CompareAndSwap(n, n-1) {
			return &p.slots[p.capacity-n]
		}
	}
	return nil
}

// yieldRetry gives the processor away up to yieldRounds times, retrying the
// non-blocking receive after each, before the caller queues.
//
// It breaks convoys. A release with callers queued hands the slot straight
// to the first of them, which becomes runnable but does not run yet; the
// releaser, looping, then finds the channel empty and queues too, and from
// then on every release pays a park and a wake-up. Yielding lets the
// runnable holders run and release first. It cannot overtake anyone
// queued: while callers are queued, a released slot goes to them and never
// into the buffer this receive reads.
func (p *Pool[T]) yieldRetry() *slot[T] {
	for range yieldRounds {
		runtime.Gosched()
		select {
		case s := <-p.ch:
			p.took(s)
			return s
		default:
		}
	}
	return nil
}

// yieldRounds is how many times an acquirer that finds the pool exhausted
// yields before it queues. Two was enough, in BenchmarkPool, to keep eight
// goroutines on a pool of one to four out of the convoy at GOMAXPROCS 1
// and 2.
const yieldRounds = 2

// wait blocks in the channel's receive queue. Because unborn only
// decreases and was zero, every slot is in the channel or held, so a slot
// arrives when one is put back; the runtime hands it to the longest-waiting
// receiver.
func (p *Pool[T]) wait(ctx context.Context) (*slot[T], error) {
	if err := p.enqueue(); err != nil {
		return nil, err
	}
	start := p.cfg.clock.Now()
	var (
		s   *slot[T]
		err error
	)
	select {
	case s = <-p.ch:
	case <-ctx.Done():
		err = ctx.Err()
		p.counters.cancelled.Add(1)
	case <-p.closing:
		err = ErrClosed
	}
	if s != nil && testHookReceived != nil {
		testHookReceived()
	}
	if s != nil && s.handed {
		s.handed = false // its sender counted this caller out
	} else {
		p.waiting.Add(-1)
	}
	p.counters.waits.Add(1)
	p.counters.waitNanos.Add(max(0, p.cfg.clock.Now()-start))
	return s, err
}

// enqueue counts the caller among the waiters, or refuses it with
// ErrSaturated when WithMaxWaiters' bound is reached. A refused caller is
// never counted, not even for an instant: counting it and taking it back
// would refuse a caller arriving in between, with nobody else waiting.
func (p *Pool[T]) enqueue() error {
	bound := int64(p.cfg.maxWaiters)
	if bound < 0 {
		p.waiting.Add(1)
		return nil
	}
	for {
		n := p.waiting.Load()
		if n >= bound {
			if testHookSaturated != nil {
				testHookSaturated()
			}
			p.counters.saturated.Add(1)
			return fmt.Errorf("%w (limit %d)", ErrSaturated, bound)
		}
		if p.waiting.CompareAndSwap(n, n+1) {
			return nil
		}
	}
}

// checkout turns possession of s into a lease, or returns an error having
// put s back (or retired it, after Close). The caller holds s.
func (p *Pool[T]) checkout(ctx context.Context, s *slot[T]) (Lease[T], error) {
	if p.closed.Load() {
		p.retire(s)
		return Lease[T]{}, ErrClosed
	}
	if s.live && p.checks {
		if err := p.vet(ctx, s); err != nil {
			return Lease[T]{}, err
		}
	}
	if !s.live {
		if err := p.fill(ctx, s); err != nil {
			return Lease[T]{}, err
		}
	}
	return Lease[T]{s: s, gen: s.gen.Add(1)}, nil
}

// vet destroys the idle resource in s if it expired or fails validation.
// It returns an error, having put s back with its resource, only when
// validation failed because ctx ended.
func (p *Pool[T]) vet(ctx context.Context, s *slot[T]) error {
	now := p.cfg.clock.Now()
	switch {
	case p.cfg.maxLifetime > 0 && now >= s.expires:
		p.destroyValue(s, reasonLifetime, p.put)
	case p.cfg.maxIdle > 0 && now-s.lastUsed >= p.cfg.maxIdle:
		p.destroyValue(s, reasonIdle, p.put)
	case p.cfg.validate != nil && (p.cfg.validateAfter == 0 || now-s.lastUsed >= p.cfg.validateAfter):
		if err := p.callValidate(ctx, s); err != nil {
			// Only a validation ended by ctx keeps the resource; a real
			// failure destroys it even if ctx has ended meanwhile.
			if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
				p.put(s)
				p.counters.cancelled.Add(1)
				return ctxErr
			}
			p.destroyValue(s, reasonValidation, p.put)
		}
	}
	return nil
}

// callValidate runs the validate hook; if it panics, s goes back to the pool
// with its resource before the panic continues, so that no slot is lost.
func (p *Pool[T]) callValidate(ctx context.Context, s *slot[T]) error {
	ok := false
	defer func() {
		if !ok {
			p.put(s)
		}
	}()
	err := p.cfg.validate(ctx, s.value)
	ok = true
	return err
}

// fill creates a resource in the empty slot s. On error it has put s back.
func (p *Pool[T]) fill(ctx context.Context, s *slot[T]) error {
	v, err := p.callCreate(ctx, s)
	if err != nil {
		p.counters.createErrors.Add(1)
		p.put(s)
		if ctxErr := ctx.Err(); ctxErr != nil {
			p.counters.cancelled.Add(1)
			return ctxErr
		}
		return fmt.Errorf("chanpool: create: %w", err)
	}
	seq := p.counters.created.Add(1)
	p.alive.Add(1)
	s.value, s.live = v, true
	if p.checks {
		now := p.cfg.clock.Now()
		s.lastUsed = now
		if p.cfg.maxLifetime > 0 {
			// Saturating: a huge lifetime on a clock that reads large
			// values means "never", not an overflow into the past.
			life := p.cfg.maxLifetime - lifetimeJitter(seq, p.cfg.maxLifetime)
			s.expires = math.MaxInt64
			if now < math.MaxInt64-life {
				s.expires = now + life
			}
		}
	}
	if err := ctx.Err(); err != nil {
		// The caller gave up, but the resource is good: keep it idle.
		p.put(s)
		p.counters.cancelled.Add(1)
		return err
	}
	if p.closed.Load() {
		p.retire(s)
		return ErrClosed
	}
	return nil
}

// callCreate runs create, counting it in Stats.Creating; if create panics, s
// goes back to the pool and the failure is counted in Stats.CreateErrors
// before the panic continues.
func (p *Pool[T]) callCreate(ctx context.Context, s *slot[T]) (v T, err error) {
	p.creating.Add(1)
	ok := false
	defer func() {
		p.creating.Add(-1)
		if !ok {
			p.counters.createErrors.Add(1)
			p.put(s)
		}
	}()
	v, err = p.create(ctx)
	ok = true
	return v, err
}

// lifetimeJitter returns how much earlier than maxLifetime the resource with
// creation sequence number seq expires: a value in [0, maxLifetime/10),
// from a splitmix64 hash of seq, so that consecutive resources are spread
// over the whole range.
func lifetimeJitter(seq uint64, maxLifetime int64) int64 {
	span := maxLifetime / 10
	if span <= 0 {
		return 0
	}
	z := seq + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return int64(z % uint64(span))
}

// put returns the held slot s to the channel, or retires it if the pool is
// closed. The send never blocks: the channel has room for every slot and s
// is not in it. See Pool.closed for why closed is read on both sides of the
// send.
func (p *Pool[T]) put(s *slot[T]) {
	if p.closed.Load() {
		p.retire(s)
		return
	}
	if testHookBeforeSend != nil {
		testHookBeforeSend()
	}
	s.handed = p.serveWaiter()
	p.ch <- s
	if p.closed.Load() {
		p.drain()
	}
}

// serveWaiter counts one waiter out, if any is counted, for the slot about
// to be sent, and reports whether it did.
//
// With a caller blocked in wait, the send hands the slot to it directly,
// but that caller runs, and would count itself out, only when it is
// scheduled again: on another processor, microseconds later. Until then a
// caller finding the pool exhausted saw it still waiting and, at
// WithMaxWaiters' bound, was refused with nobody left unserved (a pool of
// one with a bound of one, used by two goroutines, refused thousands of
// times). So the sender counts it out. The slot's handed flag tells its
// receiver: a waiter receiving it must not count itself out again; anyone
// else receiving it (the counted caller had not yet blocked, and a caller
// on the fast path took the slot from the buffer) counts that waiter back
// in (took). So waiting always equals the callers in wait less the handed
// slots not yet received: it can read -1 for a moment, when such a caller
// gives up before the slot is taken.
func (p *Pool[T]) serveWaiter() bool {
	for n := p.waiting.Load(); n > 0; n = p.waiting.Load() {
		if p.waiting.CompareAndSwap(n, n-1) {
			return true
		}
	}
	return false
}

// took is called by every receiver of a slot other than wait: if the
// slot's sender counted a waiter out for it (serveWaiter), that waiter did
// not get it and is counted back in. The caller holds s.
func (p *Pool[T]) took(s *slot[T]) {
	if s.handed {
		s.handed = false
		p.waiting.Add(1)
	}
}

// testHookBeforeSend, when set by a test before the pool is used, runs in
// put between the first read of closed and the send: where a concurrent
// Close can start and finish unseen.
var testHookBeforeSend func()

// testHookReceived, when set by a test before the pool is used, runs in
// wait when a slot was received, before the waiter counts itself out: as
// if the waiter, woken on another processor, had not run yet.
var testHookReceived func()

// testHookSaturated, when set by a test before the pool is used, runs when
// a caller is refused with ErrSaturated, before it returns.
var testHookSaturated func()

// drain retires every slot in the channel. Only called once closed is set,
// so no slot enters the channel afterwards without its sender draining too.
func (p *Pool[T]) drain() {
	for {
		select {
		case s := <-p.ch:
			p.took(s)
			p.retire(s)
		default:
			return
		}
	}
}

// retire withdraws the held slot s for good after Close, destroying its
// resource, and closes done when it is the last slot. The slot is counted as
// retired even if the destroy hook panics, so that Close still completes.
func (p *Pool[T]) retire(s *slot[T]) {
	defer func() {
		if p.retired.Add(1) == p.capacity {
			close(p.done)
		}
	}()
	if s.live {
		p.destroyValue(s, reasonClosed, nil)
	}
}

// destroyValue destroys the resource in the held slot s. If the destroy
// hook panics, onPanic (if not nil) hands the now empty slot back before the
// panic continues, so that a panicking hook loses no slot.
func (p *Pool[T]) destroyValue(s *slot[T], reason int, onPanic func(*slot[T])) {
	v := s.value
	var zero T
	s.value, s.live = zero, false // let the GC have it
	p.alive.Add(-1)
	p.counters.destroyed[reason].Add(1)
	if p.cfg.destroy == nil {
		return
	}
	ok := false
	defer func() {
		if !ok && onPanic != nil {
			onPanic(s)
		}
	}()
	p.cfg.destroy(v)
	ok = true
}

// Close closes the pool: Acquire and TryAcquire fail with ErrClosed from
// now on (an Acquire whose ctx has already ended returns ctx.Err() first,
// as always), callers waiting in Acquire return ErrClosed, idle resources are
// destroyed at once and leased ones when they are released or destroyed.
// Close then waits until every lease has ended, or ctx ends, in which case
// it returns an error wrapping ctx.Err() that says how many slots are still
// in use (leased, or in the middle of a checkout); their resources are still
// destroyed when they come back, and a later Close
// waits again. Close is idempotent and safe to call concurrently with any
// method, Release included, but not from the pool's own hooks (create,
// validate, destroy): a hook runs while its slot is in use, so a Close in
// it waits for itself (until ctx ends).
func (p *Pool[T]) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		close(p.closing)
		if n := p.unborn.Swap(0); n > 0 && p.retired.Add(n) == p.capacity {
			close(p.done)
		}
	})
	p.drain()
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		select {
		case <-p.done:
			return nil
		default:
		}
		out := p.capacity - p.retired.Load()
		return fmt.Errorf("chanpool: close: %d slot(s) still in use (leased or being checked out): %w", out, ctx.Err())
	}
}
