package redisbucket_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/redisbucket"
)

// TestReviewOutageErrorKeyBounded: a key is client data (MaxKeyBytes's doc:
// a client may send a megabyte in a header); the error a failed decision
// returns must not carry the whole of it.
func TestReviewOutageErrorKeyBounded(t *testing.T) {
	s := outageServer(t)
	c := outageClient(t, s, 2)
	l, err := redisbucket.New(c, 10, 1, redisbucket.WithTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	beginOutage(t, s, "kill")
	long := strings.Repeat("\x00", 1<<20)
	_, err = l.AllowN(context.Background(), long, 1)
	if !errors.Is(err, admit.ErrUnavailable) {
		t.Fatalf("outage: %v", err)
	}
	if len(err.Error()) > 4096 {
		t.Errorf("an outage's error for a %d-byte key is %d bytes", len(long), len(err.Error()))
	}
}

// TestReviewCachedSetAllocs: AllowLimits' set cache exists so that a call
// with limits seen before allocates nothing for them; a named limit must
// cost no more allocations than an unnamed one.
func TestReviewCachedSetAllocs(t *testing.T) {
	l, _, _ := newLimiter(t, 10, 1)
	ctx := context.Background()
	named := []admit.Limit{lim("burst", 1000000, 1e6), lim("daily", 1000000, 1e6)}
	unnamed := []admit.Limit{lim("", 1000000, 1e6)}
	measure := func(ls []admit.Limit) float64 {
		l.AllowLimits(ctx, "k", 1, ls...)
		return testing.AllocsPerRun(200, func() {
			if _, err := l.AllowLimits(ctx, "k", 1, ls...); err != nil {
				t.Fatal(err)
			}
		})
	}
	if a, b := measure(named), measure(unnamed); a > b {
		t.Errorf("AllowLimits with two cached named limits: %.0f allocations a call; with one unnamed: %.0f", a, b)
	}
}
