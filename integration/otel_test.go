package integration_test

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitotel"
	"github.com/admit-go/admit/redisbucket"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// points reads every int64 sum through r as "instrument{k=v,...}" → value.
func points(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, p := range sum.DataPoints {
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

// TestOtelRedisBackendErrors points redisbucket at a loopback port nothing
// listens on: every decision fails on the backend (connection refused), the
// failure policy (closed, the default) denies, and admitotel counts each
// as an error and a backend error.
func TestOtelRedisBackendErrors(t *testing.T) {
	l, err := redisbucket.New(deadRedis(t), 10, 1, redisbucket.WithTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	w, err := admitotel.Wrap(l, admitotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))), admitotel.WithName("redis"))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if d, err := w.AllowN(context.Background(), "k", 2); d.Allowed || !errors.Is(err, admit.ErrUnavailable) {
			t.Fatalf("AllowN = %+v, %v; want a denial wrapping ErrUnavailable", d, err)
		}
	}
	const lim = "admit.limiter=redis"
	want := map[string]int64{
		"admit.decisions{" + lim + ",admit.result=error}": 3,
		"admit.tokens{" + lim + ",admit.result=error}":    6,
		"admit.backend.errors{" + lim + "}":               3,
	}
	got := points(t, reader)
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
