package slidingwindow_test

import (
	"fmt"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/slidingwindow"
)

// Four per second, estimated: a quarter into the next window, the previous
// window's four count as three, so one more is admitted.
func Example() {
	clk := buckettest.NewFakeClock(0)
	l, err := slidingwindow.New(4, time.Second, admit.WithClock(clk))
	if err != nil {
		panic(err)
	}
	fmt.Println(l.TryAcquireN(4))
	clk.Set(int64(time.Second))
	fmt.Println(l.TryAcquire())
	clk.Advance(250 * time.Millisecond)
	fmt.Println(l.TryAcquire(), l.TryAcquire())
	// Output:
	// true
	// false
	// true false
}
