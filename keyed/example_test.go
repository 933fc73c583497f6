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
// keys instead of evicting the least recently used one.
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
