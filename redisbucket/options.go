package redisbucket

import (
	"fmt"
	"strings"
	"time"

	"github.com/admit-go/admit"
)

// DefaultTimeout bounds each decision when WithTimeout is not given.
const DefaultTimeout = 100 * time.Millisecond

// DefaultPrefix names the keys when WithPrefix is not given: key k is
// stored as "admit|k".
const DefaultPrefix = "admit"

// Separator joins the prefix and the key in a Redis key's name. A prefix
// may not contain it, so the name splits one way only: "rl" and "api:x" is
// "rl|api:x", which no other prefix and key give.
const Separator = "|"

// Option configures a Limiter in New.
type Option func(*config)

type config struct {
	prefix   string
	timeout  time.Duration
	open     bool
	fallback admit.KeyedLimiter
	batchN   int64
	batchAge time.Duration
	eviction bool // WithEvictionAccepted
	err      error
}

func (c *config) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// WithPrefix sets the name that the Limiter's keys are stored under
// (default DefaultPrefix): key k is the Redis key prefix + Separator + k.
// Limiters that share a prefix share their buckets, per (key, limit Name).
// Their own limits (New, NewLimits) must agree on each Name's capacity and
// rate: AllowN on a key that holds one of its Names with other parameters
// is denied with an error wrapping admit.ErrInvalidConfig, and writes
// nothing. AllowLimits carries the balance over instead (see the package
// doc). A prefix containing Separator is rejected, and so is one
// containing '{' or '}': it would be read as a Cluster hash tag and put
// every key in one slot.
func WithPrefix(p string) Option {
	return func(c *config) {
		if strings.ContainsAny(p, "{}") {
			c.fail(fmt.Errorf("%w: prefix %q contains a hash-tag brace", admit.ErrInvalidConfig, p))
			return
		}
		if strings.Contains(p, Separator) {
			c.fail(fmt.Errorf("%w: prefix %q contains the separator %q", admit.ErrInvalidConfig, p, Separator))
			return
		}
		c.prefix = p
	}
}

// WithTimeout bounds each decision, the round trip and any wait for a pooled
// connection included (default DefaultTimeout). It must be positive. Each
// request to Redis is bounded by it alone: a caller whose context ends
// sooner gets ctx.Err() at its deadline while its request runs on, on a
// goroutine of its own, to the timeout, so that its outcome still tells
// whether Redis answers. A caller that is cancelled (no earlier deadline)
// gets ctx.Err() when its request ends, at the latest at the timeout; a wait
// for a pooled connection or a dial may end up to a sixteenth of the timeout
// before it, since requests that start close together share one timer.
// While Redis fails, at most one decision per timeout probes it; the rest
// are decided by the failure policy at once.
func WithTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail(fmt.Errorf("%w: timeout %v is not positive", admit.ErrInvalidConfig, d))
			return
		}
		c.timeout = d
	}
}

// WithFailOpen admits every request Redis cannot decide. The default is to
// fail closed: such requests are denied. Either way AllowN returns an error
// wrapping admit.ErrUnavailable and the cause.
func WithFailOpen() Option {
	return func(c *config) { c.open = true }
}

// WithFallback decides requests Redis cannot decide with k, typically an
// in-process keyed limiter sized for one replica's share of the limit. For
// AllowLimits, a k that is an admit.PolicyLimiter (a *keyed.Limiter is),
// and wraps only PolicyLimiters as far as its Unwrap methods tell (an
// admitotel.Limiter has one), is asked AllowLimits with the call's limits;
// any other k decides with its own AllowN. AllowN always asks k's AllowN, so a fallback for a NewLimits
// limiter should itself hold the limits (keyed.NewLimits), scaled to one
// replica's share.
func WithFallback(k admit.KeyedLimiter) Option {
	return func(c *config) {
		if k == nil {
			c.fail(fmt.Errorf("%w: WithFallback(nil)", admit.ErrInvalidConfig))
			return
		}
		c.fallback = k
	}
}

// WithBatch turns on local batching for hot keys: a decision that goes to
// Redis takes up to n tokens (at least the request's), and this process
// spends the surplus locally for at most maxAge after sending the request,
// when the rest is dropped. A denial is remembered the same way, for
// requests at least as large, until its RetryAfter (at most maxAge): that is
// exact, since no client can make tokens appear sooner; its RetryAfter is
// the server's, counted down. Remaining and
// ResetAfter are then as of the latest round trip. A caller waits for at
// most one round trip in flight on its key, and all it does stays within
// WithTimeout. A round trip's tokens belong to the key: a caller that stops
// waiting first (its context ends) leaves them, when the reply comes, to
// the callers after it. The bound per key then becomes
// capacity + rate·(T + maxAge) over any span T, since tokens taken from the
// server up to maxAge before the span may be spent inside it; surplus that
// ages out is lost (under-admission, never over). n must be at least 2 and
// maxAge positive.
//
// Under several limits (NewLimits) batching works the same: a round trip
// takes the same number of tokens, up to n (capped at the smallest
// capacity), from every limit, all or nothing, and the bound above holds
// for each limit with its own capacity and rate. AllowLimits is never
// batched (a lease belongs to the limiter's own limits, not to limits a
// later call may choose differently): each call is one round trip.
func WithBatch(n int64, maxAge time.Duration) Option {
	return func(c *config) {
		if n < 2 || maxAge <= 0 {
			c.fail(fmt.Errorf("%w: WithBatch(%d, %v): n must be at least 2 and maxAge positive", admit.ErrInvalidConfig, n, maxAge))
			return
		}
		c.batchN, c.batchAge = n, maxAge
	}
}

// WithEvictionAccepted lets New use a Redis whose maxmemory-policy may
// evict keys (anything but noeviction: volatile-lru, a common managed
// default, or allkeys-lru, say), which New otherwise refuses, and skips the
// check, so New makes no round trip. Under memory pressure such a Redis
// deletes buckets, and a deleted bucket reads as a full one: a drained key
// admits up to a whole capacity again, with no error and whatever the
// failure policy. Accept that only where Redis cannot run short of memory
// (maxmemory well above what the keys need) or over-admission under memory
// pressure is acceptable; noeviction is the safe setting.
func WithEvictionAccepted() Option {
	return func(c *config) { c.eviction = true }
}
