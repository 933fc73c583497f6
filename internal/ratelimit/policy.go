package ratelimit

import "github.com/admit-go/admit"

// Policy returns l as an admit.PolicyLimiter if l, and every limiter it
// wraps as far as Unwrap methods tell (admitotel.Limiter has one), is one:
// a wrapper has AllowLimits whatever it wraps, and would fail every call
// on a limiter that is not. The middlewares check it at construction, so
// that WithLimits on the wrong limiter panics at start-up instead of
// failing every request.
func Policy(l admit.KeyedLimiter) (admit.PolicyLimiter, bool) {
	pl, ok := l.(admit.PolicyLimiter)
	for ok {
		u, wraps := l.(interface{ Unwrap() admit.KeyedLimiter })
		if !wraps {
			return pl, true
		}
		l = u.Unwrap()
		_, ok = l.(admit.PolicyLimiter)
	}
	return nil, false
}
