package admitotel_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/adaptive"
	"github.com/admit-go/admit/admitotel"
)

// TestObserveAdaptiveScrape drives an adaptive limiter through every kind
// of decision and outcome, then scrapes a real Prometheus endpoint on
// loopback and reads the counters and gauges.
func TestObserveAdaptiveScrape(t *testing.T) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	defer mp.Shutdown(context.Background())

	l, err := adaptive.New(adaptive.WithInitialLimit(3))
	if err != nil {
		t.Fatal(err)
	}
	r, err := admitotel.ObserveAdaptive(l, admitotel.WithMeterProvider(mp), admitotel.WithName("backend"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Unregister()

	ctx := context.Background()
	var ps []*adaptive.Permit
	for range 3 {
		p, err := l.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	for range 2 {
		if _, err := l.Acquire(ctx); !errors.Is(err, admit.ErrOverloaded) {
			t.Fatalf("want shed, got %v", err)
		}
	}
	ps[0].Success()
	ps[1].Dropped()

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string, labels map[string]string) float64 {
		t.Helper()
		f, ok := fams[name]
		if !ok {
			t.Fatalf("no %s in the scrape", name)
		}
	next:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			if got["admit_limiter"] != "backend" {
				continue
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
		t.Fatalf("no %s with %v", name, labels)
		return 0
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"admit_decisions_total", map[string]string{"admit_result": "allowed"}, 3},
		{"admit_decisions_total", map[string]string{"admit_result": "denied"}, 2},
		{"admit_decisions_total", map[string]string{"admit_result": "error"}, 0},
		{"admit_adaptive_outcomes_total", map[string]string{"admit_outcome": "success"}, 1},
		{"admit_adaptive_outcomes_total", map[string]string{"admit_outcome": "dropped"}, 1},
		{"admit_adaptive_outcomes_total", map[string]string{"admit_outcome": "ignored"}, 0},
		{"admit_adaptive_limit", nil, 3},
		{"admit_adaptive_inflight", nil, 1},
		{"admit_adaptive_waiting", nil, 0},
	} {
		if got := get(c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	ps[2].Ignore()
}

func TestObserveAdaptiveErrors(t *testing.T) {
	if _, err := admitotel.ObserveAdaptive(nil); !errors.Is(err, admit.ErrInvalidConfig) {
		t.Errorf("nil limiter: %v", err)
	}
	l, _ := adaptive.New()
	if _, err := admitotel.ObserveAdaptive(l, admitotel.WithMeterProvider(nil)); !errors.Is(err, admit.ErrInvalidConfig) {
		t.Errorf("nil provider: %v", err)
	}
}

// TestObserveAdaptiveWaitOutcomes: through a backlog, a waiter granted a
// permit counts allowed (and waited), one whose context ends while it
// waits counts error; a call whose context had ended before it came is
// not counted (it made no decision: Acquire returns ctx.Err() at once).
func TestObserveAdaptiveWaitOutcomes(t *testing.T) {
	l, err := adaptive.New(adaptive.WithInitialLimit(1), adaptive.WithLimitBounds(1, 1), adaptive.WithBacklog(4, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	mp, reader := manualProvider()
	reg, err := admitotel.ObserveAdaptive(l, mp)
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
	const lim = "admit.limiter=default"
	want := map[string]int64{
		"admit.decisions{" + lim + ",admit.result=allowed}":          2,
		"admit.decisions{" + lim + ",admit.result=error}":            1,
		"admit.adaptive.waited{" + lim + "}":                         1,
		"admit.adaptive.outcomes{" + lim + ",admit.outcome=success}": 1,
		"admit.adaptive.limit{" + lim + "}":                          1,
		"admit.adaptive.inflight{" + lim + "}":                       1,
	}
	expect(t, collect(t, reader), want)
	q.Success()
	// A context ended before the call: Acquire returns its error at once,
	// and counts nothing.
	if _, err := l.Acquire(ctx); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	want["admit.adaptive.outcomes{"+lim+",admit.outcome=success}"] = 2
	want["admit.adaptive.inflight{"+lim+"}"] = 0
	expect(t, collect(t, reader), want)
}
