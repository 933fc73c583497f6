package admitotel_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitotel"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/mutexbucket"
)

// TestTokensNeverDecrease: admit.tokens is a sum of the costs callers ask
// for, which may come from request data; a counter must never go down, so
// the sum saturates at the largest int64 instead of wrapping (three costs
// of 2^63-1 used to wrap the per-processor sums: 9223372036854775807, then
// …805). Every collection, over ten calls, is at least the one before it,
// through Wrap's AllowN (its inlined path and, with an error, the general
// one), a Counter's Count and a Bucket's TryAcquireN.
func TestTokensNeverDecrease(t *testing.T) {
	k, err := keyed.New(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := mutexbucket.New(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for name, c := range map[string]struct {
		result string
		count  func(*testing.T, admitotel.Option) (func(), error)
	}{
		"Wrap, error": {"error", func(_ *testing.T, o admitotel.Option) (func(), error) {
			w, err := admitotel.Wrap(k, o)
			return func() { w.AllowN(ctx, "k", math.MaxInt64) }, err // above the capacity: an error
		}},
		"Wrap, denied": {"denied", func(t *testing.T, o admitotel.Option) (func(), error) {
			// The largest capacity keyed takes, drained: each call is a
			// plain denial of 2^61-1 tokens, no error (AllowN's inlined
			// path); five of them pass 2^63, nine wrap a uint64.
			big, err := keyed.New(maxCapacity, 1, admit.WithClock(buckettest.NewFakeClock(0)))
			if err != nil {
				return nil, err
			}
			if d, err := big.AllowN(ctx, "k", maxCapacity); err != nil || !d.Allowed {
				return nil, fmt.Errorf("draining: %+v, %v", d, err)
			}
			w, err := admitotel.Wrap(big, o)
			return func() {
				if d, err := w.AllowN(ctx, "k", maxCapacity); err != nil || d.Allowed {
					t.Fatalf("%+v, %v; want a denial without an error", d, err)
				}
			}, err
		}},
		"Counter, allowed": {"allowed", func(_ *testing.T, o admitotel.Option) (func(), error) {
			c, err := admitotel.NewCounter(o)
			return func() { c.Count(admit.Decision{Allowed: true}, math.MaxInt64, nil) }, err
		}},
		"Counter, denied with a policy": {"denied", func(_ *testing.T, o admitotel.Option) (func(), error) {
			c, err := admitotel.NewCounter(o)
			return func() { c.Count(admit.Decision{Policy: "p"}, math.MaxInt64, nil) }, err
		}},
		"Bucket, denied": {"denied", func(_ *testing.T, o admitotel.Option) (func(), error) {
			w, err := admitotel.WrapLimiter(b, o)
			return func() { w.TryAcquireN(math.MaxInt64) }, err
		}},
	} {
		t.Run(name, func(t *testing.T) {
			mp, reader := manualProvider()
			call, err := c.count(t, mp)
			if err != nil {
				t.Fatal(err)
			}
			series := "admit.tokens{admit.limiter=default,admit.result=" + c.result + "}"
			var last int64
			for i := range 10 {
				call()
				got := collect(t, reader)[series]
				if got < last {
					t.Fatalf("after call %d: %s = %d, down from %d", i+1, series, got, last)
				}
				last = got
			}
			if last != math.MaxInt64 {
				t.Fatalf("%s = %d; want it saturated at %d", series, last, int64(math.MaxInt64))
			}
		})
	}
}

// maxCapacity is the largest capacity keyed accepts (below 2^61).
const maxCapacity = 1<<61 - 1
