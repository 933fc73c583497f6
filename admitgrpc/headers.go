package admitgrpc

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/admit-go/admit"
)

// The header values follow draft-ietf-httpapi-ratelimit-headers-10 in
// Structured Field syntax (RFC 9651), as admithttp writes them:
//
//	ratelimit-policy: "<name>";q=<capacity>;w=<seconds to refill from empty>
//	ratelimit: "<name>";r=<remaining>;t=<seconds until full>
//
// w and t are rounded up, w is left out when the refill time is unknown or
// infinite, and integers are clamped to the Structured Field maximum.

// sfMax is the largest Structured Field Integer.
const sfMax = 999_999_999_999_999

func clampSF(v int64) int64 { return min(max(v, 0), sfMax) }

// ceilSeconds rounds d up to whole seconds; negative durations are 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// quote returns name as a Structured Field String: in double quotes, with
// '"' and '\' escaped. name is printable ASCII (WithPolicyName and
// admit.Limit.Validate check).
func quote(name string) string {
	var b strings.Builder
	b.Grow(len(name) + 2)
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

// unquote reverses quote.
func unquote(q string) string {
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

// appendPolicy appends one ratelimit-policy list member; w <= 0 leaves w
// out.
func appendPolicy(b []byte, quoted string, q, w int64) []byte {
	b = append(b, quoted...)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, clampSF(q), 10)
	if w > 0 {
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, clampSF(w), 10)
	}
	return b
}

// rateLimit is the ratelimit value for a decision under the named policy.
func rateLimit(quoted string, d admit.Decision) string {
	var buf [96]byte
	b := append(buf[:0], quoted...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, clampSF(d.Remaining), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, clampSF(ceilSeconds(d.ResetAfter)), 10)
	return string(b)
}

// fillSeconds is a limit's w: Capacity ÷ Rate taken to the nearest
// nanosecond (so that admit.Per(24*time.Hour, 1000), whose Rate is not exact
// in binary, says 86400 and not 86401), then rounded up to whole seconds; 0
// for a bucket that never refills. admithttp computes w the same way.
func fillSeconds(l admit.Limit) int64 {
	if !(l.Rate > 0) {
		return 0
	}
	ns := math.Round(float64(l.Capacity) / l.Rate * 1e9)
	if ns >= sfMax*1e9 {
		return sfMax
	}
	if ns < 1<<62 {
		return (int64(ns) + 1e9 - 1) / 1e9
	}
	return int64(math.Ceil(ns / 1e9)) // above 2^62 ns an ulp is over a nanosecond anyway
}

// policySet is one list of limits rendered for the headers.
type policySet struct {
	limits []admit.Limit
	names  []string // names[i] is limits[i]'s name, as an sf-string
	policy string   // the ratelimit-policy value: every limit, in order
}

// newPolicySet renders limits; an unnamed limit is shown under unnamed (the
// WithPolicyName name). It fails, wrapping admit.ErrInvalidConfig, on what
// admit.ValidateLimits rejects and when the unnamed limit would be shown
// under another limit's Name.
func newPolicySet(limits []admit.Limit, unnamed string) (*policySet, error) {
	if err := admit.ValidateLimits(limits); err != nil {
		return nil, err
	}
	p := &policySet{limits: limits, names: make([]string, len(limits))}
	var b []byte
	for i, l := range limits {
		name := l.Name
		if name == "" {
			name = unnamed
			for j, o := range limits {
				if j != i && o.Name == unnamed {
					return nil, fmt.Errorf("%w: limit %d has no Name and would be shown as %q, the Name of limit %d",
						admit.ErrInvalidConfig, i, unnamed, j)
				}
			}
		}
		p.names[i] = quote(name)
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendPolicy(b, p.names[i], l.Capacity, fillSeconds(l))
	}
	p.policy = string(b)
	return p, nil
}

// name returns the sf-string of the limit named policy, and false if the
// set has none (a Decision from a failure policy's fallback limiter).
func (p *policySet) name(policy string) (string, bool) {
	for i := range p.limits {
		if p.limits[i].Name == policy {
			return p.names[i], true
		}
	}
	return "", false
}

// retryAfter is the retry-after value: the wait in whole seconds, rounded
// up, at least 1, so a client that honours it is never early.
func retryAfter(d time.Duration) string {
	return strconv.FormatInt(clampSF(max(1, ceilSeconds(d))), 10)
}
