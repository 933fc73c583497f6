package admitotel_test

import (
	"context"
	"fmt"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitotel"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func ExampleWrap() {
	// In a service: the MeterProvider that an exporter (Prometheus, OTLP)
	// reads. Here a ManualReader, read at the end.
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	// Each client: a burst of 2, then 1 request per second. (A stopped
	// fake clock keeps the output fixed; drop the option in real code.)
	l, err := keyed.New(2, 1, admit.WithClock(buckettest.NewFakeClock(0)))
	if err != nil {
		panic(err)
	}
	// The wrapper goes wherever the limiter went: admithttp.Middleware,
	// admitgrpc's interceptors.
	w, err := admitotel.Wrap(l, admitotel.WithMeterProvider(mp), admitotel.WithName("api"))
	if err != nil {
		panic(err)
	}
	for range 3 {
		w.AllowN(context.Background(), "192.0.2.1", 1)
	}

	printByResult(reader, "admit.decisions")
	// Unordered output:
	// admit.decisions{admit.result=allowed} 2
	// admit.decisions{admit.result=denied} 1
	// admit.decisions{admit.result=error} 0
}

func ExampleCounter() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	// A decider that is not an admit.KeyedLimiter (here, a request's
	// several buckets decided together) counts each of its decisions on a
	// Counter: one per name, built once.
	c, err := admitotel.NewCounter(admitotel.WithMeterProvider(mp), admitotel.WithName("checkout"))
	if err != nil {
		panic(err)
	}
	c.Count(admit.Decision{Allowed: true}, 3, nil) // admitted, at a cost of 3
	c.Count(admit.Decision{Allowed: false}, 1, nil)

	printByResult(reader, "admit.tokens")
	// Unordered output:
	// admit.tokens{admit.result=allowed} 3
	// admit.tokens{admit.result=denied} 1
	// admit.tokens{admit.result=error} 0
}

// printByResult collects through reader and prints the instrument's points
// by admit.result, as an exporter would read them.
func printByResult(reader *sdkmetric.ManualReader, instrument string) {
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != instrument {
			continue
		}
		for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
			result, _ := p.Attributes.Value("admit.result")
			fmt.Printf("%s{admit.result=%s} %d\n", m.Name, result.AsString(), p.Value)
		}
	}
}
