package admitgrpc_test

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitgrpc"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/keyedtest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// server is a real grpc-go server on a loopback TCP port serving the
// standard health service, with the interceptors under test in front and a
// counter of the calls and streams that reached the service behind them.
type server struct {
	addr    string
	handled atomic.Int64
}

func startServer(t testing.TB, network string, unary grpc.UnaryServerInterceptor, stream grpc.StreamServerInterceptor) *server {
	t.Helper()
	host := "127.0.0.1:0"
	if network == "tcp6" {
		host = "[::1]:0"
	}
	ln, err := net.Listen(network, host)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{addr: ln.Addr().String()}
	var us []grpc.UnaryServerInterceptor
	var ss []grpc.StreamServerInterceptor
	if unary != nil {
		us = append(us, unary)
	}
	if stream != nil {
		ss = append(ss, stream)
	}
	us = append(us, func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		s.handled.Add(1)
		return h(ctx, req)
	})
	ss = append(ss, func(srv any, st grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		s.handled.Add(1)
		return h(srv, st)
	})
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(us...), grpc.ChainStreamInterceptor(ss...))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return s
}

func dial(t testing.TB, addr string, opts ...grpc.DialOption) healthpb.HealthClient {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc)
}

// check makes one Check call and returns the metadata carrying its
// ratelimit fields and its error: an admitted call's header metadata, or a
// refused call's trailer metadata, which must then come without header
// metadata (trailers-only, so that grpc-go's retryPolicy may retry it).
func check(t *testing.T, c healthpb.HealthClient, ctx context.Context) (metadata.MD, error) {
	t.Helper()
	var hd, tr metadata.MD
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hd), grpc.Trailer(&tr))
	if err == nil {
		if len(tr.Get("ratelimit")) != 0 {
			t.Errorf("an admitted call has ratelimit in its trailer: %v", tr)
		}
		return hd, nil
	}
	if len(hd) != 0 {
		t.Errorf("a refused call (%v) sent header metadata %v; want trailers only", err, hd)
	}
	return tr, err
}

func wantHeader(t *testing.T, hd metadata.MD, name, want string) {
	t.Helper()
	if got := hd.Get(name); want == "" && len(got) != 0 || want != "" && (len(got) != 1 || got[0] != want) {
		t.Errorf("header %s = %q; want %q", name, got, want)
	}
}

// details returns the RetryInfo and QuotaFailure of a status error.
func details(t *testing.T, err error) (*errdetails.RetryInfo, *errdetails.QuotaFailure) {
	t.Helper()
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.QuotaFailure:
			qf = d
		case error:
			t.Fatalf("detail does not decode: %v", d)
		}
	}
	return ri, qf
}

func TestUnaryDenial(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	l, err := keyed.New(2, 1, admit.WithClock(clk)) // per client: a burst of 2, then 1 per second
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "tcp", admitgrpc.UnaryServerInterceptor(l, admitgrpc.WithPolicyName("api")), nil)
	c := dial(t, s.addr)
	ctx := context.Background()

	for i, want := range []string{`"api";r=1;t=1`, `"api";r=0;t=2`} {
		hd, err := check(t, c, ctx)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		wantHeader(t, hd, "ratelimit-policy", `"api";q=2;w=2`)
		wantHeader(t, hd, "ratelimit", want)
		wantHeader(t, hd, "retry-after", "")
	}
	clk.Advance(300 * time.Millisecond) // 0.3 tokens: the next is 0.7 s away
	hd, err := check(t, c, ctx)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third call: %v; want ResourceExhausted", err)
	}
	wantHeader(t, hd, "ratelimit-policy", `"api";q=2;w=2`)
	wantHeader(t, hd, "ratelimit", `"api";r=0;t=2`)
	wantHeader(t, hd, "retry-after", "1")
	ri, qf := details(t, err)
	if ri == nil || ri.RetryDelay.AsDuration() != 700*time.Millisecond {
		t.Fatalf("RetryInfo %v; want a RetryDelay of exactly 700ms", ri)
	}
	if qf == nil || len(qf.Violations) != 1 || qf.Violations[0].QuotaId != "api" || qf.Violations[0].Subject != "policy:api" || qf.Violations[0].QuotaValue != 2 {
		t.Fatalf("QuotaFailure %v; want one violation of policy api, capacity 2", qf)
	}
	if got := s.handled.Load(); got != 2 {
		t.Fatalf("the handler ran %d times; want 2 (not for the denial)", got)
	}
	// Never early: a nanosecond before the RetryDelay the call is still
	// denied; at it, admitted.
	clk.Advance(ri.RetryDelay.AsDuration() - 1)
	if _, err := check(t, c, ctx); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("1ns before RetryDelay: %v; want ResourceExhausted", err)
	}
	clk.Advance(1)
	if _, err := check(t, c, ctx); err != nil {
		t.Fatalf("at RetryDelay: %v; want admitted", err)
	}
}

func TestStreamDecidedOnce(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	l, err := keyed.New(1, 1, admit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "tcp", nil, admitgrpc.StreamServerInterceptor(l))
	c := dial(t, s.addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The first stream takes the only token; the health service sends
	// the status at once, and more messages would not be counted.
	w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	hd, err := w.Header()
	if err != nil {
		t.Fatal(err)
	}
	wantHeader(t, hd, "ratelimit-policy", `"default";q=1;w=1`)
	wantHeader(t, hd, "ratelimit", `"default";r=0;t=1`)

	// A second stream is denied when it opens.
	w2, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = w2.Recv()
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream: %v; want ResourceExhausted", err)
	}
	if ri, _ := details(t, err); ri == nil || ri.RetryDelay.AsDuration() != time.Second {
		t.Fatalf("RetryInfo %v; want 1s", ri)
	}
	if hd, _ := w2.Header(); len(hd) != 0 {
		t.Errorf("a denied stream sent header metadata %v; want trailers only", hd)
	}
	wantHeader(t, w2.Trailer(), "retry-after", "1")
	if got := s.handled.Load(); got != 1 {
		t.Fatalf("the stream handler ran %d times; want 1", got)
	}
	// Unary calls are not intercepted by the stream interceptor.
	if _, err := check(t, c, ctx); err != nil {
		t.Fatalf("unary call: %v", err)
	}
}

func TestKeyError(t *testing.T) {
	l, err := keyed.New(5, 1, admit.WithClock(buckettest.NewFakeClock(0)))
	if err != nil {
		t.Fatal(err)
	}
	key := admitgrpc.WithKey(admitgrpc.KeyByMetadata("x-api-key"))
	s := startServer(t, "tcp", admitgrpc.UnaryServerInterceptor(l, key), admitgrpc.StreamServerInterceptor(l, key))
	c := dial(t, s.addr)
	hd, err := check(t, c, context.Background())
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no API key: %v; want InvalidArgument", err)
	}
	wantHeader(t, hd, "ratelimit", "")
	w, err := c.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("stream without an API key: %v; want InvalidArgument", err)
	}
	if got := s.handled.Load(); got != 0 {
		t.Fatalf("the handler ran %d times; want 0", got)
	}
	// With the key, two API keys are two buckets.
	for _, kw := range [][2]string{{"k1", `"default";r=4;t=1`}, {"k1", `"default";r=3;t=2`}, {"k2", `"default";r=4;t=1`}} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "X-API-Key", kw[0])
		hd, err := check(t, c, ctx)
		if err != nil {
			t.Fatal(err)
		}
		wantHeader(t, hd, "ratelimit", kw[1])
	}
}

func TestCostAboveCapacity(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	l, err := keyed.New(3, 1, admit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	cost := func(_ context.Context, method string) int64 {
		if method == "/grpc.health.v1.Health/Check" {
			return 4
		}
		return 1
	}
	s := startServer(t, "tcp", admitgrpc.UnaryServerInterceptor(l, admitgrpc.WithCost(cost), admitgrpc.WithPolicyName("heavy")), nil)
	c := dial(t, s.addr)
	hd, err := check(t, c, context.Background())
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("cost 4 on capacity 3: %v; want ResourceExhausted", err)
	}
	ri, qf := details(t, err)
	if ri != nil {
		t.Errorf("RetryInfo %v on a call that can never fit", ri)
	}
	if qf == nil || qf.Violations[0].QuotaId != "heavy" || qf.Violations[0].QuotaValue != 3 {
		t.Errorf("QuotaFailure %v; want policy heavy, capacity 3", qf)
	}
	// The key's state is reported, untouched.
	wantHeader(t, hd, "ratelimit-policy", `"heavy";q=3;w=3`)
	wantHeader(t, hd, "ratelimit", `"heavy";r=3;t=0`)
	wantHeader(t, hd, "retry-after", "")
	if s.handled.Load() != 0 {
		t.Fatal("the handler ran")
	}
}

func TestNegativeCost(t *testing.T) {
	l, err := keyed.New(3, 1)
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "tcp", admitgrpc.UnaryServerInterceptor(l, admitgrpc.WithCost(func(context.Context, string) int64 { return -1 })), nil)
	if _, err := check(t, dial(t, s.addr), context.Background()); status.Code(err) != codes.Internal {
		t.Fatalf("negative cost: %v; want Internal", err)
	}
}

// TestPeerIPv6 keys a real IPv6 loopback connection by its /64.
func TestPeerIPv6(t *testing.T) {
	l, err := keyed.New(1, 1e-3)
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "tcp6", admitgrpc.UnaryServerInterceptor(l), nil)
	c := dial(t, s.addr)
	if _, err := check(t, c, context.Background()); err != nil {
		t.Fatal(err)
	}
	// The key is ::/64: its bucket is empty now; an IPv4 key is not.
	if d, err := l.AllowN(context.Background(), "::/64", 0); err != nil || d.Remaining != 0 {
		t.Fatalf("key ::/64: %+v, %v; want the drained bucket", d, err)
	}
	if d, err := l.AllowN(context.Background(), "::1", 0); err != nil || d.Remaining != 1 {
		t.Fatalf("key ::1: %+v, %v; want a full bucket", d, err)
	}
}

func TestInterceptorPanics(t *testing.T) {
	l, err := keyed.New(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(){
		"nil limiter":     func() { admitgrpc.UnaryServerInterceptor(nil) },
		"nil key":         func() { admitgrpc.UnaryServerInterceptor(l, admitgrpc.WithKey(nil)) },
		"nil cost":        func() { admitgrpc.StreamServerInterceptor(l, admitgrpc.WithCost(nil)) },
		"nil option":      func() { admitgrpc.UnaryServerInterceptor(l, nil) },
		"bad policy name": func() { admitgrpc.UnaryServerInterceptor(l, admitgrpc.WithPolicyName("é")) },
		"nil limits":      func() { admitgrpc.UnaryServerInterceptor(l, admitgrpc.WithLimits(nil)) },
		"limits without a PolicyLimiter": func() {
			admitgrpc.UnaryServerInterceptor(onlyAllowN{l}, admitgrpc.WithLimits(func(context.Context, string) ([]admit.Limit, error) { return nil, nil }))
		},
		"a wrapper of a limiter that is not a PolicyLimiter": func() {
			admitgrpc.UnaryServerInterceptor(keyedtest.Wrapper{L: onlyAllowN{l}}, admitgrpc.WithLimits(func(context.Context, string) ([]admit.Limit, error) { return nil, nil }))
		},
		"nil client limiter": func() { admitgrpc.UnaryClientInterceptor(nil) },
		"nil stream client":  func() { admitgrpc.StreamClientInterceptor(nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// onlyAllowN hides every method but AllowN: a KeyedLimiter that is not a
// PolicyLimiter, whatever keyed offers.
type onlyAllowN struct{ l admit.KeyedLimiter }

func (o onlyAllowN) AllowN(ctx context.Context, key string, n int64) (admit.Decision, error) {
	return o.l.AllowN(ctx, key, n)
}

// TestWithLimitsThroughWrapper: a wrapper of a PolicyLimiter is accepted.
func TestWithLimitsThroughWrapper(t *testing.T) {
	k, err := keyed.New(1, 1, admit.WithClock(buckettest.NewFakeClock(0)))
	if err != nil {
		t.Fatal(err)
	}
	l := keyedtest.Wrapper{L: k}
	s := startServer(t, "tcp", admitgrpc.UnaryServerInterceptor(l, admitgrpc.WithLimits(tiers)), nil)
	hd, err := check(t, dial(t, s.addr), context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := hd.Get("ratelimit"); len(got) != 1 || !strings.HasPrefix(got[0], `"burst";r=1;t=1728`) {
		t.Fatalf("ratelimit %q; want burst, 1 left, t=17280 or 17281", got)
	}
}
