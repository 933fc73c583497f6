package redisbucket

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/admit-go/admit"
)

// Bucket returns key's bucket as an admit.Limiter. Its TryAcquire and
// TryAcquireN decide through AllowN without a deadline of their own (each
// bounded by the Limiter's timeout), so when Redis cannot decide they return
// what the failure policy chose. AcquireN retries after each RetryAfter the
// server reports; unlike the in-process buckets it reserves nothing, so
// waiters are not served in arrival order. Tokens reports the whole tokens
// left (a peek), or 0 when Redis cannot tell.
func (l *Limiter) Bucket(key string) admit.Limiter { return &bucket{l: l, key: key} }

type bucket struct {
	l   *Limiter
	key string
}

func (b *bucket) TryAcquire() bool { return b.TryAcquireN(1) }

func (b *bucket) TryAcquireN(n int64) bool {
	if n == 0 {
		return true
	}
	d, _ := b.l.AllowN(context.Background(), b.key, n)
	return d.Allowed
}

func (b *bucket) Acquire(ctx context.Context) error { return b.AcquireN(ctx, 1) }

func (b *bucket) AcquireN(ctx context.Context, n int64) error {
	if n == 0 {
		return ctx.Err()
	}
	for {
		d, err := b.l.AllowN(ctx, b.key, n)
		switch {
		case err != nil && errors.Is(err, admit.ErrUnavailable) && d.Allowed:
			return nil // admitted by the failure policy
		case err != nil:
			return err
		case d.Allowed:
			return nil
		case d.RetryAfter == Never:
			return fmt.Errorf("%w: n=%d: too few tokens and no refill", admit.ErrUnsatisfiable, n)
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d.RetryAfter {
			return fmt.Errorf("%w: n=%d is %v away, the deadline %v: %w", admit.ErrDeadline, n, d.RetryAfter, time.Until(dl), context.DeadlineExceeded)
		}
		if err := admit.SystemClock().Sleep(ctx, d.RetryAfter); err != nil {
			return err
		}
	}
}

func (b *bucket) Tokens() float64 {
	d, err := b.l.AllowN(context.Background(), b.key, 0)
	if err != nil {
		return 0
	}
	return float64(d.Remaining)
}
