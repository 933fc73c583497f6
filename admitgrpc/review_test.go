package admitgrpc_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitgrpc"
	"github.com/admit-go/admit/keyed"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// throttledConfig retries UNAVAILABLE (a shed call) once, under a
// retryThrottling of 10 tokens that stops retries at 5 or fewer.
const throttledConfig = `{
	"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1},
	"methodConfig": [{
		"name": [{"service": "grpc.health.v1.Health"}],
		"retryPolicy": {
			"maxAttempts": 2,
			"initialBackoff": "0.001s",
			"maxBackoff": "0.001s",
			"backoffMultiplier": 1,
			"retryableStatusCodes": ["UNAVAILABLE"]
		}
	}]
}`

// TestReviewPushbackNeverCostsRetryThrottling pins what a refusal with
// grpc-retry-pushback-ms -1 does to a grpc-go client's retryThrottling:
// grpc-go counts it as a failure whatever its code and whether or not the
// method's retryPolicy lists that code (gRFC A6: a pushback saying not to
// retry is a failure), and the tokens are the ClientConn's. So a client
// whose denials say -1 (a zero rate, a token due after the deadline, a cost
// above the capacity) soon stops retrying even the UNAVAILABLE of a shed
// call, which its retryPolicy lists. A denial with a positive pushback of a
// code the policy does not list costs nothing.
func TestReviewPushbackNeverCostsRetryThrottling(t *testing.T) {
	l, err := keyed.New(1, 0) // never refills: every denial's pushback is -1
	if err != nil {
		t.Fatal(err)
	}
	rate := admitgrpc.UnaryServerInterceptor(l, admitgrpc.WithLimits(func(ctx context.Context, _ string) ([]admit.Limit, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if len(md.Get("limited")) == 0 {
			return nil, nil
		}
		return []admit.Limit{{Capacity: 1}}, nil
	}), admitgrpc.WithKey(func(context.Context, string) (string, error) { return "k", nil }))
	var shed atomic.Int64 // attempts shed with UNAVAILABLE
	shedding := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		shed.Add(1)
		return nil, status.Error(codes.Unavailable, "shed")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(rate, shedding))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(ln)
	defer gs.Stop()

	client := func() healthpb.HealthClient {
		cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(),
			grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultServiceConfig(throttledConfig))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return healthpb.NewHealthClient(cc)
	}
	shedAttempts := func(c healthpb.HealthClient) int64 {
		before := shed.Load()
		_, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("shed call: %v", err)
		}
		return shed.Load() - before
	}

	// A fresh client retries a shed call.
	if n := shedAttempts(client()); n != 2 {
		t.Fatalf("a fresh client made %d attempts of a shed call, want 2", n)
	}

	// A client denied with -1 five times more does not.
	c := client()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "limited", "1"), time.Minute)
	defer cancel()
	for i := range 6 {
		var tr metadata.MD
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&tr))
		if i == 0 {
			continue // the one token: admitted, shed, and its retry denied
		}
		if status.Code(err) != codes.ResourceExhausted || tr.Get("grpc-retry-pushback-ms")[0] != "-1" {
			t.Fatalf("denial %d: %v, trailer %v", i, err, tr)
		}
	}
	if n := shedAttempts(c); n != 1 {
		t.Fatalf("after five -1 denials a shed call was attempted %d times, want 1 (retryThrottling spent)", n)
	}
}

// A client of a server on a Unix socket may bind its own socket to any
// path, "192.0.2.77:1" say, which the server's accept reports as the peer's
// address: KeyByPeer must not key it as the IP address it looks like (the
// doc: a Unix socket peer is an error), or each such client chooses its key.
func TestReviewUnixPeerNotAnIP(t *testing.T) {
	t.Chdir(t.TempDir()) // the bound name is a path relative to it
	ln, err := net.Listen("unix", "srv.sock")
	if err != nil {
		t.Fatal(err)
	}
	var key string
	var keyErr error
	gs := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		key, keyErr = admitgrpc.KeyByPeer()(ctx, info.FullMethod)
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(ln)
	defer gs.Stop()
	cc, err := grpc.NewClient("passthrough:///unix", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return net.DialUnix("unix", &net.UnixAddr{Name: "192.0.2.77:1", Net: "unix"}, &net.UnixAddr{Name: "srv.sock", Net: "unix"})
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if keyErr == nil {
		t.Fatalf("a Unix socket peer bound to %q was keyed %q; want an error", "192.0.2.77:1", key)
	}
}
