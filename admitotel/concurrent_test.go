package admitotel_test

import (
	"context"
	"runtime"
	"sync"
	"testing"

	"github.com/admit-go/admit/admitotel"
	"github.com/admit-go/admit/keyed"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// TestConcurrentCounts runs decisions from many goroutines while another
// collects without pause: every collection must be at or above the one
// before (counters are monotonic), and the last must hold the exact totals.
// GOMAXPROCS is raised above what the wrapper was built for, so processors
// without a slot of their own share the overflow slot.
func TestConcurrentCounts(t *testing.T) {
	const goroutines, perG = 8, 2000
	l, err := keyed.New(1e9, 0) // never refills, never runs out here
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	w, err := admitotel.Wrap(l, admitotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4 * max(runtime.NumCPU(), runtime.GOMAXPROCS(0))))
	const decisions, tokens = "admit.decisions{admit.limiter=default,admit.result=allowed}", "admit.tokens{admit.limiter=default,admit.result=allowed}"

	done := make(chan struct{})
	var collector sync.WaitGroup
	collector.Add(1)
	go func() {
		defer collector.Done()
		var last map[string]int64
		for {
			select {
			case <-done:
				return
			default:
			}
			got := collect(t, reader)
			for _, k := range []string{decisions, tokens} {
				if got[k] < last[k] {
					t.Errorf("%s went from %d to %d", k, last[k], got[k])
				}
			}
			last = got
		}
	}()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := string(rune('a' + g))
			for i := range perG {
				if i%100 == 0 {
					runtime.Gosched() // move between Ps
				}
				if d, err := w.AllowN(context.Background(), key, int64(1+i%2)); err != nil || !d.Allowed {
					t.Errorf("AllowN: %+v, %v", d, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	collector.Wait()
	got := collect(t, reader)
	if got[decisions] != goroutines*perG || got[tokens] != goroutines*perG*3/2 {
		t.Errorf("decisions %d, tokens %d; want %d and %d", got[decisions], got[tokens], goroutines*perG, goroutines*perG*3/2)
	}
}
