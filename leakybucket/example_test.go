package leakybucket_test

import (
	"fmt"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/leakybucket"
)

// Two per second, never in a burst: an idle second saves nothing up.
func Example() {
	clk := buckettest.NewFakeClock(0)
	b, err := leakybucket.New(10, 2, admit.WithClock(clk))
	if err != nil {
		panic(err)
	}
	fmt.Println(b.TryAcquire(), b.TryAcquire())
	clk.Advance(time.Second)
	fmt.Println(b.TryAcquire(), b.TryAcquire())
	clk.Advance(500 * time.Millisecond)
	fmt.Println(b.TryAcquire())
	// Output:
	// true false
	// true false
	// true
}
