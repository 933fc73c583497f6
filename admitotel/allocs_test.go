package admitotel_test

import (
	"context"
	"testing"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitotel"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/mutexbucket"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// TestZeroAllocs checks that a wrapped decision allocates nothing beyond
// what the bare one does: nothing, for a held key of keyed and for a
// mutexbucket, admitted or denied; and that a Counter's Count allocates
// nothing. (An error return allocates in the bare limiters already; the
// wrapper adds nothing to it either.)
func TestZeroAllocs(t *testing.T) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	ctx := context.Background()
	l, err := keyed.New(1e9, 1e9)
	if err != nil {
		t.Fatal(err)
	}
	w, err := admitotel.Wrap(l, admitotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	drained, err := keyed.New(1, 1e-6)
	if err != nil {
		t.Fatal(err)
	}
	wd, err := admitotel.Wrap(drained, admitotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	b, err := mutexbucket.New(1e9, 1e9)
	if err != nil {
		t.Fatal(err)
	}
	wb, err := admitotel.WrapLimiter(b, admitotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	c, err := admitotel.NewCounter(admitotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	w.AllowN(ctx, "k", 1)  // insert the key
	wd.AllowN(ctx, "k", 1) // and drain this one
	for name, f := range map[string]func(){
		"keyed admit": func() {
			if d, _ := w.AllowN(ctx, "k", 1); !d.Allowed {
				t.Fatal("denied")
			}
		},
		"keyed deny": func() {
			if d, _ := wd.AllowN(ctx, "k", 1); d.Allowed {
				t.Fatal("admitted")
			}
		},
		"bucket TryAcquire":  func() { wb.TryAcquire() },
		"bucket TryAcquireN": func() { wb.TryAcquireN(3) },
		"bucket AcquireN":    func() { wb.AcquireN(ctx, 2) },
		"Counter allowed":    func() { c.Count(admit.Decision{Allowed: true}, 1, nil) },
		"Counter denied":     func() { c.Count(admit.Decision{}, 1, nil) },
	} {
		if a := testing.AllocsPerRun(100, f); a != 0 {
			t.Errorf("%s: %v allocs per call; want 0", name, a)
		}
	}
}
