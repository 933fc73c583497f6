package keyedtest_test

import (
	"testing"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/keyedtest"
)

// A keyed limiter's conformance test is a factory and two calls: the
// real-clock cases (storms, the per-key bound) and the fake-clock ones
// (exact Decisions). redisbucket's test is the same with a factory that
// gives each call a fresh key prefix on a real redis-server.
func ExampleRun() {
	factory := func(t *testing.T, capacity int64, rate float64, opts ...admit.Option) (admit.KeyedLimiter, error) {
		return keyed.New(capacity, rate, opts...)
	}
	var t *testing.T // in a test: func TestConformance(t *testing.T) { ... }
	if t != nil {
		keyedtest.Run(t, factory)
		keyedtest.RunFakeClock(t, factory)
	}
}
