package keyed_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/keyedtest"
)

// junk is what an Into method's destination holds before the call: every
// field set, so that one the method leaves unwritten shows.
var junk = admit.Decision{Allowed: true, Limit: -7, Remaining: -7, RetryAfter: -7, ResetAfter: -7, Policy: "junk"}

// into decides through AllowNInto and AllowLimitsInto, writing into a
// destination full of junk.
type into struct{ l *keyed.Limiter }

func (i into) AllowN(_ context.Context, key string, n int64) (admit.Decision, error) {
	d := junk
	err := i.l.AllowNInto(&d, key, n)
	return d, err
}

func (i into) AllowLimits(_ context.Context, key string, n int64, limits ...admit.Limit) (admit.Decision, error) {
	d := junk
	err := i.l.AllowLimitsInto(&d, key, n, limits...)
	return d, err
}

// TestIntoConformance runs the keyed and policy suites through the Into
// methods.
func TestIntoConformance(t *testing.T) {
	keyedtest.Run(t, func(_ *testing.T, capacity int64, rate float64, opts ...admit.Option) (admit.KeyedLimiter, error) {
		l, err := keyed.New(capacity, rate, opts...)
		if err != nil {
			return nil, err
		}
		return into{l}, nil
	})
	keyedtest.RunFakeClock(t, func(_ *testing.T, capacity int64, rate float64, opts ...admit.Option) (admit.KeyedLimiter, error) {
		l, err := keyed.New(capacity, rate, opts...)
		if err != nil {
			return nil, err
		}
		return into{l}, nil
	})
	policy := func(_ *testing.T, opts ...admit.Option) (admit.PolicyLimiter, error) {
		l, err := keyed.New(1, 1, opts...)
		if err != nil {
			return nil, err
		}
		return into{l}, nil
	}
	keyedtest.RunPolicy(t, policy)
	keyedtest.RunPolicyFakeClock(t, policy)
}

// TestIntoMatchesReturn drives two limiters on one fake clock with the same
// calls, one through AllowN and AllowLimits, the other through the Into
// methods, and compares every Decision and error: admissions, denials,
// refusals for want of room, bad n, bad limits, peeks, several limits.
func TestIntoMatchesReturn(t *testing.T) {
	clk := buckettest.NewFakeClock(fakeStart)
	opts := []admit.Option{admit.WithClock(clk), keyed.WithMaxKeys(3), keyed.WithPolicy(keyed.RefuseNew)}
	a, err := keyed.NewLimits([]admit.Limit{admit.Per(time.Second, 3).Named("s"), admit.Per(time.Minute, 5).Named("m")}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := keyed.NewLimits(a.Limits(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	one, err := keyed.New(4, 2, opts...)
	if err != nil {
		t.Fatal(err)
	}
	two, err := keyed.New(4, 2, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	other := []admit.Limit{admit.Per(time.Second, 2).Named("x")}
	bad := []admit.Limit{admit.Per(time.Second, 2).Named("x"), admit.Per(time.Second, 2).Named("x")}
	same := []admit.Limit{{Capacity: 4, Rate: 2}}
	for step := range 400 {
		key := fmt.Sprintf("k%d", step%5)
		n := int64(step%7) - 1 // -1 .. 5
		check := func(what string, d1 admit.Decision, e1 error, d2 admit.Decision, e2 error) {
			t.Helper()
			if d1 != d2 || fmt.Sprint(e1) != fmt.Sprint(e2) {
				t.Fatalf("step %d, %s(%q, %d): returned %+v, %v; Into wrote %+v, %v", step, what, key, n, d1, e1, d2, e2)
			}
		}
		d1, e1 := a.AllowN(ctx, key, n)
		d2, e2 := into{b}.AllowN(ctx, key, n)
		check("NewLimits AllowN", d1, e1, d2, e2)
		d1, e1 = one.AllowN(ctx, key, n)
		d2, e2 = into{two}.AllowN(ctx, key, n)
		check("New AllowN", d1, e1, d2, e2)
		for _, ls := range [][]admit.Limit{other, bad, same, nil} {
			d1, e1 = one.AllowLimits(ctx, key, n, ls...)
			d2, e2 = into{two}.AllowLimits(ctx, key, n, ls...)
			check(fmt.Sprintf("AllowLimits %v", ls), d1, e1, d2, e2)
		}
		clk.Advance(time.Duration(step%11) * 37 * time.Millisecond)
	}
}
