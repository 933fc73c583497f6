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

// Find returns the nearest limiter in l's Unwrap chain, l first, that
// implements T: an optional interface (FillTime, Limits) that a wrapper
// which only counts (admitotel.Limiter) does not have, so that it neither
// hides the wrapped limiter's nor claims one the wrapped limiter lacks.
func Find[T any](l admit.KeyedLimiter) (T, bool) {
	for l != nil {
		if t, ok := l.(T); ok {
			return t, true
		}
		u, wraps := l.(interface{ Unwrap() admit.KeyedLimiter })
		if !wraps {
			break
		}
		l = u.Unwrap()
	}
	var zero T
	return zero, false
}
