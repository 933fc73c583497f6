package redisbucket

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// breaker stops a Limiter from sending while Redis is failing: after a
// network error or a request that got no reply within its timeout, calls are
// refused until the retry time, then exactly one probes. The fields are read
// on every call, written only on a state change, so the healthy path adds one
// atomic load.
type breaker struct {
	until   atomic.Int64          // monotonic ns after which to probe; 0 when healthy
	probing atomic.Bool           // a probe is in flight
	cause   atomic.Pointer[error] // the latest failure, as reported
	backend atomic.Pointer[error] // the latest failure that was not a timeout
}

var mono = time.Now()

// allow returns nil if the call may go to Redis, else the latest failure.
func (b *breaker) allow() error {
	u := b.until.Load()
	if u == 0 {
		return nil
	}
	if int64(time.Since(mono)) >= u && b.probing.CompareAndSwap(false, true) {
		return nil
	}
	if c := b.cause.Load(); c != nil {
		return fmt.Errorf("not sending while Redis is failing: %w", *c)
	}
	return errors.New("not sending while Redis is failing")
}

func (b *breaker) succeed() {
	if b.until.Load() != 0 {
		b.until.Store(0)
		b.probing.Store(false)
	}
}

// fail records a failed request, bounded by the timeout retry, and returns
// the error to report. A request that ran out of its timeout reports that,
// with a backend error as its cause when there was one: dialed, a dial that
// failed while the request ran (go-redis retries a refused dial until the
// deadline and then returns only the context's error, which must not read
// as the caller's); else the latest backend error seen.
func (b *breaker) fail(err error, retry time.Duration, dialed error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		te := &timeoutError{after: retry, what: "no reply", last: dialed}
		if dialed != nil {
			b.backend.Store(&dialed)
		} else if last := b.backend.Load(); last != nil {
			te.last = *last
		}
		err = te
	} else {
		b.backend.Store(&err)
	}
	b.cause.Store(&err)
	b.until.Store(int64(time.Since(mono)) + int64(retry))
	b.probing.Store(false)
	return err
}

// timeoutError is Redis not answering within the Limiter's timeout. It
// matches neither context.DeadlineExceeded nor context.Canceled (the
// caller's context had not ended); it unwraps to the latest backend error.
type timeoutError struct {
	after time.Duration
	what  string
	last  error
}

func (e *timeoutError) Error() string {
	s := fmt.Sprintf("%s within the timeout of %v", e.what, e.after)
	if e.last != nil {
		s += "; last error: " + e.last.Error()
	}
	return s
}

func (e *timeoutError) Unwrap() error { return e.last }
