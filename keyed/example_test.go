package keyed_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
)

// Each client gets its own bucket: 3 requests at once, then 1 per second.
// The fake clock makes the example deterministic; production code omits
// WithClock.
func Example() {
	clk := buckettest.NewFakeClock(0)
	l, err := keyed.New(3, 1, admit.WithClock(clk))
	if err != nil {
		panic(err)
	}
	for range 4 {
		fmt.Print(l.Allow("alice"), " ")
	}
	fmt.Println(l.Allow("bob"))
	d, _ := l.AllowN(context.Background(), "alice", 1)
	fmt.Printf("allowed=%v remaining=%d retry=%v reset=%v\n", d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter)
	clk.Advance(250 * time.Millisecond)
	d, _ = l.AllowN(context.Background(), "alice", 1)
	fmt.Printf("allowed=%v remaining=%d retry=%v reset=%v\n", d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter)
	// Output:
	// true true true false true
	// allowed=false remaining=0 retry=1s reset=3s
	// allowed=false remaining=0 retry=750ms reset=2.75s
}

// With RefuseNew, a limiter whose bound is held by live buckets refuses new
// keys instead of evicting a live one.
func ExampleWithPolicy() {
	clk := buckettest.NewFakeClock(0)
	l, err := keyed.New(1, 1, admit.WithClock(clk), keyed.WithMaxKeys(1), keyed.WithPolicy(keyed.RefuseNew))
	if err != nil {
		panic(err)
	}
	fmt.Println(l.Allow("a"))
	d, err := l.AllowN(context.Background(), "b", 1)
	fmt.Println(d.Allowed, d.RetryAfter, errors.Is(err, admit.ErrUnavailable))
	clk.Advance(time.Second) // a's bucket is full again: dropping it is exact
	fmt.Println(l.Allow("b"), l.Stats().Refusals, l.Stats().Drops)
	// Output:
	// true
	// false 1s true
	// true 1 1
}

// A burst limit and a daily quota on every client, decided together: a
// request either takes a token from both or from neither. Decision.Policy
// names the limit that decided.
func ExampleNewLimits() {
	clk := buckettest.NewFakeClock(0)
	l, err := keyed.NewLimits([]admit.Limit{
		admit.Per(time.Second, 2).Named("burst"), // 2 at once, 2 a second
		admit.Per(24*time.Hour, 5).Named("daily"),
	}, admit.WithClock(clk))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 3 {
		d, _ := l.AllowN(ctx, "alice", 1)
		fmt.Println(d.Allowed, d.Policy, d.Remaining, d.RetryAfter)
	}
	clk.Advance(time.Second)
	for range 4 {
		d, _ := l.AllowN(ctx, "alice", 1)
		fmt.Println(d.Allowed, d.Policy, d.Remaining, d.RetryAfter.Round(time.Minute))
		clk.Advance(time.Second)
	}
	// Output:
	// true burst 1 0s
	// true burst 0 0s
	// false burst 0 500ms
	// true burst 1 0s
	// true burst 1 0s
	// true daily 0 0s
	// false daily 0 4h48m0s
}

// Tiers chosen per request: the limits travel with each call, so a tier
// read from an API key, a JWT claim or a database is one more argument, and
// a client that upgrades keeps its balance (carried over to the new
// capacity). Both tiers name their limit "minute", so they share one state
// per client.
func ExampleLimiter_AllowLimits() {
	clk := buckettest.NewFakeClock(0)
	l, err := keyed.New(1, 1, admit.WithClock(clk)) // its own limit is not used here
	if err != nil {
		panic(err)
	}
	tiers := map[string][]admit.Limit{
		"free": {admit.Per(time.Minute, 3).Named("minute")},
		"paid": {admit.Per(time.Minute, 60).Named("minute"), admit.Per(time.Second, 5).Named("second")},
	}
	ctx := context.Background()
	for range 4 {
		d, _ := l.AllowLimits(ctx, "tenant-1", 1, tiers["free"]...)
		fmt.Println("free", d.Allowed, d.Remaining, d.RetryAfter)
	}
	// The upgrade carries the empty balance over; the paid rate refills it.
	d, _ := l.AllowLimits(ctx, "tenant-1", 1, tiers["paid"]...)
	fmt.Println("paid", d.Allowed, d.Policy, d.Remaining, d.RetryAfter)
	clk.Advance(time.Second)
	d, _ = l.AllowLimits(ctx, "tenant-1", 1, tiers["paid"]...)
	fmt.Println("paid", d.Allowed, d.Policy, d.Remaining, d.RetryAfter)
	// Output:
	// free true 2 0s
	// free true 1 0s
	// free true 0 0s
	// free false 0 20s
	// paid false minute 0 1s
	// paid true minute 0 0s
}
