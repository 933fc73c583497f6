package admitotel_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitotel"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// perLimit is a test helper, not a policy limiter to copy: an
// admit.PolicyLimiter made of one keyed.Limiter per limit Name, asked in
// order, so it is NOT all or nothing (a limit that admits before a later one
// denies keeps the tokens it gave). It reports the deciding limit as
// admit.PolicyLimiter's rule 4 says for the cases these tests build, which
// is all the wrapper reads. keyed's own AllowLimits replaces it once it is
// on main.
type perLimit struct {
	clk admit.Clock
	mu  sync.Mutex
	m   map[string]*keyed.Limiter
}

func (p *perLimit) AllowN(ctx context.Context, key string, n int64) (admit.Decision, error) {
	return p.AllowLimits(ctx, key, n, admit.Limit{Capacity: 1, Rate: 1})
}

func (p *perLimit) AllowLimits(ctx context.Context, key string, n int64, limits ...admit.Limit) (admit.Decision, error) {
	if err := admit.ValidateLimits(limits); err != nil {
		return admit.Decision{}, err
	}
	var out admit.Decision
	for i, lim := range limits {
		p.mu.Lock()
		if p.m == nil {
			p.m = map[string]*keyed.Limiter{}
		}
		l := p.m[lim.Name]
		if l == nil {
			var err error
			if l, err = keyed.New(lim.Capacity, lim.Rate, admit.WithClock(p.clk)); err != nil {
				p.mu.Unlock()
				return admit.Decision{}, err
			}
			p.m[lim.Name] = l
		}
		p.mu.Unlock()
		d, err := l.AllowN(ctx, key, n)
		d.Policy = lim.Name
		if err != nil || !d.Allowed {
			return d, err
		}
		if i == 0 || d.Remaining < out.Remaining {
			out = d
		}
	}
	return out, nil
}

func TestWrapPolicyCounts(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	w, err := admitotel.Wrap(&perLimit{clk: buckettest.NewFakeClock(0)},
		admitotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))), admitotel.WithName("api"))
	if err != nil {
		t.Fatal(err)
	}
	burst := admit.Limit{Name: "burst", Capacity: 2, Rate: 1}
	daily := admit.Limit{Name: "daily", Capacity: 5, Rate: 1e-5}
	// Key a: 2 admitted (burst has the fewest left), then burst denies
	// twice. Key b, daily only, with a cost of 3: admitted once, then
	// denied by daily. One call with no limits: an error, no policy.
	want := []string{"burst", "burst", "burst", "burst", "daily", "daily"}
	var got []string
	for range 4 {
		d, err := w.AllowLimits(ctx, "a", 1, burst, daily)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, d.Policy)
	}
	for range 2 {
		d, err := w.AllowLimits(ctx, "b", 3, daily)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, d.Policy)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("deciding policies %v; want %v", got, want)
	}
	if _, err := w.AllowLimits(ctx, "c", 1); !errors.Is(err, admit.ErrInvalidConfig) {
		t.Fatalf("no limits: %v; want ErrInvalidConfig", err)
	}
	const lim = "admit.limiter=api"
	expect(t, collect(t, reader), map[string]int64{
		"admit.decisions{" + lim + ",admit.policy=burst,admit.result=allowed}": 2,
		"admit.decisions{" + lim + ",admit.policy=burst,admit.result=denied}":  2,
		"admit.decisions{" + lim + ",admit.policy=daily,admit.result=allowed}": 1,
		"admit.decisions{" + lim + ",admit.policy=daily,admit.result=denied}":  1,
		"admit.decisions{" + lim + ",admit.result=error}":                      1,
		"admit.tokens{" + lim + ",admit.result=allowed}":                       2 + 3,
		"admit.tokens{" + lim + ",admit.result=denied}":                        2 + 3,
		"admit.tokens{" + lim + ",admit.result=error}":                         1,
	})
}

// TestWrapPolicyNamesBounded: past 64 names, decisions count without
// admit.policy instead of growing the series without bound.
func TestWrapPolicyNamesBounded(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	w, err := admitotel.Wrap(&perLimit{clk: buckettest.NewFakeClock(0)},
		admitotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 70 {
		if d, err := w.AllowLimits(ctx, "k", 1, admit.Limit{Name: fmt.Sprint("p", i), Capacity: 1, Rate: 1}); err != nil || !d.Allowed {
			t.Fatalf("limit %d: %+v, %v", i, d, err)
		}
	}
	named, unnamed := 0, int64(0)
	for k, v := range collect(t, reader) {
		switch k {
		case "admit.decisions{admit.limiter=default,admit.result=allowed}":
			unnamed = v
		default:
			if v == 1 && len(k) > len("admit.decisions{") && k[:len("admit.decisions{")] == "admit.decisions{" {
				named++
			}
		}
	}
	if named != 64 || unnamed != 6 {
		t.Errorf("%d policies counted by name and %d decisions without; want 64 and 6", named, unnamed)
	}
}

func TestWrapNotPolicyLimiter(t *testing.T) {
	l, err := keyed.New(2, 1)
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	// forward (overhead_bench_test.go) passes AllowN on and has no
	// AllowLimits, whatever keyed offers.
	w, err := admitotel.Wrap(&forward{l}, admitotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AllowLimits(context.Background(), "k", 1, admit.Limit{Capacity: 1, Rate: 1}); !errors.Is(err, admit.ErrInvalidConfig) {
		t.Fatalf("AllowLimits on a wrapped non-policy limiter: %v; want ErrInvalidConfig", err)
	}
	expect(t, collect(t, reader), map[string]int64{
		"admit.decisions{admit.limiter=default,admit.result=error}": 1,
		"admit.tokens{admit.limiter=default,admit.result=error}":    1,
	})
}
