package redisbucket_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/redisbucket"
)

// A WithBatch denial answered from memory reports the server's RetryAfter,
// counted down, not the memory's remaining life; so Bucket.AcquireN with a
// nearer deadline returns ErrDeadline at once, without sleeping out the
// memory and asking Redis again.
func TestBatchDenialRetryAfter(t *testing.T) {
	ctx := context.Background()
	l, c, _ := newLimiter(t, 1, 0.001, redisbucket.WithBatch(2, 5*time.Second)) // 1 token per 1000 s
	if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("the one token: %+v, %v", d, err)
	}
	d, err := l.AllowN(ctx, "k", 1)
	if err != nil || d.Allowed || d.RetryAfter <= 999*time.Second {
		t.Fatalf("from Redis: %+v, %v; want a denial with RetryAfter near 1000s", d, err)
	}
	calls0 := evalCalls(t, c)
	d, err = l.AllowN(ctx, "k", 1)
	if err != nil || d.Allowed || d.RetryAfter <= 990*time.Second || d.RetryAfter > 1000*time.Second {
		t.Errorf("from memory: %+v, %v; want RetryAfter near 1000s", d, err)
	}
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := l.Bucket("k").AcquireN(dctx, 1); !errors.Is(err, admit.ErrDeadline) {
		t.Errorf("AcquireN with a minute's deadline, 1000s away: %v, want ErrDeadline", err)
	}
	if calls := evalCalls(t, c) - calls0; calls != 0 {
		t.Errorf("%d round trips: AcquireN slept out the remembered denial and asked again", calls)
	}
}
