package redisbucket

import "github.com/admit-go/admit"

// Limits returns the limits AllowN applies to every key, in order: New's
// one limit (Name "", its capacity and rate) or NewLimits' limits, as
// given. admithttp and admitgrpc read it (their LimitLister) to show every
// limit in the RateLimit-Policy field, with its w, and to name the limit
// that decided a call. The slice is the caller's: changing it changes
// nothing here.
func (l *Limiter) Limits() []admit.Limit {
	return append([]admit.Limit(nil), l.fixed.limits...)
}
