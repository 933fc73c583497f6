package keyedtest

import (
	"context"
	"fmt"

	"github.com/admit-go/admit"
)

// Wrapper is a limiter that only forwards to L, the shape of a wrapper
// such as admitotel.Limiter: it has AllowLimits whatever L is (failing,
// with an error wrapping admit.ErrInvalidConfig, when L is not an
// admit.PolicyLimiter) and says what it wraps through Unwrap. It is for
// tests of code that must look through wrappers, as the middlewares do
// when WithLimits needs a PolicyLimiter.
type Wrapper struct{ L admit.KeyedLimiter }

// AllowN forwards to L.
func (w Wrapper) AllowN(ctx context.Context, key string, n int64) (admit.Decision, error) {
	return w.L.AllowN(ctx, key, n)
}

// AllowLimits forwards to L if it is an admit.PolicyLimiter.
func (w Wrapper) AllowLimits(ctx context.Context, key string, n int64, limits ...admit.Limit) (admit.Decision, error) {
	if pl, ok := w.L.(admit.PolicyLimiter); ok {
		return pl.AllowLimits(ctx, key, n, limits...)
	}
	return admit.Decision{}, fmt.Errorf("%w: keyedtest.Wrapper: %T is not an admit.PolicyLimiter", admit.ErrInvalidConfig, w.L)
}

// Unwrap returns L.
func (w Wrapper) Unwrap() admit.KeyedLimiter { return w.L }
