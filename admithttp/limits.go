package admithttp

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/admit-go/admit"
)

// WithLimits sets the function that chooses a request's limits: a tier
// from an API key, a claim, a header. The middleware then decides each
// request with the limiter's AllowLimits under those limits, all or
// nothing, so the limiter must be an admit.PolicyLimiter (keyed,
// redisbucket); Middleware panics if it is not.
//
// f's limits are the request's whole policy: the limiter's own configured
// limits, if any, do not apply. No limits (nil or empty, nil error) serves
// the request unlimited, with no RateLimit fields and no limiter call: a
// health check, an internal route. An error from f is answered with 400
// Bad Request (the request does not say which limits apply, as a missing
// key does not say who sent it) and passed to the WithOnError function; to
// fall back to a default tier instead, return that tier. Limits that fail
// admit.ValidateLimits are a bug in the server: 500 Internal Server Error,
// nothing consumed, the error passed to WithOnError.
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
// keyed.Limiter from keyed.NewLimits, say). Middleware reads it once, when
// WithLimits is not given: with two or more limits the RateLimit-Policy
// field lists them all and RateLimit names the one that decided
// (Decision.Policy); with one, a limit with a Name gives the fields that
// name in place of WithPolicyName's, and its Capacity ÷ Rate gives w when
// neither WithFillTime nor a Refiller says.
type LimitLister interface {
	Limits() []admit.Limit
}

// policySet is one list of limits rendered for the fields. It is immutable
// once built, so requests share it through the cache without locks.
type policySet struct {
	limits []admit.Limit // a private copy, compared against on every lookup
	names  []string      // names[i] is limits[i]'s name in the fields, as an sf-string
	policy string        // the RateLimit-Policy value: every limit, in order
}

// newPolicySet renders limits, showing an unnamed limit as unnamed (the
// WithPolicyName name). It fails, wrapping admit.ErrInvalidConfig, on what
// admit.ValidateLimits rejects, and when the unnamed limit would be shown
// under the name of another: RateLimit could not tell them apart.
func newPolicySet(limits []admit.Limit, unnamed string) (*policySet, error) {
	if err := admit.ValidateLimits(limits); err != nil {
		return nil, err
	}
	p := &policySet{limits: slices.Clone(limits), names: make([]string, len(limits))}
	var b []byte
	for i, l := range limits {
		name := l.Name
		if name == "" {
			name = unnamed
			for j, o := range limits {
				if j != i && o.Name == unnamed {
					return nil, fmt.Errorf("%w: limit %d has no Name and would be shown as %q, the Name of limit %d",
						admit.ErrInvalidConfig, i, unnamed, j)
				}
			}
		}
		p.names[i] = quote(name)
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, p.names[i]...)
		b = append(b, ";q="...)
		b = strconv.AppendInt(b, clampSF(l.Capacity), 10)
		if w := refillSeconds(l); w > 0 {
			b = append(b, ";w="...)
			b = strconv.AppendInt(b, w, 10)
		}
	}
	p.policy = string(b)
	return p, nil
}

// name returns the sf-string of the limit named policy, and false if the
// set has none (a Decision from a failure policy's fallback limiter).
func (p *policySet) name(policy string) (string, bool) {
	for i := range p.limits {
		if p.limits[i].Name == policy {
			return p.names[i], true
		}
	}
	return "", false
}

// refillSeconds is the w of l: how long l takes to refill from empty,
// Capacity ÷ Rate, taken to the nearest nanosecond (so that Per(24*time.Hour,
// 1000), whose Rate is not exact in binary, reads 86400 and not 86401) and
// then rounded up to whole seconds, as Middleware rounds a FillTime. 0 for
// a Rate of 0, which never refills; clamped to the Structured Field maximum.
func refillSeconds(l admit.Limit) int64 {
	if !(l.Rate > 0) {
		return 0
	}
	ns := math.Round(float64(l.Capacity) / l.Rate * 1e9)
	if ns >= sfMax*1e9 {
		return sfMax
	}
	if ns < 1<<62 {
		return ceilDiv(int64(ns), 1e9)
	}
	return int64(math.Ceil(ns / 1e9)) // above 2^62 ns an ulp is over a nanosecond anyway
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// policyCache holds the rendered sets of the last few distinct lists a
// WithLimits function returned. Each slot is replaced whole, never written
// into, so a reader sees a complete set or none.
type policyCache struct {
	slots [8]atomic.Pointer[policySet]
	next  atomic.Uint32 // the slot the next miss replaces, modulo 8
}

// get returns limits' rendered set, building and caching it on a miss (an
// allocation per miss: a workload of more distinct lists than slots pays
// it on every request, and stays correct).
func (c *policyCache) get(limits []admit.Limit, unnamed string) (*policySet, error) {
	for i := range c.slots {
		if p := c.slots[i].Load(); p != nil && slices.Equal(p.limits, limits) {
			return p, nil
		}
	}
	p, err := newPolicySet(limits, unnamed)
	if err != nil {
		return nil, err
	}
	c.slots[c.next.Add(1)%uint32(len(c.slots))].Store(p)
	return p, nil
}
