package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/memstore"
)

// Decide admits a request only when every descriptor's bucket holds its
// cost. The second request below is refused because "user" is empty, and
// it takes nothing from "route" either: route's OK says its bucket held the
// cost, its Remaining that nothing was taken. Once "user" has refilled, the
// third request is admitted.
func ExampleStore_Decide() {
	clk := buckettest.NewFakeClock(0)
	s := memstore.New(memstore.WithClock(clk))
	hits := []rls.Hit{
		{Key: "route", Capacity: 10, Count: 10, Period: time.Second, N: 1},
		{Key: "user", Capacity: 1, Count: 1, Period: time.Second, N: 1},
	}
	results := make([]rls.Result, len(hits))
	decide := func() {
		ok, err := s.Decide(context.Background(), hits, results)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("admitted=%v", ok)
		for i, r := range results {
			fmt.Printf("  %s: ok=%v remaining=%d reset=%v", hits[i].Key, r.OK, r.Remaining, r.ResetAfter)
		}
		fmt.Println()
	}
	decide()
	clk.Advance(500 * time.Millisecond)
	decide()
	clk.Advance(500 * time.Millisecond)
	decide()
	// Output:
	// admitted=true  route: ok=true remaining=9 reset=100ms  user: ok=true remaining=0 reset=1s
	// admitted=false  route: ok=true remaining=10 reset=0s  user: ok=false remaining=0 reset=500ms
	// admitted=true  route: ok=true remaining=9 reset=100ms  user: ok=true remaining=0 reset=1s
}
