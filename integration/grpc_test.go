package integration_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitgrpc"
	"github.com/admit-go/admit/admitotel"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/redisbucket"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// grpcServer is a real grpc-go server on a loopback port serving the
// standard health service behind the interceptor under test, counting the
// calls that reach the service.
type grpcServer struct {
	addr    string
	handled atomic.Int64
}

func startGRPC(t *testing.T, unary grpc.UnaryServerInterceptor) *grpcServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &grpcServer{addr: ln.Addr().String()}
	count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		s.handled.Add(1)
		return h(ctx, req)
	}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(unary, count))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return s
}

func dialGRPC(t *testing.T, addr string, opts ...grpc.DialOption) healthpb.HealthClient {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc)
}

// check makes one Check call and returns the metadata that carries its
// ratelimit fields (an admitted call's header, a refused call's trailer:
// refusals are trailers-only) and its error.
func check(t *testing.T, c healthpb.HealthClient) (metadata.MD, error) {
	t.Helper()
	var hd, tr metadata.MD
	_, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&hd), grpc.Trailer(&tr))
	if err != nil {
		if len(hd) != 0 {
			t.Errorf("a refused call sent header metadata %v", hd)
		}
		return tr, err
	}
	return hd, nil
}

func wantMD(t *testing.T, md metadata.MD, name, want string) {
	t.Helper()
	if got := md.Get(name); want == "" && len(got) != 0 || want != "" && (len(got) != 1 || got[0] != want) {
		t.Errorf("%s = %q; want %q", name, got, want)
	}
}

// details returns the RetryInfo and QuotaFailure of a status error.
func details(err error) (*errdetails.RetryInfo, *errdetails.QuotaFailure) {
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.QuotaFailure:
			qf = d
		}
	}
	return ri, qf
}

// TestGRPCRedis runs the interceptor over redisbucket on a real
// redis-server, bare and through admitotel's wrapper: the same answers as
// over keyed, the wait from the server's clock, w from the one limit
// redisbucket lists (the wrapper, which used to report a FillTime of 0 for
// a limiter without one, hid it).
func TestGRPCRedis(t *testing.T) {
	rdb := startRedis(t)
	for _, wrapped := range []bool{false, true} {
		t.Run(fmt.Sprint("admitotel=", wrapped), func(t *testing.T) {
			l, err := redisbucket.New(rdb, 2, 10, redisbucket.WithPrefix(fmt.Sprint("grpc-", wrapped))) // a burst of 2, then 10 per second
			if err != nil {
				t.Fatal(err)
			}
			var kl admit.KeyedLimiter = l
			if wrapped {
				if kl, err = admitotel.Wrap(l, admitotel.WithMeterProvider(sdkmetric.NewMeterProvider())); err != nil {
					t.Fatal(err)
				}
			}
			s := startGRPC(t, admitgrpc.UnaryServerInterceptor(kl, admitgrpc.WithPolicyName("shared")))
			c := dialGRPC(t, s.addr)
			for i := range 2 {
				md, err := check(t, c)
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				wantMD(t, md, "ratelimit-policy", `"shared";q=2;w=1`)
			}
			md, err := check(t, c)
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("third call: %v; want ResourceExhausted", err)
			}
			wantMD(t, md, "retry-after", "1")
			ri, _ := details(err)
			if ri == nil || ri.RetryDelay.AsDuration() <= 0 || ri.RetryDelay.AsDuration() > 100*time.Millisecond {
				t.Fatalf("RetryInfo %v; want a delay in (0, 100ms]", ri)
			}
			// Waiting the delay is enough (the server's clock has moved at
			// least as far as ours).
			time.Sleep(ri.RetryDelay.AsDuration())
			if _, err := check(t, c); err != nil {
				t.Fatalf("after RetryDelay: %v", err)
			}
			if got := s.handled.Load(); got != 3 {
				t.Fatalf("the handler ran %d times; want 3", got)
			}
		})
	}
}

// TestGRPCRedisLimits: under redisbucket.NewLimits the headers list both
// limits and name the deciding one, and a denial's QuotaFailure names it
// too, not the WithPolicyName default; the same through admitotel's
// wrapper, which has no Limits of its own.
func TestGRPCRedisLimits(t *testing.T) {
	rdb := startRedis(t)
	for _, wrapped := range []bool{false, true} {
		name := "bare"
		if wrapped {
			name = "admitotel"
		}
		t.Run(name, func(t *testing.T) {
			kl := burstDaily(t, rdb, "grpc-"+name, wrapped)
			s := startGRPC(t, admitgrpc.UnaryServerInterceptor(kl))
			c := dialGRPC(t, s.addr)
			const policy = `"burst";q=2;w=3600, "daily";q=1000;w=86400`
			for i, r := range []string{"1", "0"} {
				md, err := check(t, c)
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				wantMD(t, md, "ratelimit-policy", policy)
				if got := md.Get("ratelimit"); len(got) != 1 || got[0][:len(`"burst";r=`)+1] != `"burst";r=`+r {
					t.Fatalf("call %d: ratelimit %q; want burst, r=%s", i, got, r)
				}
			}
			md, err := check(t, c)
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("third call: %v; want ResourceExhausted", err)
			}
			wantMD(t, md, "ratelimit-policy", policy)
			_, qf := details(err)
			if qf == nil || len(qf.Violations) != 1 || qf.Violations[0].QuotaId != "burst" || qf.Violations[0].QuotaValue != 2 {
				t.Fatalf("QuotaFailure %v; want the burst limit of 2", qf)
			}
			if msg := status.Convert(err).Message(); msg[:len(`admitgrpc: rate limit "burst"`)] != `admitgrpc: rate limit "burst"` {
				t.Fatalf("message %q; want it to name burst", msg)
			}
		})
	}
}

// burstDaily is redisbucket.NewLimits with a burst of 2 an hour and 1000 a
// day, on its own prefix, wrapped in admitotel's counting Limiter if
// wrapped.
func burstDaily(t *testing.T, rdb *redis.Client, prefix string, wrapped bool) admit.KeyedLimiter {
	t.Helper()
	l, err := redisbucket.NewLimits(rdb, []admit.Limit{
		admit.Per(time.Hour, 2).Named("burst"),
		admit.Per(24*time.Hour, 1000).Named("daily"),
	}, redisbucket.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	if !wrapped {
		return l
	}
	w, err := admitotel.Wrap(l, admitotel.WithMeterProvider(sdkmetric.NewMeterProvider()))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestGRPCLimiterFailure covers the answers to a failed backend: no
// decision (fail closed: Unavailable; the interceptor's WithFailOpen:
// served), and a decision of the limiter's own failure policy, which is
// followed.
func TestGRPCLimiterFailure(t *testing.T) {
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
		ratelim  []string // the ratelimit field of each call
		policy   string   // the ratelimit-policy field of the fallback's decisions
		wantHand int64
	}{
		{"fail closed", newRedis(), nil, []codes.Code{codes.Unavailable, codes.Unavailable}, []string{"", ""}, "", 0},
		{"interceptor fails open", newRedis(), []admitgrpc.Option{admitgrpc.WithFailOpen()}, []codes.Code{codes.OK, codes.OK}, []string{"", ""}, "", 2},
		{"backend fails open", newRedis(redisbucket.WithFailOpen()), nil, []codes.Code{codes.OK, codes.OK}, []string{"", ""}, "", 2},
		// A failure policy's Decision is shown alone: its q, no w.
		{"fallback decides", newRedis(redisbucket.WithFallback(fallback)), []admitgrpc.Option{admitgrpc.WithFailOpen()},
			[]codes.Code{codes.OK, codes.ResourceExhausted}, []string{`"default";r=0;t=1000`, `"default";r=0;t=1000`}, `"default";q=1`, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := startGRPC(t, admitgrpc.UnaryServerInterceptor(c.l, c.opts...))
			cl := dialGRPC(t, s.addr)
			for i, want := range c.want {
				md, err := check(t, cl)
				if status.Code(err) != want {
					t.Fatalf("call %d: %v; want %v", i, err, want)
				}
				wantMD(t, md, "ratelimit", c.ratelim[i])
				wantMD(t, md, "ratelimit-policy", c.policy)
			}
			if got := s.handled.Load(); got != c.wantHand {
				t.Fatalf("the handler ran %d times; want %d", got, c.wantHand)
			}
		})
	}
}

// TestGRPCClientBackendDown: a client interceptor over a bucket whose
// backend is down answers codes.Unavailable and sends nothing.
func TestGRPCClientBackendDown(t *testing.T) {
	dead, err := redisbucket.New(deadRedis(t), 1, 1, redisbucket.WithTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	s := startGRPC(t, func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req)
	})
	c := dialGRPC(t, s.addr, grpc.WithUnaryInterceptor(admitgrpc.UnaryClientInterceptor(dead.Bucket("client"))))
	if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("%v; want Unavailable", err)
	}
	if got := s.handled.Load(); got != 0 {
		t.Fatalf("%d calls reached the server; want none", got)
	}
}
