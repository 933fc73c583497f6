package integration_test

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitgrpc"
	"github.com/admit-go/admit/admitotel"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/redisbucket"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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

// TestOtelGRPCUnsatisfiableCountedOnce: a call that costs more than the
// whole quota is one decision, an error. The interceptor then peeks (n = 0)
// for the key's state to fill the refusal's metadata; through admitotel's
// wrapper that peek was counted as an allowed decision.
func TestOtelGRPCUnsatisfiableCountedOnce(t *testing.T) {
	l, err := keyed.New(2, 1)
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	w, err := admitotel.Wrap(l, admitotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))), admitotel.WithName("grpc"))
	if err != nil {
		t.Fatal(err)
	}
	srv := startGRPC(t, admitgrpc.UnaryServerInterceptor(w, admitgrpc.WithCost(func(context.Context, string) int64 { return 3 })))
	md, err := check(t, dialGRPC(t, srv.addr))
	if status.Code(err) != codes.ResourceExhausted || srv.handled.Load() != 0 {
		t.Fatalf("code %v, handled %d; want ResourceExhausted, nothing handled", status.Code(err), srv.handled.Load())
	}
	if len(md.Get("ratelimit")) == 0 {
		t.Errorf("no ratelimit metadata (%v): the peek for it did not happen", md)
	}
	got := points(t, reader)
	var decisions int64
	for k, v := range got {
		if strings.HasPrefix(k, "admit.decisions{") {
			decisions += v
			if !strings.Contains(k, "admit.result=error") && v != 0 {
				t.Errorf("%s = %d; want only the one error", k, v)
			}
		}
	}
	if decisions != 1 {
		t.Errorf("%d decisions counted; want 1 (%v)", decisions, got)
	}
}
