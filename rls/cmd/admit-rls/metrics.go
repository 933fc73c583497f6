package main

import (
	"context"
	"log/slog"
	"net/http"
	"sync"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitotel"
	"github.com/admit-go/admit/rls/settings"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// metrics is the service's rls.Observer: OpenTelemetry instruments exported
// for Prometheus on /metrics (USE_PROMETHEUS). Domain labels are only the
// configured domains (others count as ""), so requests cannot grow the
// label set.
//
// Decisions go through admitotel, one Counter per domain named after it
// (admit.limiter = the domain), each request counted once:
//
//   - admit_decisions_total{admit_limiter, admit_result}: requests by
//     outcome, allowed (OK), denied (OVER_LIMIT) or error (the store could
//     not decide);
//   - admit_tokens_total{admit_limiter, admit_result}: what they asked
//     for, the costs of their limited descriptors;
//   - admit_backend_errors_total{admit_limiter}: requests whose store
//     error wraps admit.ErrUnavailable (Redis down or slow).
//
// admit-rls's own counters, on the OpenTelemetry SDK:
//
//   - admit_rls_shadow_over_limit_total{domain}: descriptors over their
//     limit that shadow mode let through;
//   - admit_rls_backend_errors_total{domain}: requests the store could not
//     decide, whatever its error;
//   - admit_rls_config_loads_total{result}: configurations loaded (ok) or
//     refused (error), at start and on reload.
type metrics struct {
	provider *sdkmetric.MeterProvider
	registry *prometheus.Registry
	shadowed metric.Int64Counter
	errors   metric.Int64Counter
	loads    metric.Int64Counter
	loadOK   metric.AddOption
	loadErr  metric.AddOption
	// domains maps a domain to its *domainMetrics. A domain's are created
	// once, under mu, the first time a request names it, and kept for the
	// process's lifetime (admitotel's callbacks stay registered): the
	// domains are those of the configurations loaded, a bounded set.
	domains sync.Map
	mu      sync.Mutex
}

// domainMetrics are one domain's: its admitotel Counter and the attribute
// set of admit-rls's own counters, built once rather than per request.
type domainMetrics struct {
	decisions *admitotel.Counter // nil if it could not be created (logged)
	attrs     metric.AddOption
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
	// The unconfigured domain's Counter now, so that an instrument that
	// cannot be created stops the start rather than a request's metrics.
	if _, err := m.newDomain(""); err != nil {
		return nil, err
	}
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

// domain returns domain's metrics, creating them on its first request.
func (m *metrics) domain(domain string) *domainMetrics {
	if d, ok := m.domains.Load(domain); ok {
		return d.(*domainMetrics)
	}
	d, err := m.newDomain(domain)
	if err != nil {
		slog.Error("metrics: this domain's decisions are not counted", "domain", domain, "err", err)
	}
	return d
}

// newDomain creates and stores domain's metrics, unless another request
// did first. Their Counter is nil, and err set, if it cannot be created.
func (m *metrics) newDomain(domain string) (d *domainMetrics, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d, ok := m.domains.Load(domain); ok {
		return d.(*domainMetrics), nil
	}
	d = &domainMetrics{attrs: metric.WithAttributeSet(attribute.NewSet(attribute.String("domain", domain)))}
	d.decisions, err = admitotel.NewCounter(admitotel.WithMeterProvider(m.provider), admitotel.WithName(domain))
	m.domains.Store(domain, d)
	return d, err
}

// Decided implements rls.Observer.
func (m *metrics) Decided(domain string, code pb.RateLimitResponse_Code, tokens int64, shadowed int) {
	d := m.domain(domain)
	if d.decisions != nil {
		d.decisions.Count(admit.Decision{Allowed: code != pb.RateLimitResponse_OVER_LIMIT}, tokens, nil)
	}
	if shadowed > 0 {
		m.shadowed.Add(context.Background(), int64(shadowed), d.attrs)
	}
}

// StoreFailed implements rls.Observer.
func (m *metrics) StoreFailed(domain string, tokens int64, err error) {
	d := m.domain(domain)
	if d.decisions != nil {
		d.decisions.Count(admit.Decision{}, tokens, err)
	}
	m.errors.Add(context.Background(), 1, d.attrs)
}
