package redisbucket_test

import (
	"context"
	"errors"
	"testing"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/redisbucket"
)

// Limiters with other parameters on one prefix do not misread each other's
// buckets: the second to touch a key is denied with an error wrapping
// ErrInvalidConfig that names both, and writes nothing, whatever its policy;
// the first goes on exactly.
func TestParameterMismatchDetected(t *testing.T) {
	ctx := context.Background()
	a, c, prefix := newLimiter(t, 5, 0.001)
	b, err := redisbucket.New(c, 50, 100, redisbucket.WithPrefix(prefix), redisbucket.WithTimeout(testTimeout), redisbucket.WithFailOpen())
	if err != nil {
		t.Fatal(err)
	}
	if d, err := a.AllowN(ctx, "k", 4); err != nil || !d.Allowed || d.Remaining != 1 {
		t.Fatalf("a takes 4 of 5: %+v, %v", d, err)
	}
	before := c.Get(ctx, redisbucket.RedisKey(a, "k")).Val()
	for _, n := range []int64{0, 1, 3} {
		d, err := b.AllowN(ctx, "k", n)
		if !errors.Is(err, admit.ErrInvalidConfig) || errors.Is(err, admit.ErrUnavailable) || d.Allowed || d.Remaining < 0 {
			t.Fatalf("b (capacity 50) on a's key, n=%d: %+v, %v; want a denial wrapping ErrInvalidConfig", n, d, err)
		}
	}
	if after := c.Get(ctx, redisbucket.RedisKey(a, "k")).Val(); after != before {
		t.Errorf("b's decisions changed a's key: %q, was %q", after, before)
	}
	if d, err := a.AllowN(ctx, "k", 1); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Errorf("a's last token: %+v, %v", d, err)
	}
	if d, err := a.AllowN(ctx, "k", 1); err != nil || d.Allowed {
		t.Errorf("a past its capacity: %+v, %v", d, err)
	}
	// On a key of its own, b decides as usual.
	if d, err := b.AllowN(ctx, "other", 50); err != nil || !d.Allowed {
		t.Errorf("b on its own key: %+v, %v", d, err)
	}
}

// The prefix and the key are joined unambiguously: "rl:" with "api:x" and
// "rl:api:" with "x" are two buckets.
func TestPrefixKeyJoinUnambiguous(t *testing.T) {
	ctx := context.Background()
	c := client(t, srv)
	one, err := redisbucket.New(c, 1, 0.001, redisbucket.WithPrefix("t:join:rl:"), redisbucket.WithTimeout(testTimeout))
	if err != nil {
		t.Fatal(err)
	}
	two, err := redisbucket.New(c, 1, 0.001, redisbucket.WithPrefix("t:join:rl:api:"), redisbucket.WithTimeout(testTimeout))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := one.AllowN(ctx, "api:x", 1); err != nil || !d.Allowed {
		t.Fatalf(`"rl:" + "api:x": %+v, %v`, d, err)
	}
	if d, err := two.AllowN(ctx, "x", 1); err != nil || !d.Allowed {
		t.Errorf(`"rl:api:" + "x" shares "rl:" + "api:x"'s bucket: %+v, %v`, d, err)
	}
	if _, err := redisbucket.New(c, 1, 1, redisbucket.WithPrefix("a"+redisbucket.Separator+"b")); !errors.Is(err, admit.ErrInvalidConfig) {
		t.Errorf("a prefix holding the separator: %v, want ErrInvalidConfig", err)
	}
}
