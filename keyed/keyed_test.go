package keyed_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/keyedtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func factory(opts ...admit.Option) keyedtest.Factory {
	return func(_ *testing.T, capacity int64, rate float64, more ...admit.Option) (admit.KeyedLimiter, error) {
		return keyed.New(capacity, rate, append(append([]admit.Option(nil), opts...), more...)...)
	}
}

func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []admit.Option
	}{
		{"default", nil},
		{"shards=1", []admit.Option{keyed.WithShards(1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keyedtest.Run(t, factory(tc.opts...))
			keyedtest.RunFakeClock(t, factory(tc.opts...))
			policy := func(_ *testing.T, opts ...admit.Option) (admit.PolicyLimiter, error) {
				return keyed.New(1, 1, append(append([]admit.Option(nil), tc.opts...), opts...)...)
			}
			keyedtest.RunPolicy(t, policy)
			keyedtest.RunPolicyFakeClock(t, policy)
		})
	}
}
