package bench

import (
	"net"
	"net/http"
	"time"

	"github.com/didip/tollbooth/v7"
	"github.com/didip/tollbooth/v7/limiter"
	"github.com/go-chi/httprate"

	"github.com/admit-go/admit/admithttp"
	"github.com/admit-go/admit/keyed"
)

// MiddlewareImpl builds one rate-limiting middleware around next. admitAll
// chooses a quota no run can spend; otherwise the quota is one request that
// does not come back for far longer than a run.
type MiddlewareImpl struct {
	Name string
	New  func(admitAll bool, next http.Handler) (http.Handler, error)
}

// MiddlewareImpls lists the middlewares in the fixed order of every table:
// the floor (no middleware when admitting; a bare http.Error 429 when
// denying), this module's admithttp over keyed, then
// go-chi/httprate (a sliding-window counter per key, in memory) and
// tollbooth v7 (an x/time/rate limiter per key in an expiring map). All key
// by r.RemoteAddr, IPv6 by /64.
var MiddlewareImpls = []MiddlewareImpl{
	{"none", func(admitAll bool, next http.Handler) (http.Handler, error) {
		if admitAll {
			return next, nil
		}
		// The floor of a denial: the plain-text 429 itself, as http.Error
		// writes it, which every middleware here also writes.
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "429 too many requests", http.StatusTooManyRequests)
		}), nil
	}},
	{"admithttp", func(admitAll bool, next http.Handler) (http.Handler, error) {
		capacity, rate := int64(1e9), 1e9
		if !admitAll {
			capacity, rate = 1, 1e-6
		}
		l, err := keyed.New(capacity, rate)
		if err != nil {
			return nil, err
		}
		return admithttp.Middleware(l)(next), nil
	}},
	{"httprate", func(admitAll bool, next http.Handler) (http.Handler, error) {
		limit := 1 << 30
		if !admitAll {
			limit = 1
		}
		return httprate.LimitBy(limit, time.Hour, httprateKey)(next), nil
	}},
	{"tollbooth", func(admitAll bool, next http.Handler) (http.Handler, error) {
		perSecond, burst := 1e9, int(1e9)
		if !admitAll {
			perSecond, burst = 1e-6, 1
		}
		lmt := tollbooth.NewLimiter(perSecond, &limiter.ExpirableOptions{DefaultExpirationTTL: time.Hour})
		lmt.SetBurst(burst)
		lmt.SetIPLookups([]string{"RemoteAddr"})
		return tollbooth.LimitHandler(lmt, next), nil
	}},
}

// httprateKey is httprate's recommended key for a direct client: the host
// of RemoteAddr through CanonicalizeIP (IPv6 by /64).
func httprateKey(r *http.Request) (string, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return httprate.CanonicalizeIP(host), nil
}
