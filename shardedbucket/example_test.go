package shardedbucket_test

import (
	"fmt"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/shardedbucket"
)

// The capacity and the rate are split exactly over the shards. A request
// larger than any one shard gathers from several, so the bucket as a whole
// behaves like one bucket of the full capacity.
func Example() {
	clk := buckettest.NewFakeClock(0)
	b, err := shardedbucket.New(10, 4, shardedbucket.WithShards(4), admit.WithClock(clk))
	if err != nil {
		panic(err)
	}
	fmt.Println(b.Shards(), b.Tokens())
	fmt.Println(b.TryAcquireN(10), b.TryAcquire()) // 2.5 tokens per shard, taken from all four
	clk.Advance(500 * time.Millisecond)            // 2 tokens, half a token per shard
	fmt.Println(b.TryAcquireN(2), b.TryAcquire())
	// Output:
	// 4 10
	// true false
	// true false
}
