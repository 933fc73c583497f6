// Package ratelimit implements the values of the RateLimit-Policy,
// RateLimit and Retry-After fields of draft-ietf-httpapi-ratelimit-headers-10,
// in Structured Field syntax (RFC 9651), as admithttp sends them as HTTP
// headers and admitgrpc as gRPC metadata:
//
//	RateLimit-Policy: "<name>";q=<capacity>;w=<seconds to refill from empty>
//	RateLimit: "<name>";r=<remaining>;t=<seconds until full>
//
// Durations are rounded up to whole seconds, w is left out when the refill
// time is unknown or infinite, and integers are clamped to the Structured
// Field maximum. Every function is safe for concurrent use.
package ratelimit

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/admit-go/admit"
)

// Max is the largest Structured Field Integer.
const Max = 999_999_999_999_999

// Clamp returns v clamped to [0, Max], the range of a field's integers.
func Clamp(v int64) int64 { return min(max(v, 0), Max) }

// Seconds rounds d up to whole seconds; a negative duration is 0.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// RetryAfter is the Retry-After value for a wait of d: whole seconds,
// rounded up, at least 1 (so a client that honours it is never early), and
// clamped.
func RetryAfter(d time.Duration) int64 { return Clamp(max(1, Seconds(d))) }

// FillSeconds is the w of l: how long l takes to refill from empty,
// Capacity ÷ Rate, rounded up to whole seconds, as Seconds rounds; a
// quotient within 4·2⁻⁵² of a whole number r of seconds (4 to 8 ulps of
// r) is r, even a hair above it (a few nanoseconds at a month, where w is
// a hint anyway), and any other is first taken to the nearest nanosecond. So the period of
// admit.Per(period, n), whose Rate n/period is rarely exact in binary,
// reads back as itself: Per(time.Minute, 11) as 60 and not 61 (the
// quotient is 60.000000000000007), Per(30 days, 167) as 2592000 (its
// quotient, 2592000.0000000005, is half a nanosecond over). It is 0 for a Rate of 0,
// which never refills, and at most Max.
func FillSeconds(l admit.Limit) int64 {
	if !(l.Rate > 0) {
		return 0
	}
	// Per's Rate and this quotient round once each: within 2 ulps.
	if s := float64(l.Capacity) / l.Rate; s < Max {
		if r := math.Round(s); r >= 1 && math.Abs(s-r) <= 4*r*0x1p-52 {
			return int64(r)
		}
	}
	ns := math.Round(float64(l.Capacity) / l.Rate * 1e9)
	if ns >= Max*1e9 {
		return Max
	}
	if ns < 1<<62 {
		return (int64(ns) + 1e9 - 1) / 1e9
	}
	return int64(math.Ceil(ns / 1e9)) // above 2^62 ns an ulp is over a nanosecond anyway
}

// Quote returns name as a Structured Field String: in double quotes, with
// '"' and '\' escaped. name must be printable ASCII (admit.Limit.Validate
// and the middlewares' name options check).
func Quote(name string) string {
	var b strings.Builder
	b.Grow(len(name) + 2) // the one allocation
	b.WriteByte('"')
	for i := 0; i < len(name); i++ {
		if name[i] == '"' || name[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(name[i])
	}
	b.WriteByte('"')
	return b.String()
}

// Unquote reverses Quote. It allocates only when q has an escape.
func Unquote(q string) string {
	if !strings.Contains(q, `\`) {
		return q[1 : len(q)-1]
	}
	var b strings.Builder
	for i := 1; i < len(q)-1; i++ {
		if q[i] == '\\' {
			i++
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// AppendPolicy appends one RateLimit-Policy list member to b: the quoted
// name (a Quote result), capacity q and refill time w in seconds, which
// is left out when w <= 0.
func AppendPolicy(b []byte, quoted string, q, w int64) []byte {
	b = append(b, quoted...)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, Clamp(q), 10)
	if w > 0 {
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, Clamp(w), 10)
	}
	return b
}

// AppendLimit appends the RateLimit value for d under the quoted name (a
// Quote result) to b: d's Remaining, and its ResetAfter in seconds.
func AppendLimit(b []byte, quoted string, d admit.Decision) []byte {
	b = append(b, quoted...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, Clamp(d.Remaining), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, Clamp(Seconds(d.ResetAfter)), 10)
	return b
}

// FromBucket reports whether d, returned with an error wrapping
// admit.ErrUnavailable, describes a bucket, as admit.KeyedLimiter defines
// it (a failure policy's fallback limiter decided), so that its fields can
// be shown: a bucket of capacity at least 1 is never empty (Remaining 0)
// and full (ResetAfter 0) at once.
func FromBucket(d admit.Decision) bool {
	return d.Limit >= 1 && (d.Remaining != 0 || d.ResetAfter != 0)
}

// PolicyRefused reports whether err, returned with a Decision that is not
// from a bucket, carries a refusal by the limiter's failure policy: a
// fallback limiter that found the cost above its whole capacity
// (admit.ErrUnsatisfiable) or a limit it cannot enforce
// (admit.ErrInvalidConfig), wrapped beside admit.ErrUnavailable. That is a
// decision, not the absence of one: a middleware's fail-open must not turn
// it into an unlimited admission (the costliest requests would be the ones
// let through).
func PolicyRefused(err error) bool {
	return errors.Is(err, admit.ErrUnavailable) &&
		(errors.Is(err, admit.ErrUnsatisfiable) || errors.Is(err, admit.ErrInvalidConfig))
}
