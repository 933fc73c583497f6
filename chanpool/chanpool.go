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
	"time"

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

// Option configures a Pool at construction. Options are applied in order; a
// later option overrides an earlier one of the same kind.
type Option[T any] func(*config[T])

type config[T any] struct {
	destroy       func(T)
	validate      func(context.Context, T) error
	validateAfter int64 // ns
	maxIdle       int64 // ns; 0 means no limit
	maxLifetime   int64 // ns; 0 means no limit
	maxWaiters    int   // -1 means no limit
	clock         admit.Clock
	err           error
}

func (c *config[T]) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: chanpool: "+format, append([]any{admit.ErrInvalidConfig}, args...)...)
	}
}

// WithDestroy sets the function that closes a resource the pool discards:
// one that failed validation or expired, one destroyed through
// Lease.Destroy, and every resource when the pool is closed. It is called
// exactly once per created resource, possibly concurrently for different
// resources, and must not panic. A nil f is a configuration error.
func WithDestroy[T any](f func(T)) Option[T] {
	return func(c *config[T]) {
		if f == nil {
			c.fail("WithDestroy(nil)")
			return
		}
		c.destroy = f
	}
}

// WithValidate sets a check run on an idle resource before it is handed
// out, with the acquiring caller's context (context.Background for
// TryAcquire). A resource for which f returns an error is destroyed and
// replaced by a new one; the caller never sees it. If f fails because the
// context ended, the resource is kept idle and Acquire returns ctx.Err().
// A freshly created resource is not validated. A nil f is a configuration
// error.
func WithValidate[T any](f func(context.Context, T) error) Option[T] {
	return func(c *config[T]) {
		if f == nil {
			c.fail("WithValidate(nil)")
			return
		}
		c.validate = f
	}
}

// WithValidateAfter skips validation of a resource released less than d ago,
// as HikariCP skips it for a connection used within the last 500 ms: a
// resource that was working a moment ago is very likely still working, and
// validation usually costs a round trip. The default, 0, validates on every
// checkout. It has no effect without WithValidate. A negative d is a
// configuration error.
func WithValidateAfter[T any](d time.Duration) Option[T] {
	return func(c *config[T]) {
		if d < 0 {
			c.fail("WithValidateAfter(%v): negative", d)
			return
		}
		c.validateAfter = int64(d)
	}
}

// WithMaxIdleTime destroys, at checkout, a resource that has been idle in
// the pool for d or longer (since it was created or last released), and
// creates a replacement. Without it resources never expire for idleness.
// A d <= 0 is a configuration error.
func WithMaxIdleTime[T any](d time.Duration) Option[T] {
	return func(c *config[T]) {
		if d <= 0 {
			c.fail("WithMaxIdleTime(%v): not positive", d)
			return
		}
		c.maxIdle = int64(d)
	}
}

// WithMaxLifetime destroys, at checkout, a resource created d or longer ago,
// and creates a replacement. So that resources created together do not all
// expire together, each resource's lifetime is shortened by a jitter in
// [0, d/10), derived deterministically from the resource's creation sequence
// number by a hash: no resource is ever handed out once older than d, and
// none expires younger than 0.9·d. A leased resource is never taken back;
// it expires at its next checkout. A d <= 0 is a configuration error.
func WithMaxLifetime[T any](d time.Duration) Option[T] {
	return func(c *config[T]) {
		if d <= 0 {
			c.fail("WithMaxLifetime(%v): not positive", d)
			return
		}
		c.maxLifetime = int64(d)
	}
}

// WithMaxWaiters bounds the number of Acquire calls that may wait at once
// for an exhausted pool. Beyond n, Acquire fails with an error wrapping
// ErrSaturated instead of queueing: load shedding rather than an unbounded
// queue. WithMaxWaiters(0) means never wait. By default the
// number of waiters is unbounded. A negative n is a configuration error.
func WithMaxWaiters[T any](n int) Option[T] {
	return func(c *config[T]) {
		if n < 0 {
			c.fail("WithMaxWaiters(%d): negative", n)
			return
		}
		c.maxWaiters = n
	}
}

// WithClock makes the pool read time from clk instead of the system's
// monotonic clock, for idle time, lifetime, validate-after and wait-time
// statistics. Tests pass a fake clock. A nil clk is a configuration error.
func WithClock[T any](clk admit.Clock) Option[T] {
	return func(c *config[T]) {
		if clk == nil {
			c.fail("WithClock(nil)")
			return
		}
		c.clock = clk
	}
}

// Destruction reasons, indexes into counters.destroyed.
const (
	reasonValidation = iota
	reasonIdle
	reasonLifetime
	reasonClosed
	reasonCaller
	numReasons
)

// slot is one permit of the pool together with the resource it may hold.
//
// Ownership: the plain fields below gen belong to whoever holds the slot,
// that is, the goroutine that received it from Pool.ch (or took it from the
// unborn count) until it sends it back or retires it, and the holder of the
// lease whose generation matches gen. The channel send and receive order
// every write by one holder before every read by the next.
type slot[T any] struct {
	p *Pool[T] // immutable

	// gen counts hand-outs and returns: odd while a lease is out, even
	// otherwise. A lease carries the odd value it was issued with; Release
	// and Destroy move gen from that value to the next with a CAS, so of
	// all copies of a lease, and of all stale leases for this slot, exactly
	// one call ever succeeds. gen only grows and is 64 bits, so a stale
	// lease's value never comes back.
	gen atomic.Uint64

	value    T
	live     bool  // value holds a resource that has not been destroyed
	lastUsed int64 // clock reading at creation or last Release, if stamped
	expires  int64 // clock reading at which the lifetime ends, if limited

	// Keeps two slots' gen words out of one cache line, so that leases on
	// different slots do not contend.
	_ [64]byte
}

// Pool is a bounded pool of resources of type T. It is safe for concurrent
// use. The zero value is not usable; create one with New. A Pool must not be
// copied after first use.
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

type counters struct {
	waits, waitNanos atomic.Int64
	cancelled        atomic.Uint64
	saturated        atomic.Uint64
	created          atomic.Uint64
	createErrors     atomic.Uint64
	destroyed        [numReasons]atomic.Uint64
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
	if n := p.waiting.Add(1); p.cfg.maxWaiters >= 0 && n > int64(p.cfg.maxWaiters) {
		p.waiting.Add(-1)
		p.counters.saturated.Add(1)
		return nil, fmt.Errorf("%w (limit %d)", ErrSaturated, p.cfg.maxWaiters)
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
	p.waiting.Add(-1)
	p.counters.waits.Add(1)
	p.counters.waitNanos.Add(max(0, p.cfg.clock.Now()-start))
	return s, err
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
	p.ch <- s
	if p.closed.Load() {
		p.drain()
	}
}

// testHookBeforeSend, when set by a test before the pool is used, runs in
// put between the first read of closed and the send: where a concurrent
// Close can start and finish unseen.
var testHookBeforeSend func()

// drain retires every slot in the channel. Only called once closed is set,
// so no slot enters the channel afterwards without its sender draining too.
func (p *Pool[T]) drain() {
	for {
		select {
		case s := <-p.ch:
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
// now on, callers waiting in Acquire return ErrClosed, idle resources are
// destroyed at once and leased ones when they are released or destroyed.
// Close then waits until every lease has ended, or ctx ends, in which case
// it returns an error wrapping ctx.Err() that says how many slots are still
// in use (leased, or in the middle of a checkout); their resources are still
// destroyed when they come back, and a later Close
// waits again. Close is idempotent and safe to call concurrently with any
// method, Release included.
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

// Stats is a snapshot of a pool's state and cumulative counters. The counts
// are read one after another while the pool keeps running, so they need not
// be mutually consistent at any single instant.
type Stats struct {
	Capacity int // the bound given to New
	Idle     int // resources in the pool, not leased
	InUse    int // leases outstanding
	Creating int // create calls in progress
	Waiting  int // Acquire calls blocked on an exhausted pool now

	Acquires          uint64        // leases handed out by Acquire and TryAcquire
	Waits             uint64        // Acquire calls that found the pool exhausted and waited
	WaitTime          time.Duration // total time those calls waited, by the pool's clock
	CancelledAcquires uint64        // Acquire calls that returned ctx.Err()
	SaturatedAcquires uint64        // Acquire calls refused with ErrSaturated

	Created      uint64 // successful create calls
	CreateErrors uint64 // failed create calls, panics included

	DestroyedValidation uint64 // resources that failed validation
	DestroyedIdle       uint64 // resources idle for WithMaxIdleTime or longer
	DestroyedLifetime   uint64 // resources past WithMaxLifetime
	DestroyedClosed     uint64 // resources destroyed by Close or released after it
	DestroyedCaller     uint64 // resources destroyed through Lease.Destroy
}

// Destroyed returns the number of resources destroyed for any reason.
func (s Stats) Destroyed() uint64 {
	return s.DestroyedValidation + s.DestroyedIdle + s.DestroyedLifetime + s.DestroyedClosed + s.DestroyedCaller
}

// Stats returns a snapshot of the pool's state and counters. It takes time
// proportional to the capacity and never blocks the pool.
func (p *Pool[T]) Stats() Stats {
	var inUse int
	var acquires uint64
	for i := range p.slots {
		g := p.slots[i].gen.Load()
		inUse += int(g & 1)
		acquires += (g + 1) / 2 // one hand-out per odd value reached
	}
	c := &p.counters
	st := Stats{
		Capacity:            int(p.capacity),
		InUse:               inUse,
		Creating:            int(p.creating.Load()),
		Waiting:             int(p.waiting.Load()),
		Acquires:            acquires,
		Waits:               uint64(c.waits.Load()),
		WaitTime:            time.Duration(c.waitNanos.Load()),
		CancelledAcquires:   c.cancelled.Load(),
		SaturatedAcquires:   c.saturated.Load(),
		Created:             c.created.Load(),
		CreateErrors:        c.createErrors.Load(),
		DestroyedValidation: c.destroyed[reasonValidation].Load(),
		DestroyedIdle:       c.destroyed[reasonIdle].Load(),
		DestroyedLifetime:   c.destroyed[reasonLifetime].Load(),
		DestroyedClosed:     c.destroyed[reasonClosed].Load(),
		DestroyedCaller:     c.destroyed[reasonCaller].Load(),
	}
	st.Idle = max(0, int(p.alive.Load())-inUse)
	return st
}

// Lease is the right to use one resource until Release or Destroy. It is a
// small value (a slot pointer and a generation) and costs no allocation.
// Copies of a lease refer to the same right: the first Release or Destroy
// through any copy ends it, and any later call through any copy panics.
// The zero Lease is not a lease; its methods panic. A Lease may be passed
// between goroutines, but its methods must not be called concurrently with
// each other.
type Lease[T any] struct {
	s   *slot[T]
	gen uint64
}

// Value returns the leased resource. It panics if the lease has ended.
func (l Lease[T]) Value() T {
	if l.s == nil || l.s.gen.Load() != l.gen {
		l.misuse("Value")
	}
	return l.s.value
}

// Release returns the resource to the pool, for the next waiting caller if
// there is one, or destroys it if the pool is closed. It panics, changing
// nothing, if the lease has already ended: released or destroyed twice, or
// through a stale copy whose slot has since been leased to someone else.
func (l Lease[T]) Release() {
	s := l.s
	if s == nil || !s.gen.CompareAndSwap(l.gen, l.gen+1) {
		l.misuse("Release")
	}
	// The CAS made this goroutine the slot's holder again.
	p := s.p
	if p.stamp {
		s.lastUsed = p.cfg.clock.Now()
	}
	p.put(s)
}

// Destroy destroys the resource instead of returning it, for one the caller
// found broken, and frees its slot: the next caller to get the slot creates
// a new resource. It panics, changing nothing, if the lease has already
// ended.
func (l Lease[T]) Destroy() {
	s := l.s
	if s == nil || !s.gen.CompareAndSwap(l.gen, l.gen+1) {
		l.misuse("Destroy")
	}
	p := s.p
	p.destroyValue(s, reasonCaller, p.put)
	p.put(s)
}

func (l Lease[T]) misuse(method string) {
	if l.s == nil {
		panic("chanpool: " + method + " called on the zero Lease")
	}
	if cur := l.s.gen.Load(); cur == l.gen+1 {
		panic("chanpool: " + method + " called on a Lease that was already released or destroyed")
	}
	panic("chanpool: " + method + " called on a stale Lease: it was released and its slot has since been leased again")
}
