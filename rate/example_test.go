package rate_test

import (
	"fmt"
	"time"

	"github.com/admit-go/admit/rate"
)

// The API is x/time/rate's: only the import path changes. Times are passed
// explicitly here so that the output is deterministic.
func Example() {
	lim := rate.NewLimiter(10, 3) // 10 events/s, bursts of 3
	t0 := time.Now()
	fmt.Println(lim.AllowN(t0, 3), lim.AllowN(t0, 1)) // the burst, then empty
	t1 := t0.Add(150 * time.Millisecond)
	fmt.Println(lim.TokensAt(t1)) // exactly 1.5 tokens refilled
	r := lim.ReserveN(t1, 2)
	fmt.Println(r.OK(), r.DelayFrom(t1)) // half a token short: 50ms
	// Output:
	// true false
	// 1.5
	// true 50ms
}

// Every reads as exactly one event per interval: after 3 s at
// Every(3*time.Second) the token is there, not a hair short of it.
func ExampleEvery() {
	lim := rate.NewLimiter(rate.Every(3*time.Second), 1)
	t0 := time.Now()
	lim.AllowN(t0, 1)
	fmt.Println(lim.TokensAt(t0.Add(3*time.Second)), lim.AllowN(t0.Add(3*time.Second), 1))
	// Output: 1 true
}
