package buckettest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/admit-go/admit/buckettest"
)

// A FakeClock moves only when told to; sleepers wake when it passes their
// deadline. WaitForSleepers lets a test advance it only once the goroutine
// under test is asleep, without polling.
func ExampleFakeClock() {
	clk := buckettest.NewFakeClock(0)
	done := make(chan error)
	go func() { done <- clk.Sleep(context.Background(), time.Second) }()

	_ = clk.WaitForSleepers(context.Background(), 1)
	wake, _ := clk.NextWake()
	fmt.Println("sleeping until", time.Duration(wake))
	clk.Advance(999 * time.Millisecond)
	fmt.Println("asleep:", clk.Sleepers())
	clk.Advance(time.Millisecond)
	fmt.Println("woke:", <-done == nil, "at", time.Duration(clk.Now()))
	// Output:
	// sleeping until 1s
	// asleep: 1
	// woke: true at 1s
}
