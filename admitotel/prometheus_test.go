package admitotel_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitotel"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// scrape serves reg with promhttp on a loopback port, fetches it over HTTP
// as Prometheus would, in the classic text format, and parses it.
func scrape(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	ctx := context.Background()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4") // the classic text format
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// promProvider is a MeterProvider whose reader is the OpenTelemetry
// Prometheus exporter registered on the registry it returns; it is shut
// down when the test ends.
func promProvider(t *testing.T) (*prometheus.Registry, *sdkmetric.MeterProvider) {
	t.Helper()
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	return reg, mp
}

// TestPrometheusScrape serves the OpenTelemetry Prometheus exporter's
// client_golang registry with promhttp on a loopback port, fetches it over
// HTTP as Prometheus would, and reads admit_decisions_total per result.
func TestPrometheusScrape(t *testing.T) {
	reg, mp := promProvider(t)

	l, err := keyed.New(2, 1, admit.WithClock(buckettest.NewFakeClock(0)))
	if err != nil {
		t.Fatal(err)
	}
	w, err := admitotel.Wrap(l, admitotel.WithMeterProvider(mp), admitotel.WithName("api"))
	if err != nil {
		t.Fatal(err)
	}
	// Per key: a burst of 2, the clock stands still. Key a: 2 admitted, 3
	// denied; key b: 1 admitted (cost 2), then 1 denied; one cost above
	// the capacity: an error.
	ctx := context.Background()
	for range 5 {
		w.AllowN(ctx, "a", 1)
	}
	w.AllowN(ctx, "b", 2)
	w.AllowN(ctx, "b", 1)
	w.AllowN(ctx, "b", 3)

	fams := scrape(t, reg)
	want := map[string]map[string]float64{
		"admit_decisions_total": {"allowed": 2 + 1, "denied": 3 + 1, "error": 1},
		"admit_tokens_total":    {"allowed": 2 + 2, "denied": 3 + 1, "error": 3},
	}
	for name, byResult := range want {
		f := fams[name]
		if f == nil {
			t.Errorf("the scrape has no %s", name)
			continue
		}
		if f.GetType().String() != "COUNTER" {
			t.Errorf("%s is a %v", name, f.GetType())
		}
		got := map[string]float64{}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["admit_limiter"] != "api" {
				t.Errorf("%s has admit_limiter %q", name, labels["admit_limiter"])
			}
			got[labels["admit_result"]] += m.GetCounter().GetValue()
		}
		for r, v := range byResult {
			if got[r] != v {
				t.Errorf("%s{admit_result=%q} = %v; want %v", name, r, got[r], v)
			}
		}
		if len(got) != len(byResult) {
			t.Errorf("%s has results %v; want %v", name, got, byResult)
		}
	}
	if f := fams["admit_keys"]; f == nil || f.GetType().String() != "GAUGE" || len(f.GetMetric()) != 1 || f.GetMetric()[0].GetGauge().GetValue() != 2 {
		t.Errorf("admit_keys = %v; want one gauge of 2 keys", f)
	}
}

// TestPrometheusOneSeriesPerResult: under named limits every decision
// counts under its policy, and admit_decisions_total has one series per
// (policy, result): none without admit_policy, which would be a second,
// all-zero series per result. A decision without a policy (an error here)
// brings its series in; the others stay out. Before any decision, with no
// name seen yet, each result has its series without admit_policy, at 0.
func TestPrometheusOneSeriesPerResult(t *testing.T) {
	reg, mp := promProvider(t)
	l, err := keyed.NewLimits([]admit.Limit{admit.Per(time.Second, 2).Named("burst"), admit.Per(time.Hour, 10).Named("hourly")},
		admit.WithClock(buckettest.NewFakeClock(0)))
	if err != nil {
		t.Fatal(err)
	}
	w, err := admitotel.Wrap(l, admitotel.WithMeterProvider(mp), admitotel.WithName("api"))
	if err != nil {
		t.Fatal(err)
	}
	series := func(want map[string]float64) {
		t.Helper()
		f := scrape(t, reg)["admit_decisions_total"]
		got := map[string]float64{}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			k := labels["admit_policy"] + "/" + labels["admit_result"]
			if _, dup := got[k]; dup {
				t.Errorf("two series for policy %q, result %q", labels["admit_policy"], labels["admit_result"])
			}
			got[k] = m.GetCounter().GetValue()
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("admit_decisions_total by policy/result: %v; want %v", got, want)
		}
	}
	series(map[string]float64{"/allowed": 0, "/denied": 0, "/error": 0})
	ctx := context.Background()
	for range 3 {
		w.AllowN(ctx, "a", 1) // burst: 2 admitted, then denied
	}
	series(map[string]float64{"burst/allowed": 2, "burst/denied": 1, "burst/error": 0})
	w.AllowN(ctx, "a", 3) // above burst's capacity: an error, named burst
	series(map[string]float64{"burst/allowed": 2, "burst/denied": 1, "burst/error": 1})
	w.AllowLimits(ctx, "a", 1) // no limits: an error without a policy
	series(map[string]float64{"burst/allowed": 2, "burst/denied": 1, "burst/error": 1, "/error": 1})
}
