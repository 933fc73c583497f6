package admitgrpc_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/admit-go/admit/adaptive"
	"github.com/admit-go/admit/admitgrpc"
	"github.com/admit-go/admit/admithttp"
)

// faulty puts, behind the interceptor under test, a handler that fails
// with the code a call's "fail" metadata names, or with a plain error
// ("plain"), or with its own timeout's or cancellation's context error,
// wrapped, while the call's context is live ("own-deadline",
// "own-cancel"); or, with "block", waits for the call's context to end.
func faulty(in grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return in(ctx, req, info, func(ctx context.Context, req any) (any, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			if len(md.Get("block")) > 0 {
				<-ctx.Done()
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			if v := md.Get("fail"); len(v) == 1 {
				switch v[0] {
				case "plain":
					return nil, errors.New("injected")
				case "own-deadline":
					own, cancel := context.WithTimeout(ctx, time.Millisecond)
					defer cancel()
					<-own.Done()
					return nil, fmt.Errorf("the call behind: %w", own.Err())
				case "own-cancel":
					own, cancel := context.WithCancel(ctx)
					cancel()
					return nil, fmt.Errorf("the call behind: %w", own.Err())
				}
				var c codes.Code
				if err := c.UnmarshalJSON([]byte(`"` + v[0] + `"`)); err != nil {
					return nil, err
				}
				return nil, status.Error(c, "injected")
			}
			return h(ctx, req)
		})
	}
}

func newAdaptive(t *testing.T, opts ...adaptive.Option) *adaptive.Limiter {
	t.Helper()
	l, err := adaptive.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestUnaryConcurrency(t *testing.T) {
	l := newAdaptive(t, adaptive.WithInitialLimit(1))
	s := startServer(t, "tcp", faulty(admitgrpc.UnaryServerConcurrency(l)), nil)
	c := dial(t, s.addr)
	ctx := context.Background()

	held, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = check(t, c, ctx)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("shed call: %v, want Unavailable", err)
	}
	held.Ignore()

	// Every code, by the code the client receives: Dropped where the
	// standard mapping to HTTP gives 429 or 5xx, and for Canceled, as
	// admithttp drops 429, 5xx and callers gone.
	for _, tc := range []struct {
		fail string
		want codes.Code
		drop bool
	}{
		{"", codes.OK, false},
		{"CANCELLED", codes.Canceled, true},
		{"UNKNOWN", codes.Unknown, true},
		{"INVALID_ARGUMENT", codes.InvalidArgument, false},
		{"DEADLINE_EXCEEDED", codes.DeadlineExceeded, true},
		{"NOT_FOUND", codes.NotFound, false},
		{"ALREADY_EXISTS", codes.AlreadyExists, false},
		{"PERMISSION_DENIED", codes.PermissionDenied, false},
		{"RESOURCE_EXHAUSTED", codes.ResourceExhausted, true},
		{"FAILED_PRECONDITION", codes.FailedPrecondition, false},
		{"ABORTED", codes.Aborted, false},
		{"OUT_OF_RANGE", codes.OutOfRange, false},
		{"UNIMPLEMENTED", codes.Unimplemented, true},
		{"INTERNAL", codes.Internal, true},
		{"UNAVAILABLE", codes.Unavailable, true},
		{"DATA_LOSS", codes.DataLoss, true},
		{"UNAUTHENTICATED", codes.Unauthenticated, false},
		// What grpc-go sends for errors that are not statuses.
		{"plain", codes.Unknown, true},
		{"own-deadline", codes.DeadlineExceeded, true},
		{"own-cancel", codes.Canceled, true},
	} {
		before := l.Stats()
		cctx := ctx
		if tc.fail != "" {
			cctx = metadata.AppendToOutgoingContext(ctx, "fail", tc.fail)
		}
		_, err := check(t, c, cctx)
		if got := status.Code(err); got != tc.want {
			t.Fatalf("%q: the client got %v, want %v", tc.fail, got, tc.want)
		}
		after := l.Stats()
		if got := after.Drops - before.Drops; got != map[bool]uint64{true: 1, false: 0}[tc.drop] {
			t.Errorf("%q: %d drops, want drop=%v", tc.fail, got, tc.drop)
		}
		if after.InFlight != 0 {
			t.Errorf("%q: %d in flight after the call", tc.fail, after.InFlight)
		}
	}
}

// A call whose client gave up while it was in flight is Dropped, as
// admithttp.Concurrency drops a request whose client went away.
func TestUnaryConcurrencyClientGone(t *testing.T) {
	l := newAdaptive(t, adaptive.WithInitialLimit(4))
	s := startServer(t, "tcp", faulty(admitgrpc.UnaryServerConcurrency(l)), nil)
	c := dial(t, s.addr)
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "block", "1"))
	errc := make(chan error, 1)
	go func() {
		_, err := check(t, c, ctx)
		errc <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for l.InFlight() != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Fatalf("client: %v, want Canceled", err)
	}
	for l.InFlight() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if st := l.Stats(); st.InFlight != 0 || st.Drops != 1 || st.Successes+st.Ignored != 0 {
		t.Fatalf("after the client left: %+v; want one drop and nothing else", st)
	}
}

// A grpc-go client with a retry policy on UNAVAILABLE retries a shed call
// and succeeds once a permit is free; the handler runs once.
func TestUnaryConcurrencyRetryPolicy(t *testing.T) {
	l := newAdaptive(t, adaptive.WithInitialLimit(1))
	s := startServer(t, "tcp", admitgrpc.UnaryServerConcurrency(l), nil)
	const cfg = `{
	  "methodConfig": [{
	    "name": [{"service": "grpc.health.v1.Health"}],
	    "retryPolicy": {
	      "maxAttempts": 5,
	      "initialBackoff": "0.02s",
	      "maxBackoff": "0.2s",
	      "backoffMultiplier": 2,
	      "retryableStatusCodes": ["UNAVAILABLE"]
	    }
	  }],
	  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.5}
	}`
	c := dial(t, s.addr, grpc.WithDefaultServiceConfig(cfg))
	held, err := l.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Free the permit once the first attempt has been shed.
	go func() {
		for l.Stats().Shed == 0 {
			time.Sleep(time.Millisecond)
		}
		held.Success()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := check(t, c, ctx); err != nil {
		t.Fatalf("retried call: %v", err)
	}
	st := l.Stats()
	if st.Shed < 1 || s.handled.Load() != 1 {
		t.Fatalf("shed %d times, handled %d; want >= 1 and 1", st.Shed, s.handled.Load())
	}
	t.Logf("shed %d attempts before the retry that succeeded", st.Shed)

	// Without a retry policy the client sees the shedding.
	held2, _ := l.Acquire(context.Background())
	defer held2.Ignore()
	if _, err := check(t, dial(t, s.addr), context.Background()); status.Code(err) != codes.Unavailable {
		t.Fatalf("no retry policy: %v, want Unavailable", err)
	}
}

// A stream holds its permit until it ends; the next one is shed.
func TestStreamConcurrency(t *testing.T) {
	l := newAdaptive(t, adaptive.WithInitialLimit(1))
	prio := func(ctx context.Context, method string) adaptive.Priority { return adaptive.High }
	s := startServer(t, "tcp", nil, admitgrpc.StreamServerConcurrency(l, admitgrpc.WithCallPriority(prio)))
	c := dial(t, s.addr)
	ctx, cancel := context.WithCancel(context.Background())
	w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	if l.InFlight() != 1 {
		t.Fatalf("in flight %d, want 1", l.InFlight())
	}
	w2, err := c.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = w2.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("second stream: %v, want Unavailable", err)
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for l.InFlight() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if st := l.Stats(); st.InFlight != 0 || st.Drops != 1 {
		t.Fatalf("after the stream ended: %+v; want nothing in flight and one drop (cancelled)", st)
	}
}

func TestConcurrencyMisuse(t *testing.T) {
	l := newAdaptive(t)
	for name, f := range map[string]func(){
		"nil limiter":  func() { admitgrpc.UnaryServerConcurrency(nil) },
		"nil option":   func() { admitgrpc.StreamServerConcurrency(l, nil) },
		"nil priority": func() { admitgrpc.UnaryServerConcurrency(l, admitgrpc.WithCallPriority(nil)) },
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

// A gRPC server served through its ServeHTTP behind admithttp.Concurrency
// (one limiter for a mux of HTTP and gRPC handlers) works: grpc-go's
// handler transport needs an http.Flusher, which Concurrency's writer keeps.
// There the permit's outcome is read from the HTTP status, which is 200
// for every gRPC answer: classify gRPC by its codes with the interceptors
// instead.
func TestServeHTTPBehindConcurrency(t *testing.T) {
	l := newAdaptive(t)
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	defer gs.Stop()
	srv := httptest.NewUnstartedServer(admithttp.Concurrency(l)(gs))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	cc, err := grpc.NewClient("passthrough:///"+srv.Listener.Addr().String(),
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "example.com"})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	resp, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("Check through ServeHTTP behind Concurrency: %v", err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("status %v", resp.GetStatus())
	}
	// The handler returns, and ends its permit, after the client has the
	// answer.
	for i := 0; l.InFlight() != 0 && i < 10000; i++ {
		time.Sleep(time.Millisecond)
	}
	if st := l.Stats(); st.Successes != 1 || st.Drops != 0 || st.InFlight != 0 {
		t.Fatalf("%+v, want one success", st)
	}
}
