package chanpool

import (
	"context"
	"fmt"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/internal/nilness"
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

// WithValidateAfter skips validation of a resource created or released less
// than d ago,
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
//
// A waiter stops counting when a Release hands it a resource, not when it
// runs again. One race loosens the bound: a resource released for a caller
// that has just counted itself a waiter but has not yet blocked sits in the
// pool for an instant, and a caller arriving on the fast path then can take
// it; the robbed waiter counts again, and those admitted to wait in that
// instant stay. So up to the pool's capacity more than n callers may wait,
// for as long as such leases are held. (Counting a waiter until it ran
// again kept n exact but refused callers with nobody else waiting: a pool
// of one with a bound of one, used by two goroutines, refused thousands of
// times a second.)
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
// statistics. Tests pass a fake clock. A nil clk is a configuration error,
// and so is a clk that holds a nil pointer (or func, map, slice or channel:
// var clk *myClock).
func WithClock[T any](clk admit.Clock) Option[T] {
	return func(c *config[T]) {
		if clk == nil {
			c.fail("WithClock(nil)")
			return
		}
		if nilness.Is(clk) {
			c.fail("WithClock(%T(nil))", clk)
			return
		}
		c.clock = clk
	}
}
