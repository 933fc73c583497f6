package keyed

import "time"

// FillTime returns how long an empty bucket of the limiter's first limit
// (New's only one) takes to refill to capacity
// (capacity ÷ rate, to the nanosecond of the limiter's arithmetic), or 0 if
// the rate is zero or the refill would pass the clock's horizon. The
// admithttp middleware reads it (as an admithttp.Refiller) for the w
// parameter of RateLimit-Policy.
func (l *Limiter) FillTime() time.Duration {
	if d := l.after(0, l.p.Cap); d != never {
		return d
	}
	return 0
}
