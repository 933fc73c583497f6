package admithttp_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/keyed"
)

// counted is a real keyed.Limiter that counts the AllowLimits calls made
// on it, so that a test can tell "not called" from "called and consumed
// nothing". Every other method is keyed's own (Limits, FillTime, Stats).
type counted struct {
	*keyed.Limiter
	calls atomic.Int64
}

func (c *counted) AllowLimits(ctx context.Context, key string, n int64, limits ...admit.Limit) (admit.Decision, error) {
	c.calls.Add(1)
	return c.Limiter.AllowLimits(ctx, key, n, limits...)
}

// Calls returns how many times AllowLimits was called.
func (c *counted) Calls() int { return int(c.calls.Load()) }

// newPolicy returns a keyed.Limiter for WithLimits on clk, counted. Its own
// limit (keyed.New's, unnamed, 1 at 1 a second) applies only to calls that
// name it.
func newPolicy(t testing.TB, clk admit.Clock) *counted {
	t.Helper()
	l, err := keyed.New(1, 1, admit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	return &counted{Limiter: l}
}

// newListed returns keyed.NewLimits(limits) on clk.
func newListed(t testing.TB, clk admit.Clock, limits []admit.Limit) *keyed.Limiter {
	t.Helper()
	l, err := keyed.NewLimits(limits, admit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// lister is a keyed.Limiter that lists limits of the test's choosing,
// which keyed.NewLimits would refuse: for the middleware's start-up checks
// of a LimitLister.
type lister struct {
	*keyed.Limiter
	limits []admit.Limit
}

func (l lister) Limits() []admit.Limit { return l.limits }
