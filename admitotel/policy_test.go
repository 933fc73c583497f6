package admitotel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitotel"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
)

// newPolicyLimiter is keyed's PolicyLimiter on a stopped fake clock.
func newPolicyLimiter(t testing.TB) *keyed.Limiter {
	l, err := keyed.New(1, 1, admit.WithClock(buckettest.NewFakeClock(0)))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestWrapPolicyCounts(t *testing.T) {
	ctx := context.Background()
	mp, reader := manualProvider()
	w, err := admitotel.Wrap(newPolicyLimiter(t),
		mp, admitotel.WithName("api"))
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
		"admit.keys{" + lim + "}":                                              2, // a and b
	})
}

// TestWrapPolicyNamesBounded: past 64 names, decisions count without
// admit.policy instead of growing the series without bound.
func TestWrapPolicyNamesBounded(t *testing.T) {
	ctx := context.Background()
	mp, reader := manualProvider()
	w, err := admitotel.Wrap(newPolicyLimiter(t),
		mp)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 70 {
		// One key per name: a keyed key holds at most keyed.MaxNames names.
		if d, err := w.AllowLimits(ctx, fmt.Sprint("k", i), 1, admit.Limit{Name: fmt.Sprint("p", i), Capacity: 1, Rate: 1}); err != nil || !d.Allowed {
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

// TestPolicyNameBytesBounded: a name of more than 1024 bytes is counted
// without admit.policy, as a name past the 64th is; one of 1024 keeps its
// own series.
func TestPolicyNameBytesBounded(t *testing.T) {
	mp, reader := manualProvider()
	c, err := admitotel.NewCounter(mp, admitotel.WithName("a"))
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 1024)
	c.Count(admit.Decision{Policy: long}, 1, nil)
	c.Count(admit.Decision{Policy: long + "y"}, 1, nil)
	expect(t, collect(t, reader), map[string]int64{
		"admit.decisions{admit.limiter=a,admit.policy=" + long + ",admit.result=denied}": 1,
		"admit.decisions{admit.limiter=a,admit.result=denied}":                           1,
		"admit.tokens{admit.limiter=a,admit.result=denied}":                              2,
	})
}

func TestWrapNotPolicyLimiter(t *testing.T) {
	l, err := keyed.New(2, 1)
	if err != nil {
		t.Fatal(err)
	}
	mp, reader := manualProvider()
	// forward (overhead_bench_test.go) passes AllowN on and has no
	// AllowLimits, whatever keyed offers.
	w, err := admitotel.Wrap(&forward{l}, mp)
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
