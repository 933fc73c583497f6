package windowtest_test

import (
	"fmt"
	"time"

	"github.com/admit-go/admit/windowtest"
)

// The bounds the suite checks each algorithm against, for a limit of 100 per
// second over a span of 1.5 s: aligned windows (fixedwindow, slidingwindow)
// can admit a full limit in each of the two windows the span touches, and in
// a third when the span straddles two boundaries; an exact sliding log at
// most the limit per window the span needs; a paced leaky bucket the rate
// times the span plus one request's size.
func ExampleAlignedBound() {
	span := 1500 * time.Millisecond
	fmt.Println("aligned:", windowtest.AlignedBound(100, time.Second, span, 1))
	fmt.Println("sliding:", windowtest.SlidingBound(100, time.Second, span, 1))
	fmt.Println("paced:  ", windowtest.PacedBound(100, time.Second, span, 1))
	// Output:
	// aligned: 300
	// sliding: 200
	// paced:   151
}
