package admitgrpc

import (
	"github.com/admit-go/admit"
	"github.com/admit-go/admit/internal/ratelimit"
)

// rateLimit is the ratelimit value for a decision under the quoted name;
// the values are admithttp's header values, sent as metadata.
func rateLimit(quoted string, d admit.Decision) string {
	var buf [96]byte
	return string(ratelimit.AppendLimit(buf[:0], quoted, d))
}
