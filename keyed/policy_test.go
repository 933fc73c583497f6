package keyed_test

import (
	"testing"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/keyedtest"
)

func TestPolicyConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []admit.Option
	}{
		{"default", nil},
		{"shards=1", []admit.Option{keyed.WithShards(1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			factory := func(_ *testing.T, opts ...admit.Option) (admit.PolicyLimiter, error) {
				return keyed.New(1, 1, append(append([]admit.Option(nil), tc.opts...), opts...)...)
			}
			keyedtest.RunPolicy(t, factory)
			keyedtest.RunPolicyFakeClock(t, factory)
		})
	}
}

// TestConformanceLimits runs the single-limit suites on limiters from
// NewLimits whose second limit never binds (a burst of 1e9 refilled at
// 1e9/s), so that every call goes through the multi-limit path and must
// decide exactly as one limit does.
func TestConformanceLimits(t *testing.T) {
	factory := func(_ *testing.T, capacity int64, rate float64, opts ...admit.Option) (admit.KeyedLimiter, error) {
		return keyed.NewLimits([]admit.Limit{{Capacity: capacity, Rate: rate}, {Name: "loose", Capacity: 1e9, Rate: 1e9}}, opts...)
	}
	keyedtest.Run(t, factory)
	keyedtest.RunFakeClock(t, factory)
}
