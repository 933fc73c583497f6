package fixedwindow_test

import (
	"fmt"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/fixedwindow"
)

// Three per second, counted in aligned windows: the last instant of one
// window and the first of the next admit three each.
func Example() {
	clk := buckettest.NewFakeClock(0)
	l, err := fixedwindow.New(3, time.Second, admit.WithClock(clk))
	if err != nil {
		panic(err)
	}
	clk.Set(int64(time.Second) - 1)
	fmt.Println(l.TryAcquireN(3), l.TryAcquire())
	clk.Advance(1)
	fmt.Println(l.TryAcquireN(3), l.TryAcquire())
	// Output:
	// true false
	// true false
}
