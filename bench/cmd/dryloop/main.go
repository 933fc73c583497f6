// Command dryloop makes n TryAcquire calls on one bucket from one goroutine,
// on a clock that moves a fixed step per reading, and prints how many were
// admitted. It is the loop whose instructions callgrind counts, which on a
// shared machine is a steadier measure than time: the step keeps the regime
// (how many calls find a token) whatever the speed, and a plain loop keeps
// the test and benchmark frameworks' timers out of the count.
//
// The instructions one call costs, from two runs that differ only in n:
//
//	go build -o /tmp/dryloop ./cmd/dryloop
//	for n in 100000 300000; do GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind \
//	    --callgrind-out-file=/dev/null /tmp/dryloop -impl shardedbucket -shards 2 -n $n 2>&1 | grep Collected; done
//
// (the difference divided by 200000). The default regime is bench/'s
// case=mixed on one goroutine: capacity 100 at 6e6/s, a fifth of a token
// per reading, about a fifth of the calls admitted and the bucket dry;
// -admit makes every call admitted (capacity and rate 1e9), the fast path.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/casbucket"
	"github.com/admit-go/admit/gcra"
	"github.com/admit-go/admit/mutexbucket"
	"github.com/admit-go/admit/shardedbucket"
)

// stepClock advances step nanoseconds on every reading.
type stepClock struct{ now, step atomic.Int64 }

func (c *stepClock) Now() int64                                       { return c.now.Add(c.step.Load()) }
func (c *stepClock) Sleep(ctx context.Context, d time.Duration) error { return ctx.Err() }

func main() {
	impl := flag.String("impl", "shardedbucket", "mutexbucket, casbucket, shardedbucket or gcra")
	shards := flag.Int("shards", 2, "shardedbucket's shard count")
	n := flag.Int("n", 100000, "calls")
	all := flag.Bool("admit", false, "every call admitted (capacity and rate 1e9) instead of the dry regime")
	flag.Parse()
	capacity, rate := int64(100), 6e6
	if *all {
		capacity, rate = 1e9, 1e9
	}
	clk := &stepClock{}
	clk.step.Store(int64(time.Second / 6e6 / 5))
	var l admit.Limiter
	var err error
	switch *impl {
	case "mutexbucket":
		l, err = mutexbucket.New(capacity, rate, admit.WithClock(clk))
	case "casbucket":
		l, err = casbucket.New(capacity, rate, admit.WithClock(clk))
	case "gcra":
		l, err = gcra.New(capacity, rate, admit.WithClock(clk))
	case "shardedbucket":
		l, err = shardedbucket.New(capacity, rate, admit.WithClock(clk), shardedbucket.WithShards(*shards))
	default:
		err = fmt.Errorf("unknown -impl %q", *impl)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dryloop:", err)
		os.Exit(2)
	}
	ok := 0
	for range *n {
		if l.TryAcquire() {
			ok++
		}
	}
	fmt.Printf("%s: %d of %d admitted\n", *impl, ok, *n)
}
