package adaptive

import (
	"fmt"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/internal/nilness"
)

// Default configuration. The limit bounds are wide on purpose: a floor of 1
// lets the limiter shed down to a backend that serves one call at a time
// (a default floor of 20, as in some libraries, cannot protect a backend
// whose real concurrency is 2), and the ceiling only bounds how far an
// idle limiter can grow.
const (
	DefaultMinLimit     = 1
	DefaultMaxLimit     = 1000
	DefaultInitialLimit = 20
	// MaxLimitBound is the largest limit and the largest backlog New
	// accepts.
	MaxLimitBound = 1 << 20
)

// Option configures a Limiter at construction.
type Option func(*config)

type config struct {
	clock      admit.Clock
	minLimit   int
	maxLimit   int
	initial    int
	initialSet bool
	backlog    int
	maxWait    time.Duration
	alg        Algorithm
	minSamples int
	err        error
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: adaptive: "+format, append([]any{admit.ErrInvalidConfig}, args...)...)
	}
}

// WithClock makes the limiter read every time it uses (a permit's start and
// end, its update windows, a waiter's bound) from c instead of the system's
// monotonic clock. The overload simulator in the tests drives it on virtual
// time this way. A nil c is a configuration error, and so is a c that holds
// a nil pointer (or func, map, slice or channel: var c *myClock).
func WithClock(c admit.Clock) Option {
	return func(cfg *config) {
		if c == nil {
			cfg.fail("WithClock(nil)")
			return
		}
		if nilness.Is(c) {
			cfg.fail("WithClock(%T(nil))", c)
			return
		}
		cfg.clock = c
	}
}

// WithLimitBounds bounds the limit the algorithm may choose to [min, max].
// The defaults are DefaultMinLimit and DefaultMaxLimit. min below 1, max
// below min, or max above MaxLimitBound is a configuration error.
func WithLimitBounds(min, max int) Option {
	return func(cfg *config) {
		if min < 1 || max < min || max > MaxLimitBound {
			cfg.fail("WithLimitBounds(%d, %d): want 1 <= min <= max <= %d", min, max, MaxLimitBound)
			return
		}
		cfg.minLimit, cfg.maxLimit = min, max
	}
}

// WithInitialLimit sets the limit before the first update, DefaultInitialLimit
// by default (clamped to the bounds). A value outside the bounds (checked
// once every option is applied) is a configuration error.
func WithInitialLimit(n int) Option {
	return func(cfg *config) {
		if n < 1 || n > MaxLimitBound {
			cfg.fail("WithInitialLimit(%d): want 1 <= n <= %d", n, MaxLimitBound)
			return
		}
		cfg.initial, cfg.initialSet = n, true
	}
}

// WithBacklog lets up to n callers wait for a permit, each for at most
// maxWait, instead of being shed at once when every permit is taken. A
// waiter never waits past its context either: when ctx ends first, Acquire
// returns ctx.Err() unchanged. Waiters are served highest priority first and
// in arrival order within a priority, and a caller that finds the backlog
// full takes the place of the waiter of the lowest priority below its own
// that would be served last, the newest (that waiter is shed); with nobody
// below it, it is shed itself.
//
// Keep maxWait well below the callers' deadlines (the simulation's targets
// use 40% of it): a call that waited nearly all of its time is abandoned
// once admitted. If most of an update window's loss comes from permits
// handed out of the backlog (the waits are eating the callers' time), the
// backlog serves the newest waiter of each priority first until it empties
// (and a full backlog then sheds the oldest of the lowest priority):
// served oldest first, every waiter would get its permit just before its
// deadline, every call would be dropped, and the drops would cut the limit,
// lengthening the waits (in the simulator, with maxWait at or above a 1 s
// deadline at 3× load, goodput fell to 0 for good; now it stays at the
// capacity, TestBacklogWaitPastDeadline).
//
// WithBacklog(0, 0), the default, sheds at once. n above MaxLimitBound, a
// negative n or maxWait, or n > 0 with maxWait 0 is a configuration error.
func WithBacklog(n int, maxWait time.Duration) Option {
	return func(cfg *config) {
		switch {
		case n < 0 || n > MaxLimitBound:
			cfg.fail("WithBacklog(%d, %v): n out of [0, %d]", n, maxWait, MaxLimitBound)
			return
		case maxWait < 0:
			cfg.fail("WithBacklog(%d, %v): negative maxWait", n, maxWait)
			return
		case n > 0 && maxWait == 0:
			cfg.fail("WithBacklog(%d, 0): a backlog needs a positive maxWait", n)
			return
		case n == 0 && maxWait != 0:
			cfg.fail("WithBacklog(0, %v): maxWait without a backlog", maxWait)
			return
		}
		cfg.backlog, cfg.maxWait = n, maxWait
	}
}

// WithAlgorithm chooses how the limit is learned: Gradient (the default),
// Vegas or AIMD. A zero Algorithm is a configuration error.
func WithAlgorithm(a Algorithm) Option {
	return func(cfg *config) {
		if a.kind == 0 {
			cfg.fail("WithAlgorithm(Algorithm{}): use Gradient(), Vegas() or AIMD()")
			return
		}
		cfg.alg = a
	}
}

// WithMinSamples sets the outcomes (successes of permits taken since the
// limit last changed, drops of those taken since it was last cut) an update
// window gathers, 40 by default:
// a window closes with max(n, 2·limit, 5) of them, about two round trips when
// the limiter is saturated; sooner, when the limit bound, with eight round
// trips' worth and at least a quarter of n; or at n drops (two at least).
// n below 1 or above 1<<20 is a configuration error.
func WithMinSamples(n int) Option {
	return func(cfg *config) {
		if n < 1 || n > 1<<20 {
			cfg.fail("WithMinSamples(%d): want 1 <= n <= %d", n, 1<<20)
			return
		}
		cfg.minSamples = n
	}
}

func newConfig(opts []Option) (config, error) {
	cfg := config{
		minLimit:   DefaultMinLimit,
		maxLimit:   DefaultMaxLimit,
		initial:    DefaultInitialLimit,
		minSamples: 40,
		alg:        Gradient(),
	}
	for i, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("%w: adaptive: option %d is nil", admit.ErrInvalidConfig, i)
		}
		o(&cfg)
		if cfg.err != nil {
			return config{}, cfg.err
		}
	}
	if cfg.initialSet {
		if cfg.initial < cfg.minLimit || cfg.initial > cfg.maxLimit {
			return config{}, fmt.Errorf("%w: adaptive: WithInitialLimit(%d) outside the bounds [%d, %d]",
				admit.ErrInvalidConfig, cfg.initial, cfg.minLimit, cfg.maxLimit)
		}
	} else {
		cfg.initial = max(cfg.minLimit, min(cfg.maxLimit, cfg.initial))
	}
	if cfg.clock == nil {
		cfg.clock = admit.SystemClock()
	}
	return cfg, nil
}
