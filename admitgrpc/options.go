package admitgrpc

import (
	"context"
	"fmt"

	"github.com/admit-go/admit"
)

// Option configures UnaryServerInterceptor and StreamServerInterceptor.
type Option func(*config)

type config struct {
	key      func(ctx context.Context, fullMethod string) (string, error)
	cost     func(ctx context.Context, fullMethod string) int64
	limits   func(ctx context.Context, fullMethod string) ([]admit.Limit, error)
	name     string
	failOpen bool
	err      error
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("admitgrpc: "+format, args...)
	}
}

// WithKey sets the function that names a call's client; the default is
// KeyByPeer(). An error from f is answered with codes.InvalidArgument (or
// codes.PermissionDenied if it wraps admit.ErrUnknownClient), whose message
// carries the error's text (so it must name no credential: a digest of a
// presented API key, not the key), and the handler is not called. It is not
// called for a call that WithLimits' function exempts. fullMethod is
// "/package.Service/Method".
func WithKey(f func(ctx context.Context, fullMethod string) (string, error)) Option {
	return func(c *config) {
		if f == nil {
			c.fail("WithKey(nil)")
		}
		c.key = f
	}
}

// WithCost sets the number of tokens a call consumes; the default is 1. A
// cost of 0 admits without consuming and reports the key's state; a
// negative cost is answered with codes.Internal (a bug in the server, not
// the client).
func WithCost(f func(ctx context.Context, fullMethod string) int64) Option {
	return func(c *config) {
		if f == nil {
			c.fail("WithCost(nil)")
		}
		c.cost = f
	}
}

// WithLimits sets the function that chooses a call's limits (a tier from an
// API key, a claim, the method), decided all or nothing through the
// limiter's AllowLimits; the limiter must be an admit.PolicyLimiter, or the
// interceptor constructors panic. The ratelimit-policy header lists every
// limit (the Name of each, or WithPolicyName's name for an unnamed one), and
// ratelimit names the deciding one. f runs before the key and cost
// functions: a call it returns no limits for goes through unlimited, with
// no key needed and no headers (health checks, internal methods). An error
// from it is answered like a key function's, codes.InvalidArgument, or
// codes.PermissionDenied if it wraps admit.ErrUnknownClient, its text in the
// status message. The rendered headers of the last 8 distinct lists it
// returned are kept, so a handful of tiers cost no more per call than one
// limit; return the same slices (package-level tiers) or equal ones.
func WithLimits(f func(ctx context.Context, fullMethod string) ([]admit.Limit, error)) Option {
	return func(c *config) {
		if f == nil {
			c.fail("WithLimits(nil)")
		}
		c.limits = f
	}
}

// WithPolicyName sets the policy name the ratelimit headers and the
// QuotaFailure carry for a limiter's own limit, and for an unnamed limit
// under WithLimits; the default is "default". It must be a valid
// admit.Limit Name: printable ASCII (a Structured Field String), at most
// 128 bytes.
func WithPolicyName(name string) Option {
	return func(c *config) {
		if err := (admit.Limit{Name: name, Capacity: 1}).Validate(); err != nil {
			c.fail("WithPolicyName: %v", err)
			return
		}
		c.name = name
	}
}

// WithFailOpen makes a limiter error that comes without a decision serve
// the call unlimited instead of answering codes.Unavailable. Fail open when
// an outage of the limiter's backend must not become an outage of the
// service; stay closed (the default) when the limit protects something that
// would fall over without it. A decision that the limiter's own failure
// policy made (redisbucket's WithFallback or WithFailOpen) is followed
// either way.
func WithFailOpen() Option {
	return func(c *config) { c.failOpen = true }
}
