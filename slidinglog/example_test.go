package slidinglog_test

import (
	"fmt"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/slidinglog"
)

// Three per second in any second: the boundary that lets a fixed window
// admit six within two nanoseconds admits nothing more here.
func Example() {
	clk := buckettest.NewFakeClock(0)
	l, err := slidinglog.New(3, time.Second, admit.WithClock(clk))
	if err != nil {
		panic(err)
	}
	clk.Set(int64(time.Second) - 1)
	fmt.Println(l.TryAcquireN(3), l.TryAcquire())
	clk.Advance(1)
	fmt.Println(l.TryAcquire())
	clk.Advance(time.Second - 1)
	fmt.Println(l.TryAcquireN(3))
	// Output:
	// true false
	// false
	// true
}
