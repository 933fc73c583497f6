package admit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/adaptive"
	"github.com/admit-go/admit/casbucket"
	"github.com/admit-go/admit/chanpool"
	"github.com/admit-go/admit/fixedwindow"
	"github.com/admit-go/admit/gcra"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/leakybucket"
	"github.com/admit-go/admit/mutexbucket"
	"github.com/admit-go/admit/shardedbucket"
	"github.com/admit-go/admit/slidinglog"
	"github.com/admit-go/admit/slidingwindow"
)

// derefClock is a Clock whose methods read through the receiver, as most
// do: a nil *derefClock panics on its first reading.
type derefClock struct{ now int64 }

func (c *derefClock) Now() int64 { return c.now }

func (c *derefClock) Sleep(ctx context.Context, d time.Duration) error { return ctx.Err() }

// funcClock is a Clock of a func type: a nil one panics when read.
type funcClock func() int64

func (f funcClock) Now() int64 { return f() }

func (f funcClock) Sleep(ctx context.Context, d time.Duration) error { return ctx.Err() }

// TestTypedNilClock: every constructor that takes a Clock (admit.WithClock,
// adaptive.WithClock, chanpool.WithClock) treats one that holds a nil
// pointer or func as it treats a nil Clock, a configuration error wrapping
// ErrInvalidConfig, instead of panicking (at New, or at the first call)
// when a limiter reads it.
func TestTypedNilClock(t *testing.T) {
	type ctor struct {
		name string
		make func(admit.Clock) error
	}
	with := func(c admit.Clock) admit.Option { return admit.WithClock(c) }
	ctors := []ctor{
		{"mutexbucket", func(c admit.Clock) error { _, err := mutexbucket.New(2, 1, with(c)); return err }},
		{"casbucket", func(c admit.Clock) error { _, err := casbucket.New(2, 1, with(c)); return err }},
		{"shardedbucket", func(c admit.Clock) error { _, err := shardedbucket.New(2, 1, with(c)); return err }},
		{"gcra", func(c admit.Clock) error { _, err := gcra.New(2, 1, with(c)); return err }},
		{"leakybucket", func(c admit.Clock) error { _, err := leakybucket.New(2, 1, with(c)); return err }},
		{"keyed", func(c admit.Clock) error { _, err := keyed.New(2, 1, with(c)); return err }},
		{"keyed.NewLimits", func(c admit.Clock) error {
			_, err := keyed.NewLimits([]admit.Limit{{Name: "a", Capacity: 2, Rate: 1}, {Name: "b", Capacity: 5, Rate: 0.1}}, with(c))
			return err
		}},
		{"fixedwindow", func(c admit.Clock) error { _, err := fixedwindow.New(2, time.Second, with(c)); return err }},
		{"slidinglog", func(c admit.Clock) error { _, err := slidinglog.New(2, time.Second, with(c)); return err }},
		{"slidingwindow", func(c admit.Clock) error { _, err := slidingwindow.New(2, time.Second, with(c)); return err }},
		{"adaptive", func(c admit.Clock) error { _, err := adaptive.New(adaptive.WithClock(c)); return err }},
		{"chanpool", func(c admit.Clock) error {
			p, err := chanpool.New(1, func(context.Context) (int, error) { return 0, nil }, chanpool.WithClock[int](c))
			if err == nil {
				_ = p.Close(context.Background())
			}
			return err
		}},
	}
	for _, k := range ctors {
		for _, tc := range []struct {
			name  string
			clock admit.Clock
		}{
			{"nil", nil},
			{"nil *derefClock", (*derefClock)(nil)},
			{"nil funcClock", funcClock(nil)},
		} {
			t.Run(k.name+"/"+tc.name, func(t *testing.T) {
				var err error
				func() {
					defer func() {
						if p := recover(); p != nil {
							t.Fatalf("New with a Clock of %s panicked: %v", tc.name, p)
						}
					}()
					err = k.make(tc.clock)
				}()
				if !errors.Is(err, admit.ErrInvalidConfig) {
					t.Fatalf("New with a Clock of %s: err %v, want one wrapping ErrInvalidConfig", tc.name, err)
				}
				if want := fmt.Sprintf("WithClock(%T(nil))", tc.clock); tc.clock != nil && !strings.Contains(err.Error(), want) {
					t.Errorf("New with a Clock of %s: err %q does not name it as %s", tc.name, err, want)
				}
			})
		}
		// A Clock that is not nil is taken.
		t.Run(k.name+"/non-nil", func(t *testing.T) {
			if err := k.make(&derefClock{now: 1}); err != nil {
				t.Fatalf("New with a fake clock: %v", err)
			}
		})
	}
}
