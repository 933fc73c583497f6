package admitotel

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/adaptive"
)

// ObserveAdaptive reports an adaptive limiter's decisions and state through
// the MeterProvider of opts, every instrument with admit.limiter =
// WithName's name:
//
//	admit.decisions          counter {decision}  admit.result: allowed (at once or after waiting), denied (shed), error (the caller's context ended while it waited)
//	admit.adaptive.waited    counter {decision}  permits handed out after waiting in the backlog (also counted allowed)
//	admit.adaptive.outcomes  counter {call}      admit.outcome: success, dropped, ignored (how permits ended)
//	admit.adaptive.limit     gauge   {call}      the current limit
//	admit.adaptive.inflight  gauge   {call}      permits out
//	admit.adaptive.waiting   gauge   {call}      callers in the backlog
//	admit.adaptive.baseline  gauge   s           the no-load latency estimate (absent until the limiter has one)
//
// A Prometheus exporter names them admit_decisions_total,
// admit_adaptive_limit and so on. Nothing is recorded on the limiter's hot
// path: one callback reads the limiter's Stats, under its mutex, at each
// collection, so it counts what the limiter's Stats count: a call whose
// context had ended before it came returns ctx.Err() without a decision
// and is in no count (Wrap's limiters count such a call as an error). The
// returned Registration's Unregister stops the reports.
func ObserveAdaptive(l *adaptive.Limiter, opts ...Option) (metric.Registration, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: admitotel: ObserveAdaptive(nil)", admit.ErrInvalidConfig)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	m := cfg.mp.Meter(scope)
	var firstErr error
	check := func(err error) {
		if firstErr == nil && err != nil {
			firstErr = err
		}
	}
	decisions, err := m.Int64ObservableCounter("admit.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Admission decisions, by result and deciding policy."))
	check(err)
	waited, err := m.Int64ObservableCounter("admit.adaptive.waited", metric.WithUnit("{decision}"),
		metric.WithDescription("Permits handed out after waiting in the backlog."))
	check(err)
	outcomes, err := m.Int64ObservableCounter("admit.adaptive.outcomes", metric.WithUnit("{call}"),
		metric.WithDescription("Permits ended, by outcome."))
	check(err)
	limit, err := m.Int64ObservableGauge("admit.adaptive.limit", metric.WithUnit("{call}"),
		metric.WithDescription("The adaptive concurrency limit."))
	check(err)
	inflight, err := m.Int64ObservableGauge("admit.adaptive.inflight", metric.WithUnit("{call}"),
		metric.WithDescription("Permits out."))
	check(err)
	waiting, err := m.Int64ObservableGauge("admit.adaptive.waiting", metric.WithUnit("{call}"),
		metric.WithDescription("Callers waiting in the backlog."))
	check(err)
	baseline, err := m.Float64ObservableGauge("admit.adaptive.baseline", metric.WithUnit("s"),
		metric.WithDescription("The limiter's estimate of the no-load latency."))
	check(err)
	if firstErr != nil {
		return nil, fmt.Errorf("admitotel: creating instruments: %w", firstErr)
	}
	lim := attrLimiter.String(cfg.name)
	only := metric.WithAttributeSet(attribute.NewSet(lim))
	result := func(r int) metric.ObserveOption {
		return metric.WithAttributeSet(attribute.NewSet(lim, attrResult.String(resultNames[r])))
	}
	outcome := func(o string) metric.ObserveOption {
		return metric.WithAttributeSet(attribute.NewSet(lim, attribute.String("admit.outcome", o)))
	}
	allowed, denied, failed := result(0), result(1), result(2)
	success, dropped, ignored := outcome("success"), outcome("dropped"), outcome("ignored")
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := l.Stats()
		o.ObserveInt64(decisions, clamp(s.Admitted+s.Waited), allowed)
		o.ObserveInt64(decisions, clamp(s.Shed), denied)
		o.ObserveInt64(decisions, clamp(s.Cancelled), failed)
		o.ObserveInt64(waited, clamp(s.Waited), only)
		o.ObserveInt64(outcomes, clamp(s.Successes), success)
		o.ObserveInt64(outcomes, clamp(s.Drops), dropped)
		o.ObserveInt64(outcomes, clamp(s.Ignored), ignored)
		o.ObserveInt64(limit, int64(s.Limit), only)
		o.ObserveInt64(inflight, int64(s.InFlight), only)
		o.ObserveInt64(waiting, int64(s.Waiting), only)
		if s.Baseline > 0 {
			o.ObserveFloat64(baseline, float64(s.Baseline)/1e9, only)
		}
		return nil
	}, decisions, waited, outcomes, limit, inflight, waiting, baseline)
	if err != nil {
		return nil, fmt.Errorf("admitotel: registering the callback: %w", err)
	}
	return reg, nil
}
