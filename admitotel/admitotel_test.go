package admitotel_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitotel"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/mutexbucket"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// collect reads every int64 data point through r as "instrument{attrs}"
// (attributes sorted, key=value, comma-separated) → value, and checks each
// instrument's kind and unit (Wrap's and ObserveAdaptive's; the adaptive
// baseline, a float gauge, is checked and left out).
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	units := map[string]string{
		"admit.decisions": "{decision}", "admit.tokens": "{token}", "admit.keys": "{key}",
		"admit.keys.evicted": "{key}", "admit.keys.refused": "{key}", "admit.backend.errors": "{error}",
		"admit.adaptive.waited": "{decision}", "admit.adaptive.outcomes": "{call}", "admit.adaptive.limit": "{call}",
		"admit.adaptive.inflight": "{call}", "admit.adaptive.waiting": "{call}", "admit.adaptive.baseline": "s",
	}
	gauges := map[string]bool{"admit.keys": true, "admit.adaptive.limit": true, "admit.adaptive.inflight": true, "admit.adaptive.waiting": true}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if u, ok := units[m.Name]; !ok || u != m.Unit {
				t.Errorf("instrument %s has unit %q; want %q", m.Name, m.Unit, u)
			}
			var pts []metricdata.DataPoint[int64]
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if !d.IsMonotonic || gauges[m.Name] {
					t.Errorf("%s: monotonic %v", m.Name, d.IsMonotonic)
				}
				pts = d.DataPoints
			case metricdata.Gauge[int64]:
				if !gauges[m.Name] {
					t.Errorf("%s is a gauge", m.Name)
				}
				pts = d.DataPoints
			case metricdata.Gauge[float64]:
				if m.Name != "admit.adaptive.baseline" {
					t.Errorf("%s is a float gauge", m.Name)
				}
				continue // the one float instrument: no exact value to expect
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
			for _, p := range pts {
				var kv []string
				for _, a := range p.Attributes.ToSlice() {
					kv = append(kv, string(a.Key)+"="+a.Value.String())
				}
				sort.Strings(kv)
				out[m.Name+"{"+strings.Join(kv, ",")+"}"] = p.Value
			}
		}
	}
	return out
}

// manualProvider returns an option that sends the instruments to a new
// MeterProvider, and the manual reader that collects them.
func manualProvider() (admitotel.Option, *sdkmetric.ManualReader) {
	r := sdkmetric.NewManualReader()
	return admitotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))), r
}

// wrapManual wraps l with its instruments on a new MeterProvider and
// returns the wrapper and the manual reader that collects them.
func wrapManual(t *testing.T, l admit.KeyedLimiter) (*admitotel.Limiter, *sdkmetric.ManualReader) {
	t.Helper()
	mp, reader := manualProvider()
	w, err := admitotel.Wrap(l, mp)
	if err != nil {
		t.Fatal(err)
	}
	return w, reader
}

// expect compares got with want, which lists every point that must exist;
// any other point must be 0.
func expect(t *testing.T, got, want map[string]int64) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d; want %d", k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok && v != 0 {
			t.Errorf("unexpected %s = %d", k, v)
		}
	}
}

func TestWrapKeyedCounts(t *testing.T) {
	ctx := context.Background()
	clk := buckettest.NewFakeClock(0)
	// Two keys at most, one shard, new keys refused: the sequence below
	// fills the table with two live buckets and then has a third refused.
	l, err := keyed.New(3, 1, admit.WithClock(clk), keyed.WithMaxKeys(2), keyed.WithShards(1), keyed.WithPolicy(keyed.RefuseNew))
	if err != nil {
		t.Fatal(err)
	}
	mp, reader := manualProvider()
	w, err := admitotel.Wrap(l, mp, admitotel.WithName("api"))
	if err != nil {
		t.Fatal(err)
	}
	call := func(key string, n int64, wantAllowed bool, wantErr error) {
		t.Helper()
		d, err := w.AllowN(ctx, key, n)
		if d.Allowed != wantAllowed || !errors.Is(err, wantErr) {
			t.Fatalf("AllowN(%q, %d) = %+v, %v; want allowed %v, error %v", key, n, d, err, wantAllowed, wantErr)
		}
	}
	call("a", 1, true, nil)
	call("a", 1, true, nil)
	call("a", 1, true, nil)
	call("a", 1, false, nil)                    // drained
	call("a", 4, false, admit.ErrUnsatisfiable) // above the capacity
	call("b", 2, true, nil)
	call("c", 1, false, admit.ErrUnavailable) // refused: a and b are live
	call("a", 0, true, nil)                   // a peek

	const lim = "admit.limiter=api"
	expect(t, collect(t, reader), map[string]int64{
		"admit.decisions{" + lim + ",admit.result=allowed}": 5,
		"admit.decisions{" + lim + ",admit.result=denied}":  1,
		"admit.decisions{" + lim + ",admit.result=error}":   2,
		"admit.tokens{" + lim + ",admit.result=allowed}":    5,
		"admit.tokens{" + lim + ",admit.result=denied}":     1,
		"admit.tokens{" + lim + ",admit.result=error}":      5,
		"admit.keys{" + lim + "}":                           2,
		"admit.keys.refused{" + lim + "}":                   1,
		"admit.keys.evicted{" + lim + "}":                   0,
		"admit.backend.errors{" + lim + "}":                 0, // a refusal is not a backend failure
	})

	// Counters are cumulative: a second collection after more decisions
	// adds to the first.
	clk.Advance(time.Second)
	call("a", 1, true, nil)
	got := collect(t, reader)
	if v := got["admit.decisions{"+lim+",admit.result=allowed}"]; v != 6 {
		t.Errorf("allowed after one more admission = %d; want 6", v)
	}
}

func TestWrapKeyedEvictions(t *testing.T) {
	ctx := context.Background()
	l, err := keyed.New(2, 1, admit.WithClock(buckettest.NewFakeClock(0)), keyed.WithMaxKeys(2), keyed.WithShards(1))
	if err != nil {
		t.Fatal(err)
	}
	w, reader := wrapManual(t, l)
	// Five live keys through a table of two: each of the last three
	// evicts the least recently used.
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		if d, err := w.AllowN(ctx, k, 1); err != nil || !d.Allowed {
			t.Fatalf("AllowN(%q) = %+v, %v", k, d, err)
		}
	}
	const lim = "admit.limiter=default"
	expect(t, collect(t, reader), map[string]int64{
		"admit.decisions{" + lim + ",admit.result=allowed}": 5,
		"admit.tokens{" + lim + ",admit.result=allowed}":    5,
		"admit.keys{" + lim + "}":                           2,
		"admit.keys.evicted{" + lim + "}":                   3,
	})
}

func TestWrapLimiterCounts(t *testing.T) {
	b, err := mutexbucket.New(2, 0, admit.WithClock(buckettest.NewFakeClock(0)))
	if err != nil {
		t.Fatal(err)
	}
	mp, reader := manualProvider()
	w, err := admitotel.WrapLimiter(b, mp, admitotel.WithName("crawler"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got := []any{
		w.TryAcquire(), w.TryAcquireN(0), w.TryAcquire(), w.TryAcquire(), w.TryAcquireN(2),
		errors.Is(w.AcquireN(ctx, 5), admit.ErrUnsatisfiable), // above the capacity
		errors.Is(w.Acquire(ctx), admit.ErrUnsatisfiable),     // rate 0, empty
		w.Tokens(),
	}
	if want := []any{true, true, true, false, false, true, true, 0.0}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("calls returned %v; want %v", got, want)
	}
	const lim = "admit.limiter=crawler"
	expect(t, collect(t, reader), map[string]int64{
		"admit.decisions{" + lim + ",admit.result=allowed}": 3,
		"admit.decisions{" + lim + ",admit.result=denied}":  2,
		"admit.decisions{" + lim + ",admit.result=error}":   2,
		"admit.tokens{" + lim + ",admit.result=allowed}":    2,
		"admit.tokens{" + lim + ",admit.result=denied}":     3,
		"admit.tokens{" + lim + ",admit.result=error}":      6,
	})
}

func TestWrapOptions(t *testing.T) {
	l, err := keyed.New(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admitotel.Wrap(l, admitotel.WithMeterProvider(nil)); !errors.Is(err, admit.ErrInvalidConfig) {
		t.Errorf("WithMeterProvider(nil): %v; want ErrInvalidConfig", err)
	}
	if _, err := admitotel.WrapLimiter(mustBucket(t), nil); !errors.Is(err, admit.ErrInvalidConfig) {
		t.Errorf("nil option: %v; want ErrInvalidConfig", err)
	}
	// The default provider is the global one (a no-op unless set).
	if _, err := admitotel.Wrap(l); err != nil {
		t.Errorf("Wrap with the global provider: %v", err)
	}
}

func mustBucket(t *testing.T) admit.Limiter {
	b, err := mutexbucket.New(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWrapOfWrapperKeepsKeyTable: a wrapper wrapped again (one per
// MeterProvider, say, to export to two backends) still reads keyed's Stats
// through Unwrap: the outer one reports the key table, and a new key
// refused for want of room counts in admit.keys.refused, not as a backend
// failure (keyed has no backend).
func TestWrapOfWrapperKeepsKeyTable(t *testing.T) {
	ctx := context.Background()
	l, err := keyed.New(3, 1, admit.WithClock(buckettest.NewFakeClock(0)), keyed.WithMaxKeys(2), keyed.WithShards(1), keyed.WithPolicy(keyed.RefuseNew))
	if err != nil {
		t.Fatal(err)
	}
	inner, _ := wrapManual(t, l)
	outer, reader := wrapManual(t, inner)
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
