package admit_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/admit-go/admit"
)

func TestPer(t *testing.T) {
	cases := []struct {
		period time.Duration
		n      int64
		want   admit.Limit
	}{
		{time.Second, 10, admit.Limit{Capacity: 10, Rate: 10}},
		{time.Minute, 60, admit.Limit{Capacity: 60, Rate: 1}},
		{24 * time.Hour, 1000, admit.Limit{Capacity: 1000, Rate: 1000.0 / 86400}},
		{500 * time.Millisecond, 1, admit.Limit{Capacity: 1, Rate: 2}},
	}
	for _, c := range cases {
		if got := admit.Per(c.period, c.n); got != c.want {
			t.Errorf("Per(%v, %d) = %+v, want %+v", c.period, c.n, got, c.want)
		}
	}
	for _, p := range []time.Duration{0, -time.Second} {
		if err := admit.Per(p, 1).Validate(); !errors.Is(err, admit.ErrInvalidConfig) {
			t.Errorf("Per(%v, 1).Validate() = %v, want ErrInvalidConfig", p, err)
		}
	}
}

func TestNamedWithBurst(t *testing.T) {
	base := admit.Per(time.Second, 10)
	l := base.Named("burst").WithBurst(3)
	if want := (admit.Limit{Name: "burst", Capacity: 3, Rate: 10}); l != want {
		t.Fatalf("got %+v, want %+v", l, want)
	}
	if base.Name != "" || base.Capacity != 10 {
		t.Fatalf("Named/WithBurst changed the receiver: %+v", base)
	}
}

func TestLimitValidate(t *testing.T) {
	good := []admit.Limit{
		{Capacity: 1, Rate: 0},
		{Name: "daily", Capacity: 1e9, Rate: 1e9},
		{Name: "a b-c_d.e/f", Capacity: 1, Rate: 1e-6},
		{Name: strings.Repeat("x", 128), Capacity: 5, Rate: 1},
	}
	for _, l := range good {
		if err := l.Validate(); err != nil {
			t.Errorf("%+v: %v", l, err)
		}
	}
	bad := []struct {
		l    admit.Limit
		name string // a fragment the error must contain
	}{
		{admit.Limit{Capacity: 0, Rate: 1}, "capacity 0"},
		{admit.Limit{Capacity: -3, Rate: 1}, "capacity -3"},
		{admit.Limit{Capacity: 1 << 61, Rate: 1}, "2^61"},
		{admit.Limit{Capacity: 1, Rate: -1}, "negative"},
		{admit.Limit{Capacity: 1, Rate: math.NaN()}, "NaN"},
		{admit.Limit{Capacity: 1, Rate: math.Inf(1)}, "+Inf"},
		{admit.Limit{Capacity: 1, Rate: 2e9}, "above 1e9"},
		{admit.Limit{Name: "tab\there", Capacity: 1, Rate: 1}, "0x9"},
		{admit.Limit{Name: "é", Capacity: 1, Rate: 1}, "printable"},
		{admit.Limit{Name: strings.Repeat("x", 129), Capacity: 1, Rate: 1}, "129 bytes"},
	}
	for _, c := range bad {
		err := c.l.Validate()
		if !errors.Is(err, admit.ErrInvalidConfig) {
			t.Errorf("%+v: got %v, want ErrInvalidConfig", c.l, err)
			continue
		}
		if !strings.Contains(err.Error(), c.name) {
			t.Errorf("%+v: error %q does not name %q", c.l, err, c.name)
		}
	}
}

func TestValidateLimits(t *testing.T) {
	ok := []admit.Limit{admit.Per(time.Second, 5).Named("burst"), admit.Per(24*time.Hour, 1000).Named("daily")}
	if err := admit.ValidateLimits(ok); err != nil {
		t.Fatal(err)
	}
	for name, ls := range map[string][]admit.Limit{
		"none":      nil,
		"duplicate": {ok[0], ok[1], ok[0].WithBurst(2)},
		"invalid":   {ok[0], {Name: "x", Capacity: 0, Rate: 1}},
	} {
		if err := admit.ValidateLimits(ls); !errors.Is(err, admit.ErrInvalidConfig) {
			t.Errorf("%s: got %v, want ErrInvalidConfig", name, err)
		}
	}
}
