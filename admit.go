package admit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/admit-go/admit/internal/nilness"
)

// Limiter is the contract every token bucket in this module satisfies
// (mutexbucket, casbucket, shardedbucket and gcra), and the other
// algorithms too (fixedwindow, slidinglog, slidingwindow, leakybucket), where
// "tokens" reads as what the algorithm would admit and each documents its
// own bound. Switching one constructor for another changes nothing else in
// the calling code.
//
// All methods are safe for concurrent use.
type Limiter interface {
	// TryAcquire consumes one token if one is available now and reports
	// whether it did. It never blocks.
	TryAcquire() bool
	// TryAcquireN consumes n tokens if all n are available now and reports
	// whether it did; it consumes nothing otherwise. TryAcquireN(0) is true
	// and consumes nothing; n < 0 and n > capacity are false.
	TryAcquireN(n int64) bool
	// Acquire is the blocking form of TryAcquire: AcquireN(ctx, 1).
	Acquire(ctx context.Context) error
	// AcquireN blocks until n tokens are consumed or ctx ends. It returns an
	// error wrapping ErrUnsatisfiable at once if n can never be satisfied,
	// an error wrapping ErrDeadline at once if ctx's deadline comes before
	// the earliest possible admission, and ctx.Err() unchanged if ctx ends
	// while it waits (a ctx that ends only after the tokens came due loses
	// the race: AcquireN returns nil). Blocked callers are admitted in
	// arrival order.
	//
	// A caller that must wait reserves its n tokens when it starts waiting
	// and counts as admitted at the instant they come due. If it gives up
	// before then (it returns an error), its tokens go back to the bucket
	// only if no later waiter has reserved after it, because later waiters
	// keep the wake times they were given: handing the same tokens out again
	// while they sleep would admit more than capacity + rate × elapsed. A
	// cancelled reservation with later ones behind it is forfeited, as in
	// golang.org/x/time/rate, and only then does an error return leave the
	// bucket with fewer tokens than before the call.
	AcquireN(ctx context.Context, n int64) error
	// Tokens reports the balance at this instant, for observability only:
	// by the time it returns, other callers may have changed it. It is
	// never rounded up: a balance short of n tokens, by however little,
	// reads below n.
	Tokens() float64
}

// Clock is a monotonic time source. Limiters read it on every call; tests
// inject a fake one with WithClock.
type Clock interface {
	// Now returns nanoseconds from an arbitrary fixed origin. Readings
	// should not decrease; a limiter ignores any that do (it adds no tokens
	// for them and never moves its own notion of time back).
	Now() int64
	// Sleep pauses the caller for d, or until ctx ends, in which case it
	// returns ctx.Err(). It returns nil at once for d <= 0 when ctx has not
	// ended.
	Sleep(ctx context.Context, d time.Duration) error
}

// Sentinel errors. Errors returned by this module wrap one of these with the
// offending value; test for them with errors.Is.
var (
	// ErrInvalidConfig is wrapped by every constructor error: a capacity
	// below 1, a rate that is negative, NaN or infinite, an option value
	// out of range, or any value the implementation cannot represent
	// exactly.
	ErrInvalidConfig = errors.New("admit: invalid configuration")
	// ErrUnsatisfiable is wrapped when a blocking request can never
	// succeed: n above the capacity, n negative, or a zero rate with too
	// few tokens left.
	ErrUnsatisfiable = errors.New("admit: request can never be satisfied")
	// ErrDeadline is wrapped when a context's deadline comes before the
	// earliest moment the request could be admitted. Such errors also
	// satisfy errors.Is(err, context.DeadlineExceeded).
	ErrDeadline = errors.New("admit: context deadline comes before the earliest admission")
	// ErrUnavailable is wrapped, with the cause, when a backend could not
	// decide (a Redis error or timeout, say). The Decision returned with it
	// says what the backend's failure policy chose.
	ErrUnavailable = errors.New("admit: limiter backend unavailable")
	// ErrQueueFull is wrapped when a limiter that bounds how many callers
	// may wait (leakybucket) already has that many waiting: the request is
	// rejected at once instead of queued.
	ErrQueueFull = errors.New("admit: too many callers already waiting")
	// ErrOverloaded is wrapped when an adaptive concurrency limiter sheds a
	// call: every permit of its current limit is taken and the call may not
	// wait (no backlog, a full backlog that holds nobody of lower priority,
	// or a wait that reached its bound). The error names the limit and the
	// calls in flight at the decision.
	ErrOverloaded = errors.New("admit: overloaded, call shed")
	// ErrUnknownClient is for the key and limits functions of admithttp
	// and admitgrpc to wrap when a request names a client the server knows
	// it does not serve (an unknown or revoked API key), as apart from a
	// request that does not say who sent it: admithttp answers it 403
	// Forbidden rather than 400 Bad Request, admitgrpc
	// codes.PermissionDenied rather than codes.InvalidArgument. No limiter
	// returns it.
	ErrUnknownClient = errors.New("admit: unknown client")
)

// Decision is the outcome of one keyed admission. Under several limits
// (PolicyLimiter) Policy, Limit and Remaining describe the deciding limit, as
// PolicyLimiter's rule 4 says.
type Decision struct {
	Allowed    bool
	Limit      int64         // the deciding limit's capacity (burst)
	Remaining  int64         // whole tokens left after this decision
	RetryAfter time.Duration // when denied: until n tokens will exist; 0 when allowed
	ResetAfter time.Duration // until the bucket is full again; 0 when full
	Policy     string        // the deciding limit's Name; "" for a single unnamed limit
}

// KeyedLimiter admits requests against a separate bucket per key: the
// in-process keyed package and the Redis-backed redisbucket module implement
// it, and the admithttp middleware takes either.
//
// AllowN(ctx, key, 0) is a peek: it consumes nothing and reports the key's
// state. n < 0 or n above the capacity returns Allowed == false and an error
// wrapping ErrUnsatisfiable. A key never seen behaves as a full bucket.
// Implementations are safe for concurrent use.
//
// An error wrapping ErrUnavailable comes with the Decision the backend's
// failure policy chose: Allowed says whether the request may go ahead. Its
// numbers describe a bucket (a fallback limiter's, say) unless Remaining and
// ResetAfter are both 0, which no bucket reports, being empty and full at
// once: then the policy answered without any state, admitting (fail open)
// or refusing (fail closed) blind. A Decision with Limit 0 is no decision
// at all.
type KeyedLimiter interface {
	AllowN(ctx context.Context, key string, n int64) (Decision, error)
}

// Config holds what Options set. Users never build one; constructors in this
// module call NewConfig.
type Config struct {
	// Clock is the time source; nil means the system's monotonic clock.
	Clock Clock
	// Shards is read by shardedbucket and keyed (see their WithShards);
	// 0 means the package's default. Other limiters ignore it.
	Shards int
	// MaxKeys and KeyPolicy are read only by keyed (see keyed.WithMaxKeys
	// and keyed.WithPolicy); 0 means its default. Other limiters ignore
	// them.
	MaxKeys   int
	KeyPolicy int

	err error // first invalid option seen
}

// Option configures a limiter at construction.
type Option func(*Config)

// WithClock makes the limiter read time from c instead of the system's
// monotonic clock. A nil c is a configuration error, and so is a c that
// holds a nil pointer (or func, map, slice or channel: var c *myClock).
func WithClock(c Clock) Option {
	return func(cfg *Config) {
		if c == nil {
			cfg.fail(fmt.Errorf("%w: WithClock(nil)", ErrInvalidConfig))
			return
		}
		if nilness.Is(c) {
			cfg.fail(fmt.Errorf("%w: WithClock(%T(nil))", ErrInvalidConfig, c))
			return
		}
		cfg.Clock = c
	}
}

// NewConfig applies opts in order and returns the result, or an error
// wrapping ErrInvalidConfig for the first invalid option (a nil Option
// included). It is for implementations of Limiter.
func NewConfig(opts ...Option) (Config, error) {
	var cfg Config
	for i, o := range opts {
		if o == nil {
			return Config{}, fmt.Errorf("%w: option %d is nil", ErrInvalidConfig, i)
		}
		o(&cfg)
		if cfg.err != nil {
			return Config{}, cfg.err
		}
	}
	return cfg, nil
}

// Fail records err as the configuration error if none was recorded before.
// Package-specific options call it for values they reject; err should wrap
// ErrInvalidConfig.
func (c *Config) Fail(err error) { c.fail(err) }

func (c *Config) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// origin is the fixed point SystemClock counts from. time.Since on a Time
// that carries a monotonic reading reads only the monotonic clock, once.
var origin = time.Now()

type systemClock struct{}

// SystemClock returns the process's monotonic clock, the default Clock.
func SystemClock() Clock { return systemClock{} }

// Now returns monotonic nanoseconds since the package was initialised.
func (systemClock) Now() int64 { return int64(time.Since(origin)) }

// Sleep waits on a runtime timer; it never spins.
func (systemClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
