package admithttp

import (
	"net/http"

	"github.com/admit-go/admit"
)

// WithLimits sets the function that chooses a request's limits: a tier
// from an API key, a token's claim. The middleware then decides each
// request with the limiter's AllowLimits under those limits, all or
// nothing, so the limiter must be an admit.PolicyLimiter (keyed,
// redisbucket); Middleware panics if it is not.
//
// f's limits are the request's whole policy: the limiter's own configured
// limits, if any, do not apply. No limits (nil or empty, nil error) serves
// the request unlimited, with no RateLimit fields and no limiter call: a
// health check, an internal route. An error from f is answered with 400
// Bad Request (the request does not say which limits apply, as a missing
// key does not say who sent it), or with 403 Forbidden if it wraps
// admit.ErrUnknownClient (an API key the server does not know: refused
// before it can become a bucket), and passed to the WithOnError function;
// to fall back to a default tier instead, return that tier. Limits that fail
// admit.ValidateLimits are a bug in the server: 500 Internal Server Error,
// nothing consumed, the error passed to WithOnError.
//
// Choose the tier from what authenticates the client (the API key looked
// up in your accounts, a verified token's claim, a header your
// authenticating proxy sets and strips from client requests), never from a
// header any client can write. A 401 with its WWW-Authenticate challenge
// is the job of an authentication middleware in front of this one, which
// can hand the verified client on in the request's context for f and the
// key function to read (docs/per-client.md shows one).
//
// f runs before the key and cost functions, on the request's goroutine,
// concurrently with other requests. It may return the same slice to many
// requests (a package-level tier, say): the middleware never writes to it.
// The RateLimit-Policy values of the last 8 distinct lists it returned
// are kept, so a handful of tiers cost no allocation per request beyond
// one limit's.
func WithLimits(f func(*http.Request) ([]admit.Limit, error)) Option {
	return func(c *config) {
		if f == nil {
			c.fail("WithLimits(nil)")
		}
		c.limits = f
	}
}

// WithSkip sets a function that exempts a request from limiting, whatever
// the limiter: when f returns true the next handler runs at once, with no
// key, cost or limits function called, no limiter call and no RateLimit
// fields. f runs first, on the request's goroutine, concurrently with other
// requests.
func WithSkip(f func(*http.Request) bool) Option {
	return func(c *config) {
		if f == nil {
			c.fail("WithSkip(nil)")
		}
		c.skip = f
	}
}

// LimitLister is an optional interface of an admit.KeyedLimiter: Limits
// returns the limits its AllowN applies to every key, in order (a
// keyed.Limiter from keyed.NewLimits, or a redisbucket.Limiter, say).
// Middleware reads it once, when WithLimits is not given, from the limiter
// or the nearest down its Unwrap chain, as it looks for a Refiller: with two or more limits the RateLimit-Policy
// field lists them all and RateLimit names the one that decided
// (Decision.Policy); with one, a limit with a Name gives the fields that
// name in place of WithPolicyName's, and its Capacity ÷ Rate gives w when
// neither WithFillTime nor a Refiller says.
type LimitLister interface {
	Limits() []admit.Limit
}
