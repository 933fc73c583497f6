package slidingwindow_test

import (
	"math"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/slidingwindow"
)

// TestReviewTokensFloorAdmits: Tokens is limit minus the estimate, and the
// estimate is compared exactly by TryAcquireN; ⌊Tokens()⌋ must be what
// TryAcquireN admits at that instant. Here the previous window's weighted
// count is exactly 1 (3 × x / 3x), but computed in float64 with x and 3x
// not representable it came out above 1, so Tokens read 1.999… while
// TryAcquireN(2) admits.
func TestReviewTokensFloorAdmits(t *testing.T) {
	const x = 1<<58 + 63 // rounds up in float64
	const w = 3 * x      // rounds down in float64
	clk := buckettest.NewFakeClock(0)
	l, err := slidingwindow.New(3, time.Duration(w), admit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	if !l.TryAcquireN(3) {
		t.Fatal("a new limiter refused its limit")
	}
	clk.Set(w + 2*x) // window 1, off = 2x: the estimate is 3 × x / w = 1 exactly
	tok := l.Tokens()
	k := int64(math.Floor(tok))
	if k+1 <= 3 && l.TryAcquireN(k+1) {
		t.Fatalf("Tokens() = %v, but TryAcquireN(%d) admitted", tok, k+1)
	}
	if !l.TryAcquireN(k) {
		t.Fatalf("Tokens() = %v, but TryAcquireN(%d) refused", tok, k)
	}
}
