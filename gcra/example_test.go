package gcra_test

import (
	"fmt"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/gcra"
)

// A GCRA bucket behaves exactly as the other token buckets: it starts full,
// rejects once empty and refills lazily with time.
func Example() {
	clk := buckettest.NewFakeClock(0)
	b, err := gcra.New(3, 2, admit.WithClock(clk)) // 3 tokens, 2 per second
	if err != nil {
		panic(err)
	}
	fmt.Println(b.TryAcquire(), b.TryAcquire(), b.TryAcquire(), b.TryAcquire())
	clk.Advance(750 * time.Millisecond)
	fmt.Println(b.Tokens(), b.TryAcquire(), b.TryAcquire())
	// Output:
	// true true true false
	// 1.5 true false
}
