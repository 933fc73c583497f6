// Command dryshare shows how a dry bucket's tokens are shared between
// cores: one goroutine per processor calls TryAcquire flat out on one bucket
// whose rate is below what they ask (bench's mixed case by default), each
// counting its own admissions and the stretches of calls in which it got
// none. It prints, per run and implementation, each goroutine's share of
// the admissions, the admissions a second, and the fraction of each
// goroutine's stretches of 512 calls with no admission. shardedbucket's
// cores stand aside after losing the last token to another (see its
// package doc), so its tokens go to one core in runs; mutexbucket's lock
// hands them out nearly evenly; gcra races for each token.
//
//	go run ./cmd/dryshare -runs 3
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/admit-go/admit/bench"
	"github.com/admit-go/admit/internal/provenance"
)

// stretch is how many calls a goroutine makes between looks at the stop
// flag, and the unit its stretches without an admission are counted in.
const stretch = 512

// impls names, in bench.Impls, the implementations compared, in this order.
var impls = []string{"mutexbucket", "shardedbucket", "gcra"}

func main() {
	rate := flag.Float64("rate", 6e6, "tokens per second (bench's mixedRate)")
	capacity := flag.Int64("capacity", 100, "capacity")
	dur := flag.Duration("dur", time.Second, "length of each run")
	runs := flag.Int("runs", 3, "runs of each implementation, alternating")
	flag.Parse()
	procs := runtime.GOMAXPROCS(0)
	if procs < 2 {
		log.Fatal("dryshare needs two cores (GOMAXPROCS >= 2)")
	}
	provenance.Write(os.Stdout, fmt.Sprintf("%s %s/%s", runtime.Version(), runtime.GOOS, runtime.GOARCH),
		fmt.Sprintf("cd bench && go run ./cmd/dryshare -rate %g -capacity %d -dur %v -runs %d", *rate, *capacity, *dur, *runs))
	for r := range *runs {
		for _, name := range impls {
			i := slices.IndexFunc(bench.Impls, func(im bench.Impl) bool { return im.Name == name })
			l, err := bench.Impls[i].New(*capacity, *rate)
			if err != nil {
				log.Fatal(err)
			}
			adm, dry, elapsed := run(l, procs, *dur)
			var total int64
			for _, a := range adm {
				total += a
			}
			shares := make([]string, procs)
			dries := make([]string, procs)
			for g := range procs {
				shares[g] = fmt.Sprintf("%.0f%%", 100*float64(adm[g])/float64(max(total, 1)))
				dries[g] = fmt.Sprintf("%.0f%%", 100*dry[g])
			}
			fmt.Printf("run %d %-13s  shares %s  %.2f M admitted/s  stretches of %d calls with none: %s\n",
				r+1, name, strings.Join(shares, "/"), float64(total)/elapsed.Seconds()/1e6, stretch, strings.Join(dries, "/"))
		}
	}
}

// run has procs goroutines call l.TryAcquire for d, and returns each one's
// admissions and the fraction of its stretches without one, and how long
// they ran. Each goroutine writes only its own slots, read after Wait.
func run(l bench.Limiter, procs int, d time.Duration) (adm []int64, dry []float64, elapsed time.Duration) {
	adm, dry = make([]int64, procs), make([]float64, procs)
	var stop atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for g := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var got, stretches, none int64
			for !stop.Load() {
				n := int64(0)
				for range stretch {
					if l.TryAcquire() {
						n++
					}
				}
				got += n
				stretches++
				if n == 0 {
					none++
				}
			}
			adm[g], dry[g] = got, float64(none)/float64(max(stretches, 1))
		}()
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	return adm, dry, time.Since(start)
}
