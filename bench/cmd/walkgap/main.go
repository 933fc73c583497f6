// Command walkgap shows why BenchmarkKeyedScaling's walk alternates
// directions: two goroutines walk the same held keys of one keyed.Limiter
// with the benchmarks' own loop (bench.Walk), either both forwards from
// offsets half the keys apart (the walk before) or in opposite directions
// (the walk now), each logging the time every 16 384 calls into its own
// slice (no goroutine samples them, which would itself take a core). After
// the run it prints, at 40 moments, how far apart the two were in keys (the
// distance around the ring, 0 to n/2), and each run's ns per call. Forwards,
// the goroutines tend to fall into step (the gap stays under a few hundred
// keys for long stretches, and a call costs more); in opposite directions
// they cross and part.
//
//	go run ./cmd/walkgap -calls 20000000
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/admit-go/admit/bench"
	"github.com/admit-go/admit/internal/provenance"
	"github.com/admit-go/admit/keyed"
)

const every = 16384

func main() {
	calls := flag.Int("calls", 20_000_000, "calls per run, split between the two goroutines")
	n := flag.Int("keys", 10_000, "held keys")
	runs := flag.Int("runs", 2, "runs of each direction, alternating")
	flag.Parse()
	if runtime.GOMAXPROCS(0) < 2 {
		log.Fatal("walkgap needs two cores (GOMAXPROCS >= 2)")
	}
	provenance.Write(os.Stdout, fmt.Sprintf("%s %s/%s", runtime.Version(), runtime.GOOS, runtime.GOARCH),
		fmt.Sprintf("cd bench && go run ./cmd/walkgap -calls %d -keys %d -runs %d", *calls, *n, *runs))
	keys := make([]string, *n)
	for i := range keys {
		keys[i] = bench.KeyName(i)
	}
	for r := range *runs {
		for _, opposite := range []bool{false, true} {
			gaps, ns := run(keys, *calls, opposite)
			name := "forwards, offsets n/2 apart"
			if opposite {
				name = "opposite directions"
			}
			fmt.Printf("run %d, %s: %.1f ns/call; gap in keys at %d moments (ms:gap):\n  %s\n", r+1, name, ns, len(gaps), gapString(gaps))
		}
	}
}

type gap struct {
	ms  float64
	gap int
}

func gapString(gs []gap) string {
	var b strings.Builder
	for _, g := range gs {
		fmt.Fprintf(&b, "%.0f:%d ", g.ms, g.gap)
	}
	return b.String()
}

// run makes calls calls on a new Limiter holding keys, from two goroutines,
// and returns the gap between them at 40 moments and the ns per call.
func run(keys []string, calls int, opposite bool) ([]gap, float64) {
	l, err := keyed.New(1e7, 0.01)
	if err != nil {
		log.Fatal(err)
	}
	for _, k := range keys {
		if !l.Allow(k) {
			log.Fatalf("the first call on %q was refused", k)
		}
	}
	n := len(keys)
	var ready atomic.Int32
	var wg sync.WaitGroup
	start := time.Now()
	logs := make([][]int64, 2)
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ready.Add(1)
			for ready.Load() < 2 {
			}
			lg := make([]int64, 0, calls/2/every+2)
			// The benchmarks' own walk, in chunks of every calls, the time
			// logged before each: goroutine 1 backwards in opposite
			// directions (Walk's odd goroutine), forwards otherwise.
			dir := 0
			if opposite {
				dir = g
			}
			i := g * n / 2
			for done := 0; done < calls/2; done += every {
				lg = append(lg, int64(time.Since(start)))
				m := min(every, calls/2-done)
				_, i = bench.Walk(l, keys, dir, i, m)
			}
			logs[g] = lg
		}()
	}
	wg.Wait()
	ns := float64(time.Since(start).Nanoseconds()) / float64(calls)
	// At goroutine 0's logged times, goroutine 1's count is interpolated
	// from its own log; positions follow from the counts.
	a, b := logs[0], logs[1]
	var out []gap
	j := 0
	for k := 0; k < len(a); k += max(1, len(a)/40) {
		for j+1 < len(b) && b[j+1] <= a[k] {
			j++
		}
		if j+1 >= len(b) || b[j] > a[k] {
			continue
		}
		cb := float64(j*every) + every*float64(a[k]-b[j])/float64(b[j+1]-b[j])
		p0 := k * every % n
		p1 := n/2 + int(cb)
		if opposite {
			p1 = n/2 - int(cb)
		}
		d := ((p1-p0)%n + n) % n
		out = append(out, gap{ms: float64(a[k]) / 1e6, gap: min(d, n-d)})
	}
	return out, ns
}
