package buckettest

import (
	"context"
	"math"
	"testing"
	"time"
)

// TestFakeClockLongSleep: Sleep blocks until the clock has moved d past the
// reading at the call. A d that takes now + d past MaxInt64 (refill.Clock's
// Until saturates at MaxInt64 for a reading long before a limiter's
// creation) must not wrap to a deadline in the past and wake at the next
// step of the clock.
func TestFakeClockLongSleep(t *testing.T) {
	clk := NewFakeClock(10)
	done := make(chan error, 1)
	go func() { done <- clk.Sleep(context.Background(), time.Duration(math.MaxInt64)) }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := clk.WaitForSleepers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if n := clk.Sleepers(); n != 1 {
		t.Fatalf("a sleep of MaxInt64 ns from 10 ended after 1 s: %d sleepers", n)
	}
	clk.Set(math.MaxInt64)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
