package admitotel_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/adaptive"
	"github.com/admit-go/admit/admitotel"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

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

// TestReviewConcurrentMixedCounts: every outcome, from many goroutines
// moving between Ps (GOMAXPROCS raised past the wrapper's slots), with a
// collector running throughout, ends at the exact totals.
func TestReviewConcurrentMixedCounts(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	w, err := admitotel.Wrap(scripted{}, admitotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4 * max(runtime.NumCPU(), runtime.GOMAXPROCS(0))))
	keys := []string{"allowed", "denied", "unsat", "down", "cancel", "named-allowed", "named-denied"}
	const goroutines, perG = 16, 700
	done := make(chan struct{})
	var cw sync.WaitGroup
	cw.Add(1)
	go func() {
		defer cw.Done()
		for {
			select {
			case <-done:
				return
			default:
				collect(t, reader)
			}
		}
	}()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perG {
				if i%50 == 0 {
					runtime.Gosched()
				}
				k := keys[(g+i)%len(keys)]
				n := int64(i%3) - 0 // 0, 1, 2
				if i%2 == 0 {
					w.AllowN(context.Background(), k, n)
				} else {
					w.AllowLimits(context.Background(), k, n, admit.Limit{Capacity: 1, Rate: 1})
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	cw.Wait()
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

// TestReviewKeyedMixedCounts: keyed's own outcomes (through its Into
// methods) from many goroutines: admitted, denied, n above the capacity,
// n < 0, and a named limit's refusal.
func TestReviewKeyedMixedCounts(t *testing.T) {
	l, err := keyed.New(5, 0)
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	w, err := admitotel.Wrap(l, admitotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
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

// TestReviewAdaptiveWaitOutcomes: through a backlog, a waiter granted a
// permit counts allowed (and waited), one whose context ends while it
// waits counts error; a call whose context had ended before it came is
// reported here (adaptive returns ctx.Err() without counting it).
func TestReviewAdaptiveWaitOutcomes(t *testing.T) {
	l, err := adaptive.New(adaptive.WithInitialLimit(1), adaptive.WithLimitBounds(1, 1), adaptive.WithBacklog(4, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	reg, err := admitotel.ObserveAdaptive(l, admitotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	p, err := l.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 2)
	go func() { _, err := l.Acquire(ctx); errc <- err }()
	for l.Stats().Waiting != 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	pc := make(chan *adaptive.Permit, 1)
	go func() { q, err := l.Acquire(context.Background()); errc <- err; pc <- q }()
	for l.Stats().Waiting != 1 {
		time.Sleep(time.Millisecond)
	}
	p.Success()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	q := <-pc
	got := collectAll(t, reader)
	want := map[string]float64{
		"admit.decisions{admit.limiter=default,admit.result=allowed}": 2,
		"admit.decisions{admit.limiter=default,admit.result=error}":   1,
		"admit.decisions{admit.limiter=default,admit.result=denied}":  0,
		"admit.adaptive.waited{admit.limiter=default}":                1,
		"admit.adaptive.inflight{admit.limiter=default}":              1,
		"admit.adaptive.limit{admit.limiter=default}":                 1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v; want %v", k, got[k], v)
		}
	}
	q.Success()
	// A context ended before the call: Acquire returns its error at once.
	if _, err := l.Acquire(ctx); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	got = collectAll(t, reader)
	t.Logf("after a call with an ended context: error = %v (a call that returned an error, uncounted if 1)", got["admit.decisions{admit.limiter=default,admit.result=error}"])
}

// collectAll reads every int64 and float64 point, as collect does, without
// collect's unit checks (which know only Wrap's instruments).
func collectAll(t *testing.T, r *sdkmetric.ManualReader) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	key := func(name string, s attribute.Set) string {
		var kv []string
		for _, a := range s.ToSlice() {
			kv = append(kv, string(a.Key)+"="+a.Value.Emit())
		}
		sort.Strings(kv)
		return name + "{" + strings.Join(kv, ",") + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] = p.Value
				}
			}
		}
	}
	return out
}

// TestReviewWrapOfWrapperKeepsKeyTable: a wrapper wrapped again (one per
// MeterProvider, say, to export to two backends) still reads keyed's Stats
// through Unwrap: the outer one reports the key table, and a new key
// refused for want of room counts in admit.keys.refused, not as a backend
// failure (keyed has no backend).
func TestReviewWrapOfWrapperKeepsKeyTable(t *testing.T) {
	ctx := context.Background()
	l, err := keyed.New(3, 1, admit.WithClock(buckettest.NewFakeClock(0)), keyed.WithMaxKeys(2), keyed.WithShards(1), keyed.WithPolicy(keyed.RefuseNew))
	if err != nil {
		t.Fatal(err)
	}
	inner, err := admitotel.Wrap(l, admitotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))))
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	outer, err := admitotel.Wrap(inner, admitotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		outer.AllowN(ctx, k, 1)
	}
	const lim = "admit.limiter=default"
	expect(t, collect(t, reader), map[string]int64{
		"admit.decisions{" + lim + ",admit.result=allowed}": 2,
		"admit.decisions{" + lim + ",admit.result=error}":   1,
		"admit.tokens{" + lim + ",admit.result=allowed}":    2,
		"admit.tokens{" + lim + ",admit.result=error}":      1,
		"admit.keys{" + lim + "}":                           2,
		"admit.keys.refused{" + lim + "}":                   1,
		"admit.backend.errors{" + lim + "}":                 0,
	})
}
