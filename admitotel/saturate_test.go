package admitotel_test

import (
	"context"
	"math"
	"testing"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitotel"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/mutexbucket"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// TestTokensNeverDecrease: admit.tokens is a sum of the costs callers ask
// for, which may come from request data; a counter must never go down, so
// the sum saturates at the largest int64 instead of wrapping (three costs
// of 2^63-1 used to wrap the per-processor sums: 9223372036854775807, then
// …805). Every collection is at least the one before it, through Wrap's
// AllowN (its inlined path and, with an error, the general one), a
// Counter's Count and a Bucket's TryAcquireN.
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
		count  func(admitotel.Option) (func(), error)
	}{
		"Wrap, error": {"error", func(o admitotel.Option) (func(), error) {
			w, err := admitotel.Wrap(k, o)
			return func() { w.AllowN(ctx, "k", math.MaxInt64) }, err // above the capacity: an error
		}},
		"Wrap, denied": {"denied", func(o admitotel.Option) (func(), error) {
			w, err := admitotel.Wrap(refuser{}, o)
			return func() { w.AllowN(ctx, "k", math.MaxInt64) }, err
		}},
		"Counter, allowed": {"allowed", func(o admitotel.Option) (func(), error) {
			c, err := admitotel.NewCounter(o)
			return func() { c.Count(admit.Decision{Allowed: true}, math.MaxInt64, nil) }, err
		}},
		"Counter, denied with a policy": {"denied", func(o admitotel.Option) (func(), error) {
			c, err := admitotel.NewCounter(o)
			return func() { c.Count(admit.Decision{Policy: "p"}, math.MaxInt64, nil) }, err
		}},
		"Bucket, denied": {"denied", func(o admitotel.Option) (func(), error) {
			w, err := admitotel.WrapLimiter(b, o)
			return func() { w.TryAcquireN(math.MaxInt64) }, err
		}},
	} {
		t.Run(name, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			call, err := c.count(admitotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
			if err != nil {
				t.Fatal(err)
			}
			series := "admit.tokens{admit.limiter=default,admit.result=" + c.result + "}"
			var last int64
			for i := range 5 {
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

// refuser is a keyed limiter that denies every call without an error (a
// block list, say): a denial of any cost takes AllowN's inlined path.
type refuser struct{}

func (refuser) AllowN(context.Context, string, int64) (admit.Decision, error) {
	return admit.Decision{Limit: 1, RetryAfter: math.MaxInt64, ResetAfter: math.MaxInt64}, nil
}
