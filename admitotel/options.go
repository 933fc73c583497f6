package admitotel

import (
	"fmt"

	"github.com/admit-go/admit"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// Option configures Wrap and WrapLimiter.
type Option func(*config)

type config struct {
	mp   metric.MeterProvider
	name string
	err  error
}

func newConfig(opts []Option) (config, error) {
	c := config{name: "default"}
	for i, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("%w: admitotel: option %d is nil", admit.ErrInvalidConfig, i)
		}
		o(&c)
		if c.err != nil {
			return config{}, c.err
		}
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	return c, nil
}

// WithMeterProvider sets the MeterProvider the instruments are created
// with; the default is otel.GetMeterProvider(), read when Wrap or
// WrapLimiter is called. A nil mp is a configuration error.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp == nil {
			c.err = fmt.Errorf("%w: admitotel: WithMeterProvider(nil)", admit.ErrInvalidConfig)
			return
		}
		c.mp = mp
	}
}

// WithName sets the value of the admit.limiter attribute on every
// instrument; the default is "default". Give each wrapper on one
// MeterProvider its own name: two that share one report the same series.
func WithName(name string) Option {
	return func(c *config) { c.name = name }
}
