package gcra_test

import (
	"math"
	"testing"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/gcra"
)

// TestReviewTokensFloorAdmits: ⌊Tokens()⌋ must be what TryAcquireN admits
// at that instant. At capacity 1e9 and 0.4/s a token is 2^31 units, and a
// balance a few units short of the capacity converted to float64 rounded
// up to the capacity: Tokens read 1e9 while TryAcquireN(1e9) refused.
func TestReviewTokensFloorAdmits(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	b, err := gcra.New(1e9, 0.4, admit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	if !b.TryAcquireN(1e9) {
		t.Fatal("a new bucket refused its capacity")
	}
	clk.Set(25e17 - 20) // 2.5e9 s less 20 ns: about 17 units short of full
	tok := b.Tokens()
	k := int64(math.Floor(tok))
	if k < 1e9 && b.TryAcquireN(k+1) {
		t.Fatalf("Tokens() = %v, but TryAcquireN(%d) admitted", tok, k+1)
	}
	if !b.TryAcquireN(k) {
		t.Fatalf("Tokens() = %v, but TryAcquireN(%d) refused", tok, k)
	}
}
