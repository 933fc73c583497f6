package admitgrpc_test

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitgrpc"
	"github.com/admit-go/admit/keyed"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// headerSink is where grpc.SetHeader puts a call's header metadata: the
// part of a server stream the interceptor touches, so that its own
// allocations can be counted without a transport's.
type headerSink struct{ md metadata.MD }

func (s *headerSink) Method() string                  { return "/grpc.health.v1.Health/Check" }
func (s *headerSink) SetHeader(md metadata.MD) error  { s.md = md; return nil }
func (s *headerSink) SendHeader(md metadata.MD) error { s.md = md; return nil }
func (s *headerSink) SetTrailer(md metadata.MD) error { s.md = md; return nil }

// TestLimitsAllocs: once a list's headers are cached, a call under
// WithLimits allocates what a call under one limit does, the limiters' own
// allocations set apart (the interceptor used to render the list's
// ratelimit-policy on every call).
func TestLimitsAllocs(t *testing.T) {
	k, err := keyed.New(1<<40, 1e9)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := keyed.New(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	big := []admit.Limit{
		admit.Per(time.Second, 1e9).WithBurst(1 << 40).Named("burst"),
		admit.Per(24*time.Hour, 1<<45).Named("daily"),
	}
	bigger := slices.Clone(big)
	bigger[0].Capacity++
	paid := false
	tier := func(context.Context, string) ([]admit.Limit, error) {
		if paid {
			return bigger, nil
		}
		return big, nil
	}
	sink := &headerSink{}
	ctx := peer.NewContext(grpc.NewContextWithServerTransportStream(context.Background(), sink),
		&peer.Peer{Addr: net.TCPAddrFromAddrPort(netip.MustParseAddrPort("192.0.2.1:4711"))})
	info := &grpc.UnaryServerInfo{FullMethod: sink.Method()}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	count := func(in grpc.UnaryServerInterceptor) float64 {
		if _, err := in(ctx, nil, info, handler); err != nil || len(sink.md.Get("ratelimit")) != 1 {
			t.Fatalf("%v, header %v; want admitted with its fields", err, sink.md)
		}
		return leastAllocs(func() { in(ctx, nil, info, handler) })
	}
	bg := context.Background()
	one := count(admitgrpc.UnaryServerInterceptor(k)) - leastAllocs(func() { k.AllowN(bg, "192.0.2.1", 1) })
	own := func(limits []admit.Limit) float64 {
		return leastAllocs(func() { pl.AllowLimits(bg, "192.0.2.1", 1, limits...) })
	}
	in := admitgrpc.UnaryServerInterceptor(pl, admitgrpc.WithLimits(tier))
	paid = true
	count(in) // both lists cached
	paid = false
	if got := count(in) - own(big); got != one {
		t.Fatalf("%v allocations per call under WithLimits, %v under one limit (the limiters' own left out)", got, one)
	}
	alternating := leastAllocs(func() {
		paid = false
		in(ctx, nil, info, handler)
		paid = true
		in(ctx, nil, info, handler)
	}) - own(big) - own(bigger)
	if alternating != 2*one {
		t.Fatalf("%v allocations per two calls alternating tiers, want %v", alternating, 2*one)
	}
	t.Logf("%v allocations per admitted call, the limiter's own left out", one)
}

// leastAllocs is testing.AllocsPerRun(100, f) at its least over three
// runs. AllocsPerRun counts every allocation the process makes while f
// runs, and once in a clean-clone CI run a measurement here read 741 more
// per call than any rerun (20 reruns of the package under load could not
// repeat it): something else in the process allocated meanwhile. What f
// allocates is the same in every run, so the least of three is f's own
// count unless all three are disturbed; the assertions stay exact.
func leastAllocs(f func()) float64 {
	least := testing.AllocsPerRun(100, f)
	for range 2 {
		least = min(least, testing.AllocsPerRun(100, f))
	}
	return least
}
