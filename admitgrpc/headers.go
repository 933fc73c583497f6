package admitgrpc

import (
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

// fillSeconds is a limit's w: the seconds an empty bucket takes to refill,
// rounded up, or 0 for a bucket that never refills. The quotient is taken
// down by one part in 10^12 before rounding up, so that a limit built with
// admit.Per(24*time.Hour, 1000), whose Rate is 1000/86400 rounded, says
// 86400 and not 86401.
func fillSeconds(l admit.Limit) int64 {
	if l.Rate <= 0 {
		return 0
	}
	s := float64(l.Capacity) / l.Rate
	if s >= sfMax {
		return sfMax
	}
	return int64(math.Ceil(s * (1 - 1e-12)))
}

// retryAfter is the retry-after value: the wait in whole seconds, rounded
// up, at least 1, so a client that honours it is never early.
func retryAfter(d time.Duration) string {
	return strconv.FormatInt(clampSF(max(1, ceilSeconds(d))), 10)
}
