package admitgrpc_test

import (
	"context"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitgrpc"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/redisbucket"
	"github.com/admit-go/admit/redisbucket/redistest"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// startRedis is a client of a real redis-server on loopback, stopped
// when the test ends (and with the test process).
func startRedis(t *testing.T) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: redistest.New(t).Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// deadRedis is a client of a loopback port nothing listens on: every
// command fails (connection refused).
func deadRedis(t *testing.T) *redis.Client {
	t.Helper()
	addr, err := redistest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRedis runs the interceptor over redisbucket on a real redis-server:
// the same answers as over keyed, the wait from the server's clock.
func TestRedis(t *testing.T) {
	l, err := redisbucket.New(startRedis(t), 2, 10) // a burst of 2, then 10 per second
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "tcp", admitgrpc.UnaryServerInterceptor(l, admitgrpc.WithPolicyName("shared")), nil)
	c := dial(t, s.addr)
	ctx := context.Background()
	for i := range 2 {
		hd, err := check(t, c, ctx)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		wantHeader(t, hd, "ratelimit-policy", `"shared";q=2`) // redisbucket reports no FillTime
	}
	hd, err := check(t, c, ctx)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third call: %v; want ResourceExhausted", err)
	}
	wantHeader(t, hd, "retry-after", "1")
	ri, _ := details(t, err)
	if ri == nil || ri.RetryDelay.AsDuration() <= 0 || ri.RetryDelay.AsDuration() > 100*time.Millisecond {
		t.Fatalf("RetryInfo %v; want a delay in (0, 100ms]", ri)
	}
	// Waiting the delay is enough (the server's clock has moved at least
	// as far as ours).
	time.Sleep(ri.RetryDelay.AsDuration())
	if _, err := check(t, c, ctx); err != nil {
		t.Fatalf("after RetryDelay: %v", err)
	}
	if got := s.handled.Load(); got != 3 {
		t.Fatalf("the handler ran %d times; want 3", got)
	}
}

// TestLimiterFailure covers the answers to a failed backend: no decision
// (fail closed: Unavailable; the interceptor's WithFailOpen: served), and a
// decision of the limiter's own failure policy, which is followed.
func TestLimiterFailure(t *testing.T) {
	ctx := context.Background()
	newRedis := func(opts ...redisbucket.Option) admit.KeyedLimiter {
		l, err := redisbucket.New(deadRedis(t), 2, 1, append(opts, redisbucket.WithTimeout(200*time.Millisecond))...)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	fallback, err := keyed.New(1, 1e-3, admit.WithClock(buckettest.NewFakeClock(0)))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		l        admit.KeyedLimiter
		opts     []admitgrpc.Option
		want     []codes.Code
		ratelim  []string // the ratelimit header of each call
		wantHand int64
	}{
		{"fail closed", newRedis(), nil, []codes.Code{codes.Unavailable, codes.Unavailable}, []string{"", ""}, 0},
		{"interceptor fails open", newRedis(), []admitgrpc.Option{admitgrpc.WithFailOpen()}, []codes.Code{codes.OK, codes.OK}, []string{"", ""}, 2},
		{"backend fails open", newRedis(redisbucket.WithFailOpen()), nil, []codes.Code{codes.OK, codes.OK}, []string{"", ""}, 2},
		{"fallback decides", newRedis(redisbucket.WithFallback(fallback)), []admitgrpc.Option{admitgrpc.WithFailOpen()},
			[]codes.Code{codes.OK, codes.ResourceExhausted}, []string{`"default";r=0;t=1000`, `"default";r=0;t=1000`}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := startServer(t, "tcp", admitgrpc.UnaryServerInterceptor(c.l, c.opts...), nil)
			cl := dial(t, s.addr)
			for i, want := range c.want {
				hd, err := check(t, cl, ctx)
				if status.Code(err) != want {
					t.Fatalf("call %d: %v; want %v", i, err, want)
				}
				wantHeader(t, hd, "ratelimit", c.ratelim[i])
			}
			if got := s.handled.Load(); got != c.wantHand {
				t.Fatalf("the handler ran %d times; want %d", got, c.wantHand)
			}
		})
	}
}
