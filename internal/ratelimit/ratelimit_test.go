package ratelimit_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/internal/ratelimit"
	"github.com/admit-go/admit/keyedtest"
	"github.com/dunglas/httpsfv"
)

func TestSeconds(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{
		{-time.Second, 0}, {0, 0}, {1, 1}, {time.Second, 1}, {time.Second + 1, 2},
		{90 * time.Second, 90}, {math.MaxInt64, int64(math.MaxInt64/time.Second) + 1},
	} {
		if got := ratelimit.Seconds(c.d); got != c.want {
			t.Errorf("Seconds(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{{-time.Second, 1}, {0, 1}, {1, 1}, {time.Second, 1}, {1500 * time.Millisecond, 2}} {
		if got := ratelimit.RetryAfter(c.d); got != c.want {
			t.Errorf("RetryAfter(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

func TestClamp(t *testing.T) {
	for _, c := range []struct{ v, want int64 }{
		{math.MinInt64, 0}, {-1, 0}, {0, 0}, {7, 7}, {ratelimit.Max, ratelimit.Max},
		{ratelimit.Max + 1, ratelimit.Max}, {math.MaxInt64, ratelimit.Max},
	} {
		if got := ratelimit.Clamp(c.v); got != c.want {
			t.Errorf("Clamp(%d) = %d, want %d", c.v, got, c.want)
		}
	}
}

func TestFillSeconds(t *testing.T) {
	for _, c := range []struct {
		l    admit.Limit
		want int64
	}{
		{admit.Per(24*time.Hour, 1000), 86400},
		{admit.Per(time.Minute, 11), 60}, // Capacity ÷ Rate is 60.000000000000007
		{admit.Limit{Capacity: 10, Rate: 4}, 3},
		{admit.Limit{Capacity: 10, Rate: 5}, 2},
		{admit.Limit{Capacity: 10}, 0}, // never refills
		{admit.Limit{Capacity: math.MaxInt64, Rate: 1e-9}, ratelimit.Max},
	} {
		if got := ratelimit.FillSeconds(c.l); got != c.want {
			t.Errorf("FillSeconds(%+v) = %d, want %d", c.l, got, c.want)
		}
	}
}

// TestFillSecondsPer: Per(period, n) reads back its period, rounded up to
// whole seconds, for every n: at a month, Capacity ÷ Rate is off by more
// than half a nanosecond for some n (2592000.0000000005 s), which taken to
// the nearest nanosecond read as one second more.
func TestFillSecondsPer(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, p := range []time.Duration{time.Second, 1500 * time.Millisecond, time.Minute, time.Hour, 24 * time.Hour, 7 * 24 * time.Hour, 30 * 24 * time.Hour, 365 * 24 * time.Hour} {
		want := ratelimit.Seconds(p)
		bad := 0
		for i := range 40_000 {
			n := int64(i + 1)
			if i >= 20_000 {
				n = r.Int64N(1<<53) + 1
			}
			l := admit.Per(p, n)
			if l.Validate() != nil {
				continue
			}
			if got := ratelimit.FillSeconds(l); got != want {
				if bad++; bad <= 3 {
					t.Errorf("FillSeconds(Per(%v, %d)) = %d, want %d", p, n, got, want)
				}
			}
		}
		if bad > 3 {
			t.Errorf("Per(%v, n): %d of 40000 wrong", p, bad)
		}
	}
}

func TestQuote(t *testing.T) {
	for _, name := range []string{"", "default", `a"b`, `a\b`, `"\\"`, " ~!"} {
		q := ratelimit.Quote(name)
		item, err := httpsfv.UnmarshalItem([]string{q})
		if err != nil {
			t.Fatalf("Quote(%q) = %s, not an sf-string: %v", name, q, err)
		}
		if item.Value != name {
			t.Errorf("Quote(%q) = %s reads back as %q", name, q, item.Value)
		}
		if got := ratelimit.Unquote(q); got != name {
			t.Errorf("Unquote(Quote(%q)) = %q", name, got)
		}
	}
}

func TestAppend(t *testing.T) {
	q := ratelimit.Quote("tier")
	for _, c := range []struct {
		q, w int64
		want string
	}{
		{10, 0, `"tier";q=10`}, {10, -1, `"tier";q=10`}, {10, 60, `"tier";q=10;w=60`},
		{-5, math.MaxInt64, `"tier";q=0;w=999999999999999`},
	} {
		if got := string(ratelimit.AppendPolicy([]byte("x, "), q, c.q, c.w)); got != "x, "+c.want {
			t.Errorf("AppendPolicy(q=%d, w=%d) = %s, want x, %s", c.q, c.w, got, c.want)
		}
	}
	d := admit.Decision{Remaining: 3, ResetAfter: 1500 * time.Millisecond}
	if got, want := string(ratelimit.AppendLimit(nil, q, d)), `"tier";r=3;t=2`; got != want {
		t.Errorf("AppendLimit = %s, want %s", got, want)
	}
	d = admit.Decision{Remaining: -1, ResetAfter: -time.Second}
	if got, want := string(ratelimit.AppendLimit(nil, q, d)), `"tier";r=0;t=0`; got != want {
		t.Errorf("AppendLimit = %s, want %s", got, want)
	}
}

func TestFromBucket(t *testing.T) {
	for _, c := range []struct {
		d    admit.Decision
		want bool
	}{
		{admit.Decision{}, false},                                      // no Decision
		{admit.Decision{Allowed: true, Limit: 10}, false},              // fail open: empty and full at once
		{admit.Decision{Limit: 10, Remaining: 0, ResetAfter: 1}, true}, // empty bucket
		{admit.Decision{Limit: 10, Remaining: 10}, true},               // full bucket
		{admit.Decision{Limit: 0, Remaining: 5}, false},                // capacity 0 is no bucket
	} {
		if got := ratelimit.FromBucket(c.d); got != c.want {
			t.Errorf("FromBucket(%+v) = %v, want %v", c.d, got, c.want)
		}
	}
}

func TestSet(t *testing.T) {
	limits := []admit.Limit{
		{Capacity: 10, Rate: 1},
		{Name: "daily", Capacity: 1000, Rate: 1000.0 / 86400},
		{Name: `q"d`, Capacity: 5},
	}
	s, err := ratelimit.NewSet(limits, "default")
	if err != nil {
		t.Fatal(err)
	}
	want := `"default";q=10;w=10, "daily";q=1000;w=86400, "q\"d";q=5`
	if s.Policy != want {
		t.Errorf("Policy = %s, want %s", s.Policy, want)
	}
	if _, err := httpsfv.UnmarshalList([]string{s.Policy}); err != nil {
		t.Errorf("Policy %s is not an sf-list: %v", s.Policy, err)
	}
	for policy, want := range map[string]string{"": `"default"`, "daily": `"daily"`, `q"d`: `"q\"d"`} {
		if got, ok := s.Name(policy); !ok || got != want {
			t.Errorf("Name(%q) = %s, %v; want %s, true", policy, got, ok, want)
		}
	}
	if got, ok := s.Name("fallback"); ok {
		t.Errorf("Name(fallback) = %s, true; want false", got)
	}
}

func TestNewSetRejects(t *testing.T) {
	for _, limits := range [][]admit.Limit{
		{{Capacity: 10, Rate: 1}, {Name: "default", Capacity: 5}}, // unnamed shown as another's name
		{{Capacity: -1}},
	} {
		if _, err := ratelimit.NewSet(limits, "default"); !errors.Is(err, admit.ErrInvalidConfig) {
			t.Errorf("NewSet(%+v) = %v, want ErrInvalidConfig", limits, err)
		}
	}
}

// plain is a KeyedLimiter only; policy is also a PolicyLimiter.
type plain struct{}

func (plain) AllowN(context.Context, string, int64) (admit.Decision, error) {
	return admit.Decision{}, nil
}

type policy struct{ plain }

func (policy) AllowLimits(context.Context, string, int64, ...admit.Limit) (admit.Decision, error) {
	return admit.Decision{}, nil
}

func TestPolicy(t *testing.T) {
	for _, c := range []struct {
		name string
		l    admit.KeyedLimiter
		want bool
	}{
		{"plain", plain{}, false},
		{"policy", policy{}, true},
		{"wrapper of plain", keyedtest.Wrapper{L: plain{}}, false},
		{"wrapper of policy", keyedtest.Wrapper{L: policy{}}, true},
		{"wrapper of wrapper of plain", keyedtest.Wrapper{L: keyedtest.Wrapper{L: plain{}}}, false},
		{"wrapper of wrapper of policy", keyedtest.Wrapper{L: keyedtest.Wrapper{L: policy{}}}, true},
	} {
		pl, ok := ratelimit.Policy(c.l)
		if ok != c.want || (pl != nil) != c.want {
			t.Errorf("%s: Policy = %v, %v; want ok %v", c.name, pl, ok, c.want)
		} else if ok && pl != c.l.(admit.PolicyLimiter) {
			t.Errorf("%s: Policy returned %v, not the limiter itself", c.name, pl)
		}
	}
}

// filler has a FillTime of its own; fillerWrapper has one too and wraps.
type filler struct {
	plain
	d time.Duration
}

func (f filler) FillTime() time.Duration { return f.d }

type fillerWrapper struct {
	keyedtest.Wrapper
	d time.Duration
}

func (f fillerWrapper) FillTime() time.Duration { return f.d }

type refiller interface{ FillTime() time.Duration }

// TestFind: the nearest limiter down the Unwrap chain that has the method.
func TestFind(t *testing.T) {
	for _, c := range []struct {
		name string
		l    admit.KeyedLimiter
		want time.Duration // -1: none
	}{
		{"plain", plain{}, -1},
		{"filler", filler{d: 1}, 1},
		{"wrapper of plain", keyedtest.Wrapper{L: plain{}}, -1},
		{"wrapper of filler", keyedtest.Wrapper{L: filler{d: 2}}, 2},
		{"wrapper of wrapper of filler", keyedtest.Wrapper{L: keyedtest.Wrapper{L: filler{d: 3}}}, 3},
		{"the nearest wins", fillerWrapper{Wrapper: keyedtest.Wrapper{L: filler{d: 4}}, d: 5}, 5},
		{"a nil wrapped limiter", keyedtest.Wrapper{}, -1},
	} {
		f, ok := ratelimit.Find[refiller](c.l)
		switch {
		case ok != (c.want >= 0):
			t.Errorf("%s: found %v; want %v", c.name, ok, c.want >= 0)
		case ok && f.FillTime() != c.want:
			t.Errorf("%s: FillTime %v; want %v", c.name, f.FillTime(), c.want)
		}
	}
}
