package admitotel

import (
	"context"
	"fmt"
	"sync"

	"github.com/admit-go/admit/keyed"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// scope is the instrumentation scope the instruments are created under.
const scope = "github.com/admit-go/admit/admitotel"

// Attribute keys.
const (
	attrLimiter = attribute.Key("admit.limiter")
	attrResult  = attribute.Key("admit.result")
	attrPolicy  = attribute.Key("admit.policy")
)

// statser is what keyed.Limiter offers for the key instruments.
type statser interface{ Stats() keyed.Stats }

// instruments are a wrapper's asynchronous instruments and the callback
// that observes them. The attribute options are built once here (and once
// per policy name, on its first collection) so that a collection allocates
// only what the metric SDK does.
type instruments struct {
	c     *counters
	stats statser // nil if the limiter reports no key table

	decisions, tokens, backend metric.Int64ObservableCounter
	keys                       metric.Int64ObservableGauge
	evicted, refused           metric.Int64ObservableCounter

	limiter metric.ObserveOption           // admit.limiter only
	results [nResults]metric.ObserveOption // admit.limiter, admit.result
	name    string                         // admit.limiter's value
	polMu   sync.Mutex                     // guards polOpt
	polOpt  map[string]*[nResults]metric.ObserveOption
}

func newInstruments(cfg config, c *counters, stats statser) (*instruments, error) {
	m := cfg.mp.Meter(scope)
	in := &instruments{c: c, stats: stats, name: cfg.name, polOpt: map[string]*[nResults]metric.ObserveOption{}}
	var err error
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		if err != nil {
			return nil
		}
		var inst metric.Int64ObservableCounter
		inst, err = m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		return inst
	}
	in.decisions = counter("admit.decisions", "{decision}", "Admission decisions, by result and deciding policy.")
	in.tokens = counter("admit.tokens", "{token}", "Tokens asked for, by result.")
	in.backend = counter("admit.backend.errors", "{error}", "Decisions that failed on the limiter's backend.")
	obs := []metric.Observable{in.decisions, in.tokens, in.backend}
	if stats != nil {
		in.evicted = counter("admit.keys.evicted", "{key}", "Live keys forgotten to make room for new ones.")
		in.refused = counter("admit.keys.refused", "{key}", "New keys refused for want of room.")
		if err == nil {
			in.keys, err = m.Int64ObservableGauge("admit.keys", metric.WithUnit("{key}"), metric.WithDescription("Keys the limiter holds."))
		}
		obs = append(obs, in.evicted, in.refused, in.keys)
	}
	if err != nil {
		return nil, fmt.Errorf("admitotel: creating instruments: %w", err)
	}
	lim := attrLimiter.String(cfg.name)
	in.limiter = metric.WithAttributeSet(attribute.NewSet(lim))
	for r := range nResults {
		in.results[r] = metric.WithAttributeSet(attribute.NewSet(lim, attrResult.String(resultNames[r])))
	}
	if _, err := m.RegisterCallback(in.observe, obs...); err != nil {
		return nil, fmt.Errorf("admitotel: registering the callback: %w", err)
	}
	return in, nil
}

// observe is the collection callback: it sums the per-processor counters
// and reports them, then keyed's Stats if the limiter has them.
//
// admit.decisions has one series per (policy, result) that can be told
// apart: a decision counts under its policy's name or under none, so the
// series without admit.policy of a result is observed only once it has
// counted something, or while no named policy has been seen (a limiter
// without names shows each result at 0 from the first collection). Under
// named limits it would otherwise be a second series per result, all 0.
// A series, once observed with a count, is observed at every collection.
func (in *instruments) observe(_ context.Context, o metric.Observer) error {
	policies := *in.c.policies.Load()
	t := in.c.sum()
	for r := range nResults {
		if t.decisions[r] != 0 || len(policies) == 0 {
			o.ObserveInt64(in.decisions, t.decisions[r], in.results[r])
		}
		o.ObserveInt64(in.tokens, t.tokens[r], in.results[r])
	}
	o.ObserveInt64(in.backend, t.backend, in.limiter)
	for _, p := range policies {
		d := p.sum()
		opts := in.policyOptions(p.name)
		for r := range nResults {
			o.ObserveInt64(in.decisions, d[r], opts[r])
		}
	}
	if in.stats != nil {
		st := in.stats.Stats()
		o.ObserveInt64(in.keys, int64(st.Keys), in.limiter)
		o.ObserveInt64(in.evicted, clamp(st.Evictions), in.limiter)
		o.ObserveInt64(in.refused, clamp(st.Refusals), in.limiter)
	}
	return nil
}

func (in *instruments) policyOptions(name string) *[nResults]metric.ObserveOption {
	in.polMu.Lock()
	defer in.polMu.Unlock()
	opts := in.polOpt[name]
	if opts == nil {
		opts = new([nResults]metric.ObserveOption)
		for r := range nResults {
			opts[r] = metric.WithAttributeSet(attribute.NewSet(attrLimiter.String(in.name),
				attrResult.String(resultNames[r]), attrPolicy.String(name)))
		}
		in.polOpt[name] = opts
	}
	return opts
}
