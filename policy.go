package admit

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Limit is one token bucket: a burst of Capacity tokens refilled at Rate
// tokens per second. Name labels it in Decisions (Decision.Policy), response
// headers and metrics; within one call's limits every Name is distinct. The
// empty Name is allowed and is what a single-limit limiter uses.
//
// A Limit is a plain value: build one with Per, then adjust it with Named and
// WithBurst, or write the fields directly.
type Limit struct {
	Name     string
	Capacity int64
	Rate     float64
}

// Per returns the limit of n requests per period: Capacity n, refilled at
// n / period tokens per second, so a client may spend all n at once and then
// one every period/n. Per(time.Hour, 1000) is 1000 an hour with a burst of
// 1000; add WithBurst for a smaller burst. A period of 0 or less gives a Limit
// whose Rate is not finite, which Validate rejects.
func Per(period time.Duration, n int64) Limit {
	rate := math.Inf(1)
	if period > 0 {
		rate = float64(n) / period.Seconds()
	}
	return Limit{Capacity: n, Rate: rate}
}

// Named returns a copy of l with Name set.
func (l Limit) Named(name string) Limit {
	l.Name = name
	return l
}

// WithBurst returns a copy of l with Capacity set; the rate is unchanged.
func (l Limit) WithBurst(capacity int64) Limit {
	l.Capacity = capacity
	return l
}

// maxLimitCapacity is the largest capacity every limiter in this module can
// represent (the buckets' unit arithmetic needs capacity < 2^61).
const maxLimitCapacity = 1<<61 - 1

// maxLimitName bounds a Name's length: it travels in every header and metric.
const maxLimitName = 128

// Validate reports whether every limiter in this module can enforce l. It
// returns an error wrapping ErrInvalidConfig that names the bad value for a
// Capacity below 1 or at 2^61 or more, a Rate that is negative, NaN, infinite
// or above 1e9 per second, or a Name longer than 128 bytes or holding a byte
// outside printable ASCII (0x20–0x7E: it must fit a structured-field string in
// a response header). A limiter may still reject a Rate too small to
// represent exactly next to its Capacity; its error also wraps
// ErrInvalidConfig.
func (l Limit) Validate() error {
	switch {
	case l.Capacity < 1:
		return fmt.Errorf("%w: limit %q: capacity %d is below 1", ErrInvalidConfig, l.Name, l.Capacity)
	case l.Capacity > maxLimitCapacity:
		return fmt.Errorf("%w: limit %q: capacity %d is 2^61 or more", ErrInvalidConfig, l.Name, l.Capacity)
	case math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0):
		return fmt.Errorf("%w: limit %q: rate %v per second is not finite", ErrInvalidConfig, l.Name, l.Rate)
	case l.Rate < 0:
		return fmt.Errorf("%w: limit %q: rate %v per second is negative", ErrInvalidConfig, l.Name, l.Rate)
	case l.Rate > 1e9:
		return fmt.Errorf("%w: limit %q: rate %v per second is above 1e9", ErrInvalidConfig, l.Name, l.Rate)
	case len(l.Name) > maxLimitName:
		return fmt.Errorf("%w: limit name %.20q… is %d bytes, above %d", ErrInvalidConfig, l.Name, len(l.Name), maxLimitName)
	}
	for i := 0; i < len(l.Name); i++ {
		if c := l.Name[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: limit name %q: byte %#x at %d is not printable ASCII", ErrInvalidConfig, l.Name, c, i)
		}
	}
	return nil
}

// valid reports whether Validate returns nil, without building an error:
// ValidateLimits runs on every call of a PolicyLimiter, and Validate, which
// takes the Limit by value and formats its errors, does not inline.
func (l *Limit) valid() bool {
	if l.Capacity < 1 || l.Capacity > maxLimitCapacity || !(l.Rate >= 0 && l.Rate <= 1e9) || len(l.Name) > maxLimitName {
		return false // !(>= 0) is also true of NaN, and +Inf is above 1e9
	}
	for i := 0; i < len(l.Name); i++ {
		if c := l.Name[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// ValidateLimits checks one call's limits: at least one, each valid, no two
// with the same Name. Errors wrap ErrInvalidConfig and name the bad value.
// It is for implementations of PolicyLimiter.
func ValidateLimits(limits []Limit) error {
	if len(limits) == 0 {
		return fmt.Errorf("%w: no limits", ErrInvalidConfig)
	}
	for i := range limits {
		if !limits[i].valid() {
			return limits[i].Validate()
		}
		for j := 0; j < i; j++ {
			if limits[j].Name == limits[i].Name {
				return fmt.Errorf("%w: limits %d and %d are both named %q", ErrInvalidConfig, j, i, limits[i].Name)
			}
		}
	}
	return nil
}

// PolicyLimiter decides a key against limits chosen per call, so tiers,
// per-tenant overrides and runtime changes are one mechanism: the caller
// passes the limits that apply to this request.
//
// Rules, for every implementation:
//
//  1. All or nothing. The call is allowed only if every limit holds n tokens
//     for the key; an admission takes n from each, a denial from none.
//  2. The bound, per limit. For each (key, Name), over any window in which
//     that limit's Capacity and Rate did not change, the admitted total is
//     at most Capacity + Rate × T (+1 for rounding).
//  3. State per (key, Name). A Name the key has not used starts full. When a
//     call brings a different Capacity or Rate for a Name the key holds, the
//     balance carries over: it is advanced to now under the old rate, then
//     clamped to the new capacity (x/time/rate's SetLimit and SetBurst). A
//     bucket full under the old limit is full under the new one: a full
//     bucket equals a Name never used (an implementation may forget it at
//     any time), so a client's balance never depends on whether it was
//     kept.
//  4. The Decision. Allowed: Policy, Limit and Remaining are those of the
//     limit with the fewest whole tokens left after the call, RetryAfter is
//     0 and ResetAfter the longest time until every limit is full. Denied:
//     RetryAfter is the exact earliest instant at which every limit holds n
//     (a caller that waits exactly that long is admitted if nothing else used
//     the key), Policy and Limit are those of the limit that needs the
//     longest, Remaining the fewest whole tokens of any limit.
//  5. Bad calls. No limits, two limits with one Name, or a Limit that fails
//     Validate: an error wrapping ErrInvalidConfig, nothing consumed. n < 0 or
//     n above some limit's Capacity: Allowed false and an error wrapping
//     ErrUnsatisfiable, nothing consumed. n == 0 peeks: it takes no token,
//     but a peek, like a denial, that brings a changed Capacity or Rate
//     carries the balance over by rule 3, as any call does. At least 8
//     limits per call are accepted.
//
// Implementations are safe for concurrent use.
type PolicyLimiter interface {
	AllowLimits(ctx context.Context, key string, n int64, limits ...Limit) (Decision, error)
}
