package main

import (
	"context"
	"net/http"
	"sync"

	"github.com/admit-go/admit/rls/settings"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// metrics is the service's rls.Observer: OpenTelemetry counters exported
// for Prometheus on /metrics (USE_PROMETHEUS). Domain labels are only the
// configured domains (others count as domain=""), so requests cannot grow
// the label set.
//
//   - admit_rls_decisions_total{domain, code}: requests by overall code;
//   - admit_rls_shadow_over_limit_total{domain}: descriptors over their
//     limit that shadow mode let through;
//   - admit_rls_backend_errors_total{domain}: requests the store could not
//     decide;
//   - admit_rls_config_loads_total{result}: configurations loaded (ok) or
//     refused (error), at start and on reload.
type metrics struct {
	provider  *sdkmetric.MeterProvider
	registry  *prometheus.Registry
	decisions metric.Int64Counter
	shadowed  metric.Int64Counter
	errors    metric.Int64Counter
	loads     metric.Int64Counter
	loadOK    metric.AddOption
	loadErr   metric.AddOption
	domains   sync.Map // domain → *domainOpts: attribute sets are built once per domain, not per request
}

type domainOpts struct {
	ok, over, unknown, plain metric.AddOption
}

func newMetrics(s *settings.Settings) (*metrics, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return nil, err
	}
	m := &metrics{provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)), registry: reg}
	meter := m.provider.Meter("github.com/admit-go/admit/rls")
	for _, c := range []struct {
		dst        *metric.Int64Counter
		name, help string
	}{
		{&m.decisions, "admit_rls_decisions", "Requests decided, by domain and overall code."},
		{&m.shadowed, "admit_rls_shadow_over_limit", "Descriptors over their limit that shadow mode let through."},
		{&m.errors, "admit_rls_backend_errors", "Requests the store could not decide."},
		{&m.loads, "admit_rls_config_loads", "Configurations loaded (result=ok) or refused (result=error)."},
	} {
		if *c.dst, err = meter.Int64Counter(c.name, metric.WithDescription(c.help)); err != nil {
			return nil, err
		}
	}
	m.loadOK = metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "ok")))
	m.loadErr = metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "error")))
	return m, nil
}

func (m *metrics) close() { m.provider.Shutdown(context.Background()) }

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

func (m *metrics) configLoad(ok bool) {
	if ok {
		m.loads.Add(context.Background(), 1, m.loadOK)
	} else {
		m.loads.Add(context.Background(), 1, m.loadErr)
	}
}

func (m *metrics) opts(domain string) *domainOpts {
	if o, ok := m.domains.Load(domain); ok {
		return o.(*domainOpts)
	}
	d := attribute.String("domain", domain)
	o := &domainOpts{
		ok:      metric.WithAttributeSet(attribute.NewSet(d, attribute.String("code", "OK"))),
		over:    metric.WithAttributeSet(attribute.NewSet(d, attribute.String("code", "OVER_LIMIT"))),
		unknown: metric.WithAttributeSet(attribute.NewSet(d, attribute.String("code", "UNKNOWN"))),
		plain:   metric.WithAttributeSet(attribute.NewSet(d)),
	}
	v, _ := m.domains.LoadOrStore(domain, o)
	return v.(*domainOpts)
}

// Decided implements rls.Observer.
func (m *metrics) Decided(domain string, code pb.RateLimitResponse_Code, shadowed int) {
	o := m.opts(domain)
	ctx := context.Background()
	switch code {
	case pb.RateLimitResponse_OK:
		m.decisions.Add(ctx, 1, o.ok)
	case pb.RateLimitResponse_OVER_LIMIT:
		m.decisions.Add(ctx, 1, o.over)
	default:
		m.decisions.Add(ctx, 1, o.unknown)
	}
	if shadowed > 0 {
		m.shadowed.Add(ctx, int64(shadowed), o.plain)
	}
}

// StoreFailed implements rls.Observer.
func (m *metrics) StoreFailed(domain string, err error) {
	m.errors.Add(context.Background(), 1, m.opts(domain).plain)
}
