package admitotel_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/keyed"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// TestConcurrentCounts runs decisions from many goroutines while another
// collects without pause (collectUntil: no counter goes down), and the last
// collection must hold the exact totals.
// GOMAXPROCS is raised above what the wrapper was built for, so processors
// without a slot of their own share the overflow slot.
func TestConcurrentCounts(t *testing.T) {
	const goroutines, perG = 8, 2000
	l, err := keyed.New(1e9, 0) // never refills, never runs out here
	if err != nil {
		t.Fatal(err)
	}
	w, reader := wrapManual(t, l)
	const decisions, tokens = "admit.decisions{admit.limiter=default,admit.result=allowed}", "admit.tokens{admit.limiter=default,admit.result=allowed}"

	stop := collectUntil(t, reader)
	decideFrom(goroutines, perG, func(g, i int) bool {
		if d, err := w.AllowN(context.Background(), string(rune('a'+g)), int64(1+i%2)); err != nil || !d.Allowed {
			t.Errorf("AllowN: %+v, %v", d, err)
			return false
		}
		return true
	})
	stop()
	got := collect(t, reader)
	if got[decisions] != goroutines*perG || got[tokens] != goroutines*perG*3/2 {
		t.Errorf("decisions %d, tokens %d; want %d and %d", got[decisions], got[tokens], goroutines*perG, goroutines*perG*3/2)
	}
}

// decideFrom runs f(g, i) for i < perG in each of goroutines goroutines,
// with GOMAXPROCS raised past the processors the wrapper has slots for (so
// that some share the overflow slot) and a yield every 50 calls to move
// between Ps; a goroutine stops at f's first false.
func decideFrom(goroutines, perG int, f func(g, i int) bool) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4 * max(runtime.NumCPU(), runtime.GOMAXPROCS(0))))
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perG {
				if i%50 == 0 {
					runtime.Gosched()
				}
				if !f(g, i) {
					return
				}
			}
		})
	}
	wg.Wait()
}

// collectUntil collects through r without pause until stop is called,
// checking that no counter is ever below its value in the collection
// before (the key table's size, a gauge, may be).
func collectUntil(t *testing.T, r *sdkmetric.ManualReader) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var last map[string]int64
		for {
			select {
			case <-done:
				return
			default:
			}
			got := collect(t, r)
			for k, v := range got {
				if !strings.HasPrefix(k, "admit.keys{") && v < last[k] {
					t.Errorf("%s went from %d to %d", k, last[k], v)
				}
			}
			last = got
		}
	}()
	return func() { close(done); wg.Wait() }
}

// scripted is a KeyedLimiter (and PolicyLimiter) whose answer is chosen by
// the key: every outcome a wrapper must count.
type scripted struct{}

func (scripted) AllowN(ctx context.Context, key string, n int64) (admit.Decision, error) {
	switch key {
	case "allowed":
		return admit.Decision{Allowed: true}, nil
	case "denied":
		return admit.Decision{}, nil
	case "unsat":
		return admit.Decision{Policy: "p1"}, fmt.Errorf("%w: big", admit.ErrUnsatisfiable)
	case "down":
		return admit.Decision{Allowed: true}, fmt.Errorf("%w: down", admit.ErrUnavailable)
	case "cancel":
		return admit.Decision{}, context.Canceled
	case "named-allowed":
		return admit.Decision{Allowed: true, Policy: "p1"}, nil
	case "named-denied":
		return admit.Decision{Policy: "p2"}, nil
	}
	panic(key)
}

func (s scripted) AllowLimits(ctx context.Context, key string, n int64, _ ...admit.Limit) (admit.Decision, error) {
	return s.AllowN(ctx, key, n)
}

// TestConcurrentMixedCounts: every outcome, from many goroutines
// moving between Ps (GOMAXPROCS raised past the wrapper's slots), with a
// collector running throughout, ends at the exact totals.
func TestConcurrentMixedCounts(t *testing.T) {
	w, reader := wrapManual(t, scripted{})
	keys := []string{"allowed", "denied", "unsat", "down", "cancel", "named-allowed", "named-denied"}
	const goroutines, perG = 16, 700
	stop := collectUntil(t, reader)
	decideFrom(goroutines, perG, func(g, i int) bool {
		k := keys[(g+i)%len(keys)]
		n := int64(i % 3)
		if i%2 == 0 {
			w.AllowN(context.Background(), k, n)
		} else {
			w.AllowLimits(context.Background(), k, n, admit.Limit{Capacity: 1, Rate: 1})
		}
		return true
	})
	stop()
	want := map[string]int64{}
	for g := range goroutines {
		for i := range perG {
			k := keys[(g+i)%len(keys)]
			n := int64(i % 3)
			res, pol := "", ""
			switch k {
			case "allowed":
				res = "allowed"
			case "denied":
				res = "denied"
			case "unsat":
				res, pol = "error", "p1"
			case "down":
				res = "error"
				want["admit.backend.errors{admit.limiter=default}"]++
			case "cancel":
				res = "error"
			case "named-allowed":
				res, pol = "allowed", "p1"
			case "named-denied":
				res, pol = "denied", "p2"
			}
			attrs := "admit.limiter=default,"
			if pol != "" {
				attrs += "admit.policy=" + pol + ","
			}
			want["admit.decisions{"+attrs+"admit.result="+res+"}"]++
			want["admit.tokens{admit.limiter=default,admit.result="+res+"}"] += n
		}
	}
	expect(t, collect(t, reader), want)
}

// TestKeyedMixedCounts: keyed's own outcomes (through its Into
// methods) from many goroutines: admitted, denied, n above the capacity,
// n < 0, and a named limit's refusal.
func TestKeyedMixedCounts(t *testing.T) {
	l, err := keyed.New(5, 0)
	if err != nil {
		t.Fatal(err)
	}
	w, reader := wrapManual(t, l)
	const goroutines, perG = 8, 500
	var mu sync.Mutex
	got := map[string]int64{}
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := map[string]int64{}
			for i := range perG {
				var d admit.Decision
				var err error
				key := fmt.Sprint("k", i%40)
				switch i % 4 {
				case 0:
					d, err = w.AllowN(context.Background(), key, 1)
				case 1:
					d, err = w.AllowN(context.Background(), key, 6)
				case 2:
					d, err = w.AllowN(context.Background(), key, -1)
				case 3:
					d, err = w.AllowLimits(context.Background(), key, 1, admit.Limit{Name: "burst", Capacity: 2, Rate: 0})
				}
				res := "denied"
				if err != nil {
					res = "error"
				} else if d.Allowed {
					res = "allowed"
				}
				attrs := "admit.limiter=default,"
				if d.Policy != "" {
					attrs += "admit.policy=" + d.Policy + ","
				}
				local["admit.decisions{"+attrs+"admit.result="+res+"}"]++
			}
			mu.Lock()
			for k, v := range local {
				got[k] += v
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	c := collect(t, reader)
	for k, v := range got {
		if c[k] != v {
			t.Errorf("%s = %d; want %d", k, c[k], v)
		}
	}
}
