package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitgrpc"
	"github.com/admit-go/admit/admithttp"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/redisbucket"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestFallbackShownAlone: with the Redis primary down (nothing listens on
// its port), redisbucket's WithFallback decides each request from a keyed
// bucket that holds one replica's share, as its docs advise: the same
// capacity at a quarter of the rate, or the same Names scaled. The fields
// must describe that Decision alone, its limit's name and q without w,
// through admithttp and admitgrpc, never Redis's limits: those have
// another rate (w=2 where the fallback refills in 8 s) or another capacity
// (q=20 over r from a bucket of 2).
func TestFallbackShownAlone(t *testing.T) {
	type answer struct {
		status                  int // the HTTP status; 429 is ResourceExhausted over gRPC
		policy, rateLimit, wait string
	}
	cases := []struct {
		name  string
		redis func(t *testing.T, fallback admit.KeyedLimiter) admit.KeyedLimiter
		fall  func(t *testing.T) admit.KeyedLimiter
		quota string // the QuotaFailure's QuotaId on a gRPC denial
		want  []answer
	}{
		{
			name: "same capacity",
			redis: func(t *testing.T, fb admit.KeyedLimiter) admit.KeyedLimiter {
				l, err := redisbucket.New(deadRedis(t), 2, 1, redisbucket.WithFallback(fb), redisbucket.WithTimeout(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				return l
			},
			fall: func(t *testing.T) admit.KeyedLimiter {
				k, err := keyed.New(2, 0.25, admit.WithClock(buckettest.NewFakeClock(0)))
				if err != nil {
					t.Fatal(err)
				}
				return k
			},
			quota: "default",
			want: []answer{
				{200, `"default";q=2`, `"default";r=1;t=4`, ""},
				{200, `"default";q=2`, `"default";r=0;t=8`, ""},
				{429, `"default";q=2`, `"default";r=0;t=8`, "4"},
			},
		},
		{
			name: "same names",
			redis: func(t *testing.T, fb admit.KeyedLimiter) admit.KeyedLimiter {
				l, err := redisbucket.NewLimits(deadRedis(t), []admit.Limit{
					{Name: "burst", Capacity: 20, Rate: 1},
					admit.Per(24*time.Hour, 1000).Named("daily"),
				}, redisbucket.WithFallback(fb), redisbucket.WithTimeout(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				return l
			},
			fall: func(t *testing.T) admit.KeyedLimiter {
				k, err := keyed.NewLimits([]admit.Limit{
					{Name: "burst", Capacity: 2, Rate: 0.25},
					admit.Per(24*time.Hour, 250).Named("daily"),
				}, admit.WithClock(buckettest.NewFakeClock(0)))
				if err != nil {
					t.Fatal(err)
				}
				return k
			},
			quota: "burst",
			// t is until every limit of the fallback is full: a daily
			// token at 250 a day is 345.6 s.
			want: []answer{
				{200, `"burst";q=2`, `"burst";r=1;t=346`, ""},
				{200, `"burst";q=2`, `"burst";r=0;t=692`, ""},
				{429, `"burst";q=2`, `"burst";r=0;t=692`, "4"},
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name+"/http", func(t *testing.T) {
			l := c.redis(t, c.fall(t))
			srv := httptest.NewServer(admithttp.Middleware(l)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
			defer srv.Close()
			for i, want := range c.want {
				resp := get(t, srv)
				got := answer{resp.StatusCode, resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"), resp.Header.Get("Retry-After")}
				if got != want {
					t.Errorf("request %d: %+v; want %+v", i, got, want)
				}
			}
		})
		t.Run(c.name+"/grpc", func(t *testing.T) {
			l := c.redis(t, c.fall(t))
			s := startGRPC(t, admitgrpc.UnaryServerInterceptor(l))
			cl := dialGRPC(t, s.addr)
			for i, want := range c.want {
				md, err := check(t, cl)
				got := answer{200, first(md.Get("ratelimit-policy")), first(md.Get("ratelimit")), first(md.Get("retry-after"))}
				switch status.Code(err) {
				case codes.OK:
				case codes.ResourceExhausted:
					got.status = 429
					if _, qf := details(err); qf == nil || len(qf.Violations) != 1 || qf.Violations[0].QuotaId != c.quota || qf.Violations[0].QuotaValue != 2 {
						t.Errorf("call %d: QuotaFailure %v; want the fallback's limit of 2", i, qf)
					}
				default:
					t.Fatalf("call %d: %v", i, err)
				}
				if got != want {
					t.Errorf("call %d: %+v; want %+v", i, got, want)
				}
			}
		})
	}
}

// first is vs[0], or "" when vs is empty.
func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

// TestFallbackRefusalNotFailedOpen: with the Redis primary down, a request
// that costs more than the fallback's whole capacity (one replica's share,
// as WithFallback's docs advise) is refused by the failure policy, which
// returns no bucket's Decision. That refusal is a decision: the
// middleware's and the interceptor's WithFailOpen must not turn it into an
// unlimited admission (they did: only the costliest requests got through).
// A request within the fallback's capacity is still decided by it.
func TestFallbackRefusalNotFailedOpen(t *testing.T) {
	newLimiter := func(t *testing.T) admit.KeyedLimiter {
		share, err := keyed.New(10, 1, admit.WithClock(buckettest.NewFakeClock(0)))
		if err != nil {
			t.Fatal(err)
		}
		l, err := redisbucket.New(deadRedis(t), 100, 10, redisbucket.WithFallback(share), redisbucket.WithTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	for _, cost := range []int64{50, 5} {
		t.Run(fmt.Sprintf("cost=%d/http", cost), func(t *testing.T) {
			var handled atomic.Int64
			h := admithttp.Middleware(newLimiter(t), admithttp.WithFailOpen(),
				admithttp.WithCost(func(*http.Request) int64 { return cost }),
			)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { handled.Add(1) }))
			srv := httptest.NewServer(h)
			defer srv.Close()
			resp := get(t, srv)
			switch {
			case cost > 10 && (resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || handled.Load() != 0):
				t.Errorf("cost %d above the fallback's 10: status %d, Retry-After %q, handler ran %d times; want 503 with Retry-After, handler not run",
					cost, resp.StatusCode, resp.Header.Get("Retry-After"), handled.Load())
			case cost <= 10 && (resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit") != `"default";r=5;t=5` || handled.Load() != 1):
				t.Errorf("cost %d within the fallback's 10: status %d, RateLimit %q, handler ran %d times; want 200 decided by the fallback",
					cost, resp.StatusCode, resp.Header.Get("RateLimit"), handled.Load())
			}
		})
		t.Run(fmt.Sprintf("cost=%d/grpc", cost), func(t *testing.T) {
			s := startGRPC(t, admitgrpc.UnaryServerInterceptor(newLimiter(t), admitgrpc.WithFailOpen(),
				admitgrpc.WithCost(func(context.Context, string) int64 { return cost })))
			cl := dialGRPC(t, s.addr)
			md, err := check(t, cl)
			switch {
			case cost > 10 && (status.Code(err) != codes.Unavailable || s.handled.Load() != 0):
				t.Errorf("cost %d above the fallback's 10: %v, handler ran %d times; want Unavailable, handler not run", cost, err, s.handled.Load())
			case cost <= 10 && (err != nil || first(md.Get("ratelimit")) != `"default";r=5;t=5` || s.handled.Load() != 1):
				t.Errorf("cost %d within the fallback's 10: %v, ratelimit %q, handler ran %d times; want OK decided by the fallback",
					cost, err, md.Get("ratelimit"), s.handled.Load())
			}
		})
	}
}

// TestInvalidConfigNotFailedOpen: a limit that passes admit.ValidateLimits
// but that the limiter cannot enforce (redisbucket rejects a capacity of
// 2^40 at 1e-6 a second; Redis refusing a decision, WRONGTYPE or a script
// error, comes the same way) is a server bug, whatever the failure
// policies: admithttp answers 500 and admitgrpc Internal, and neither runs
// the handler under WithFailOpen (admitgrpc did, unlimited).
func TestInvalidConfigNotFailedOpen(t *testing.T) {
	lim := []admit.Limit{{Name: "pc", Capacity: 1 << 40, Rate: 1e-6}}
	l, err := redisbucket.New(deadRedis(t), 100, 10, redisbucket.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("http", func(t *testing.T) {
		var handled atomic.Int64
		srv := httptest.NewServer(admithttp.Middleware(l, admithttp.WithFailOpen(),
			admithttp.WithLimits(func(*http.Request) ([]admit.Limit, error) { return lim, nil }),
		)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { handled.Add(1) })))
		defer srv.Close()
		if resp := get(t, srv); resp.StatusCode != http.StatusInternalServerError || handled.Load() != 0 {
			t.Errorf("status %d, handler ran %d times; want 500, not run", resp.StatusCode, handled.Load())
		}
	})
	t.Run("grpc", func(t *testing.T) {
		s := startGRPC(t, admitgrpc.UnaryServerInterceptor(l, admitgrpc.WithFailOpen(),
			admitgrpc.WithLimits(func(context.Context, string) ([]admit.Limit, error) { return lim, nil })))
		cl := dialGRPC(t, s.addr)
		if _, err := check(t, cl); status.Code(err) != codes.Internal || s.handled.Load() != 0 {
			t.Errorf("%v, handler ran %d times; want Internal, not run", err, s.handled.Load())
		}
	})
}
