package gcra_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

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

// dipClock is a FakeClock whose next readings can be set, one call each:
// a clock that steps back for one reading and then forward again.
type dipClock struct {
	*buckettest.FakeClock
	mu   sync.Mutex
	next []int64
}

func (c *dipClock) Now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.next) > 0 {
		r := c.next[0]
		c.next = c.next[1:]
		return r
	}
	return c.FakeClock.Now()
}

// TestReviewBackwardReadingInsideAcquire: a reading earlier than one the
// bucket already applied must add nothing (admit.Clock: "a limiter ignores
// any that do"). AcquireN's reservation measured its wait from one reading,
// and the blocking loop then placed the instant at a second reading plus
// that wait: a second reading 100 s back put the instant 100 s early, and
// the caller returned at once, before its token existed. Five callers that
// each met such a reading were admitted at one instant behind a TryAcquire
// that emptied a bucket of capacity 1 (bound: 1 + 0 + 1).
func TestReviewBackwardReadingInsideAcquire(t *testing.T) {
	const origin = int64(1) << 40
	clk := &dipClock{FakeClock: buckettest.NewFakeClock(origin)}
	b, err := gcra.New(1, 1, admit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	clk.Set(origin + 200e9)
	if !b.TryAcquire() {
		t.Fatal("a full bucket refused")
	}
	admitted := 1
	for range 5 {
		now := clk.FakeClock.Now()
		// The reservation's reading is the true one; the next is 100 s back.
		clk.mu.Lock()
		clk.next = []int64{now, now - 100e9}
		clk.mu.Unlock()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.AcquireN(ctx, 1) }()
		select {
		case err := <-done:
			if err == nil {
				admitted++
			}
		case <-time.After(200 * time.Millisecond):
			cancel()
			<-done
		}
		cancel()
	}
	if admitted > 2 {
		t.Fatalf("%d admitted at one instant (clock at %d s) from a bucket of capacity 1 at 1/s; the bound is 2",
			admitted, (clk.FakeClock.Now()-origin)/1e9)
	}
}
