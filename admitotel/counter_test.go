package admitotel_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitotel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// TestCounterCounts: two Counters on one provider, as admit-rls keeps one
// per domain, each counting what its caller decided: results, tokens,
// policies and backend errors under its own admit.limiter, as Wrap counts
// the same outcomes of AllowN.
func TestCounterCounts(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	a, err := admitotel.NewCounter(admitotel.WithMeterProvider(mp), admitotel.WithName("a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := admitotel.NewCounter(admitotel.WithMeterProvider(mp), admitotel.WithName("b"))
	if err != nil {
		t.Fatal(err)
	}
	down := fmt.Errorf("redis: %w", admit.ErrUnavailable)
	a.Count(admit.Decision{Allowed: true}, 2, nil)
	a.Count(admit.Decision{Allowed: true}, 0, nil)
	a.Count(admit.Decision{}, 3, nil)
	a.Count(admit.Decision{Allowed: true}, 1, down)                        // failed open: an error all the same
	a.Count(admit.Decision{}, 4, fmt.Errorf("%w", admit.ErrInvalidConfig)) // an error, not the backend's
	a.Count(admit.Decision{Policy: "daily"}, 1, nil)
	a.Count(admit.Decision{}, -1, errors.New("odd")) // a negative cost asks for no tokens
	b.Count(admit.Decision{}, 5, down)

	expect(t, collect(t, reader), map[string]int64{
		"admit.decisions{admit.limiter=a,admit.result=allowed}":                   2,
		"admit.decisions{admit.limiter=a,admit.result=denied}":                    1,
		"admit.decisions{admit.limiter=a,admit.policy=daily,admit.result=denied}": 1,
		"admit.decisions{admit.limiter=a,admit.result=error}":                     3,
		"admit.tokens{admit.limiter=a,admit.result=allowed}":                      2,
		"admit.tokens{admit.limiter=a,admit.result=denied}":                       4,
		"admit.tokens{admit.limiter=a,admit.result=error}":                        5,
		"admit.backend.errors{admit.limiter=a}":                                   1,
		"admit.decisions{admit.limiter=b,admit.result=error}":                     1,
		"admit.tokens{admit.limiter=b,admit.result=error}":                        5,
		"admit.backend.errors{admit.limiter=b}":                                   1,
	})
}

func TestCounterOptions(t *testing.T) {
	if _, err := admitotel.NewCounter(admitotel.WithMeterProvider(nil)); !errors.Is(err, admit.ErrInvalidConfig) {
		t.Errorf("WithMeterProvider(nil): %v; want ErrInvalidConfig", err)
	}
	if _, err := admitotel.NewCounter(nil); !errors.Is(err, admit.ErrInvalidConfig) {
		t.Errorf("nil option: %v; want ErrInvalidConfig", err)
	}
	if _, err := admitotel.NewCounter(); err != nil {
		t.Errorf("NewCounter with the global provider: %v", err)
	}
}
