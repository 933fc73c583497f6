package mutexbucket_test

import (
	"fmt"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/mutexbucket"
)

// A bucket starts full, rejects once empty, and refills lazily with time.
// The fake clock makes the example deterministic; production code omits
// WithClock and gets the system's monotonic clock.
func Example() {
	clk := buckettest.NewFakeClock(0)
	b, err := mutexbucket.New(3, 2, admit.WithClock(clk)) // 3 tokens, 2 per second
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

func ExampleNew_invalid() {
	_, err := mutexbucket.New(0, 1)
	fmt.Println(err)
	// Output: admit: invalid configuration: capacity 0 is below 1
}
