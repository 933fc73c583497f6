package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/admit-go/admit/bench"
)

// keyedTable is the storm for the per-key limiters: g goroutines spread
// evenly over min(keys, g) keys call Allow in a tight loop on a fresh
// limiter for d.
// Each key's bucket may admit at most capacity + rate × elapsed; the row
// shows the key that admitted most (worst key) and the one that admitted
// least, against that bound per key. The window counters (httprate,
// golimiter) are not token buckets: they may admit up to about twice their
// limit across a window boundary, and the table shows whether they did.
// A key whose goroutines are not running loses the refill its full bucket
// cannot hold, so on a machine with fewer cores than keys the admitted
// counts fall well short of the bound; the column that matters is excess,
// which must never be above +1 for an exact bucket.
func keyedTable(out io.Writer, gs []int, keys int, ms []mix, d time.Duration, trials int) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "impl\tgoroutines\tkeys\tcapacity\trate/s\telapsed\tworst key\tleast key\tbound/key\texcess\tover\t")
	for _, im := range bench.KeyedImpls {
		for _, m := range ms {
			for _, g := range gs {
				k := min(keys, g) // every key has a goroutine
				var worst keyedResult
				over := 0
				for t := range trials {
					r := keyedStorm(im, g, k, m, d)
					if t == 0 || r.excess() > worst.excess() {
						worst = r
					}
					if r.excess() > 1 {
						over++
					}
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%v\t%d\t%d\t%d\t%+d\t%d/%d\t\n",
					im.Name, g, k, m.capacity, fmtRate(m.rate), worst.elapsed.Round(time.Millisecond),
					worst.most, worst.least, worst.bound, worst.excess(), over, trials)
			}
		}
	}
	tw.Flush()
}

type keyedResult struct {
	most, least int64 // admitted by the key that got most, and least
	elapsed     time.Duration
	bound       int64 // ⌊capacity + rate × elapsed⌋, per key
}

func (r keyedResult) excess() int64 { return r.most - r.bound }

func keyedStorm(im bench.KeyedImpl, g, keys int, m mix, d time.Duration) keyedResult {
	var (
		l        bench.KeyedLimiter
		start    = make(chan struct{})
		stop     atomic.Bool
		admitted = make([]atomic.Int64, keys)
		wg       sync.WaitGroup
	)
	names := make([]string, keys)
	for i := range names {
		names[i] = "client-" + strconv.Itoa(i)
	}
	for i := range g {
		wg.Go(func() {
			<-start
			key := i % keys
			var n int64
			for !stop.Load() {
				if l.Allow(names[key]) {
					n++
				}
			}
			admitted[key].Add(n)
		})
	}
	t0 := time.Now()
	l, closer, err := im.New(m.capacity, m.rate, 4*keys)
	check(err)
	close(start)
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(t0)
	if closer != nil {
		check(closer.Close())
	}
	r := keyedResult{elapsed: elapsed, bound: int64(math.Floor(float64(m.capacity) + m.rate*elapsed.Seconds())), least: math.MaxInt64}
	for i := range admitted {
		n := admitted[i].Load()
		r.most, r.least = max(r.most, n), min(r.least, n)
	}
	return r
}
