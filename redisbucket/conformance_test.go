package redisbucket_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/keyedtest"
	"github.com/admit-go/admit/redisbucket"
	"github.com/redis/rueidis"
)

var conformanceRun atomic.Int64

// The keyed conformance suite's real-clock cases, unchanged: the same
// Decisions as the in-process keyed limiter. Each limiter gets its own
// prefix, so the suite's keys never meet.
func TestConformance(t *testing.T) {
	keyedtest.Run(t, func(t *testing.T, capacity int64, rate float64, opts ...admit.Option) (admit.KeyedLimiter, error) {
		if len(opts) > 0 {
			return nil, fmt.Errorf("%w: redisbucket reads the server's clock and takes no admit.Option", admit.ErrInvalidConfig)
		}
		return redisbucket.New(client(t, srv), capacity, rate, redisbucket.WithPrefix(fmt.Sprintf("conf:%d:", conformanceRun.Add(1))), redisbucket.WithTimeout(testTimeout))
	})
}

// The PolicyLimiter conformance suite's real-clock cases, unchanged: every
// call brings its limits, whatever the limiter was built with; among them
// CarryOverFull, the carry-over's rule for full buckets. (Its fake-clock
// cases, exact RetryAfter and carry-over to the nanosecond, cannot apply:
// the clock is the server's; TestPolicyExactRetryAfter, TestPolicyCarryOver
// and TestPolicyCarryOverFull check them on it.)
// Both transports: go-redis and rueidis.
func TestPolicyConformance(t *testing.T) {
	t.Run("go-redis", func(t *testing.T) {
		keyedtest.RunPolicy(t, func(t *testing.T, opts ...admit.Option) (admit.PolicyLimiter, error) {
			if len(opts) > 0 {
				return nil, fmt.Errorf("%w: redisbucket reads the server's clock and takes no admit.Option", admit.ErrInvalidConfig)
			}
			return redisbucket.New(client(t, srv), 1, 1, redisbucket.WithPrefix(fmt.Sprintf("policy:%d:", conformanceRun.Add(1))), redisbucket.WithTimeout(testTimeout))
		})
	})
	t.Run("rueidis", func(t *testing.T) {
		keyedtest.RunPolicy(t, func(t *testing.T, opts ...admit.Option) (admit.PolicyLimiter, error) {
			if len(opts) > 0 {
				return nil, fmt.Errorf("%w: redisbucket reads the server's clock and takes no admit.Option", admit.ErrInvalidConfig)
			}
			rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
			if err != nil {
				return nil, err
			}
			t.Cleanup(rc.Close)
			return redisbucket.NewRueidis(rc, 1, 1, redisbucket.WithPrefix(fmt.Sprintf("policy:%d:", conformanceRun.Add(1))), redisbucket.WithTimeout(testTimeout))
		})
	})
}
