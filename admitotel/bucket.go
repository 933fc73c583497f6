package admitotel

import (
	"context"
	"errors"

	"github.com/admit-go/admit"
)

// Bucket is an admit.Limiter that counts the calls of the limiter it wraps
// (admit.decisions, admit.tokens; see the package doc). TryAcquire and
// TryAcquireN count as allowed or denied; Acquire and AcquireN as allowed, or
// as error when they return one (a cancelled or hopeless wait; one wrapping
// admit.ErrUnavailable counts in admit.backend.errors too). Tokens is
// passed through uncounted. It is safe for concurrent use; build one with
// WrapLimiter (the zero value is not usable).
type Bucket struct {
	l admit.Limiter
	c *counters
}

// WrapLimiter returns a Bucket that admits with l and counts each call. The
// instruments are created on the MeterProvider WithMeterProvider names, and
// their callback stays registered for the provider's lifetime: wrap once,
// at start-up. An error from creating them, or an invalid option, is
// returned (options' errors wrap admit.ErrInvalidConfig). WrapLimiter panics
// if l is nil.
func WrapLimiter(l admit.Limiter, opts ...Option) (*Bucket, error) {
	if l == nil {
		panic("admitotel: WrapLimiter(nil)")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	b := &Bucket{l: l, c: newCounters()}
	if _, err := newInstruments(cfg, b.c, nil); err != nil {
		return nil, err
	}
	return b, nil
}

// TryAcquire is the wrapped limiter's TryAcquire, counted.
func (b *Bucket) TryAcquire() bool {
	ok := b.l.TryAcquire()
	b.c.add(boolResult(ok), 1, false, "")
	return ok
}

// TryAcquireN is the wrapped limiter's TryAcquireN, counted.
func (b *Bucket) TryAcquireN(n int64) bool {
	ok := b.l.TryAcquireN(n)
	b.c.add(boolResult(ok), n, false, "")
	return ok
}

// Acquire is the wrapped limiter's Acquire, counted.
func (b *Bucket) Acquire(ctx context.Context) error {
	err := b.l.Acquire(ctx)
	b.count(1, err)
	return err
}

// AcquireN is the wrapped limiter's AcquireN, counted.
func (b *Bucket) AcquireN(ctx context.Context, n int64) error {
	err := b.l.AcquireN(ctx, n)
	b.count(n, err)
	return err
}

func (b *Bucket) count(n int64, err error) {
	if err != nil {
		b.c.add(failed, n, errors.Is(err, admit.ErrUnavailable), "")
		return
	}
	b.c.add(allowed, n, false, "")
}

func boolResult(ok bool) int {
	if ok {
		return allowed
	}
	return denied
}

// Tokens is the wrapped limiter's Tokens.
func (b *Bucket) Tokens() float64 { return b.l.Tokens() }
