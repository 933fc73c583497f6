package admitgrpc_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitgrpc"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/mutexbucket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func clientOf(t *testing.T, s *server, l admit.Limiter) healthpb.HealthClient {
	t.Helper()
	return dial(t, s.addr, grpc.WithUnaryInterceptor(admitgrpc.UnaryClientInterceptor(l)),
		grpc.WithStreamInterceptor(admitgrpc.StreamClientInterceptor(l)))
}

// watch opens a Watch stream and reads its first message.
func watch(c healthpb.HealthClient, ctx context.Context) error {
	w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	_, err = w.Recv()
	return err
}

// TestClientWaitsItsTurn: with the bucket empty, a call waits on the
// limiter's clock before it is sent, and is sent once the token is due.
func TestClientWaitsItsTurn(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	l, err := mutexbucket.New(1, 1, admit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "tcp", nil, nil)
	c := clientOf(t, s, l)
	ctx := context.Background()
	for i, call := range []func() error{
		func() error { _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); return err },
		func() error { return watch(c, ctx) },
	} {
		if i == 0 {
			if err := call(); err != nil { // the burst's token
				t.Fatal(err)
			}
		}
		done := make(chan error, 1)
		go func() { done <- call() }()
		if err := clk.WaitForSleepers(ctx, 1); err != nil {
			t.Fatal(err)
		}
		before := s.handled.Load()
		clk.Advance(time.Second)
		if err := <-done; err != nil {
			t.Fatalf("call %d after its wait: %v", i, err)
		}
		if want := int64(i + 1); before != want { // the burst call, and the stream after the first wait
			t.Fatalf("call %d: %d calls reached the server while it waited; want %d", i, before, want)
		}
	}
}

func TestClientStatuses(t *testing.T) {
	s := startServer(t, "tcp", nil, nil)
	drained := func(rate float64) admit.Limiter {
		l, err := mutexbucket.New(1, rate)
		if err != nil {
			t.Fatal(err)
		}
		if !l.TryAcquire() {
			t.Fatal("a new bucket is not full")
		}
		return l
	}
	shortDeadline := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 50*time.Millisecond)
	}
	cancelSoon := func() (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(20*time.Millisecond, cancel)
		return ctx, cancel
	}
	background := func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }
	cases := []struct {
		name string
		l    admit.Limiter
		ctx  func() (context.Context, context.CancelFunc)
		want codes.Code
	}{
		{"never refills: ErrUnsatisfiable", drained(0), background, codes.ResourceExhausted},
		{"deadline before the token: ErrDeadline", drained(1), shortDeadline, codes.ResourceExhausted},
		{"cancelled while waiting", drained(0.01), cancelSoon, codes.Canceled},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := clientOf(t, s, c.l)
			before := s.handled.Load()
			for _, call := range []func(context.Context) error{
				func(ctx context.Context) error { _, err := cl.Check(ctx, &healthpb.HealthCheckRequest{}); return err },
				func(ctx context.Context) error { return watch(cl, ctx) },
			} {
				ctx, cancel := c.ctx()
				err := call(ctx)
				cancel()
				if st, _ := status.FromError(err); st.Code() != c.want {
					t.Fatalf("%v; want %v", err, c.want)
				}
			}
			if got := s.handled.Load(); got != before {
				t.Fatalf("%d calls reached the server; want none", got-before)
			}
		})
	}
}

// timeoutConfig gives the health service's methods a timeout of 100 s.
const timeoutConfig = `{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}], "timeout": "100s"}]}`

// TestClientMethodTimeout: the service config's method timeout bounds the
// wait on the limiter as a deadline of the call's own would. With the
// bucket drained and the next token 1000 s away on the limiter's clock, a
// method whose timeout is 100 s fails at once (admit.ErrDeadline:
// ResourceExhausted), never sleeps on the limiter, and sends nothing: on
// a new ClientConn, whose first call finds no service config until the
// resolver answers, and on the next call. (It used to sleep until the
// token came, then send; and after the first fix, the first call on a new
// ClientConn still did.) The limiter runs on a fake clock, so the test
// sees a wait as a sleeper on it, whatever the machine's speed.
func TestClientMethodTimeout(t *testing.T) {
	s := startServer(t, "tcp", nil, nil)
	clk := buckettest.NewFakeClock(0)
	l, err := mutexbucket.New(1, 1e-3, admit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	if !l.TryAcquire() {
		t.Fatal("a new bucket is not full")
	}
	ctx := context.Background()
	for _, kind := range []string{"unary", "stream"} {
		c := dial(t, s.addr, grpc.WithDefaultServiceConfig(timeoutConfig),
			grpc.WithUnaryInterceptor(admitgrpc.UnaryClientInterceptor(l)),
			grpc.WithStreamInterceptor(admitgrpc.StreamClientInterceptor(l)))
		call := func() error { _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); return err }
		if kind == "stream" {
			call = func() error { return watch(c, ctx) }
		}
		for _, conn := range []string{"new ClientConn", "resolved ClientConn"} {
			done := make(chan error, 1)
			go func() { done <- call() }()
			watching, stop := context.WithCancel(ctx)
			slept := make(chan error, 1)
			go func() { slept <- clk.WaitForSleepers(watching, 1) }()
			select {
			case err = <-done:
				stop()
				<-slept
			case <-slept:
				stop()
				t.Errorf("%s, %s: the call sleeps on the limiter past its method timeout", kind, conn)
				clk.Advance(1000 * time.Second) // let it go, to see what it does next
				err = <-done
			}
			if status.Code(err) != codes.ResourceExhausted {
				t.Errorf("%s, %s, the token 1000 s away, timeout 100 s: %v; want ResourceExhausted at once", kind, conn, err)
			}
		}
	}
	if got := s.handled.Load(); got != 0 {
		t.Fatalf("%d calls reached the server; want none", got)
	}
}

// TestClientRetriesOneToken: the client interceptors run once per call,
// above grpc-go's retries, so a call that grpc-go's retryPolicy attempts
// five times takes one token (the rule the package doc states).
func TestClientRetriesOneToken(t *testing.T) {
	server, err := keyed.New(1, 1e-3, admit.WithClock(buckettest.NewFakeClock(0)))
	if err != nil {
		t.Fatal(err)
	}
	addr, attempts := attemptServer(t, admitgrpc.UnaryServerInterceptor(server), nil)
	l, err := mutexbucket.New(10, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, addr, grpc.WithDefaultServiceConfig(retryConfig), grpc.WithUnaryInterceptor(admitgrpc.UnaryClientInterceptor(l)))
	if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second call: %v; want ResourceExhausted", err)
	}
	if got, tokens := attempts.Load(), l.Tokens(); got != 1+5 || tokens != 8 {
		t.Fatalf("%d attempts for %v tokens; want 6 attempts (1 + 5 retried) for 2 tokens", got, 10-tokens)
	}
}

// TestStreamClientCallOptions: the stream interceptor adds its OnFinish to
// a copy of the caller's CallOptions, never into the caller's slice. A
// caller that shares one slice with spare capacity across streams (as
// cc.NewStream(ctx, desc, method, shared...) passes it through when the
// ClientConn has no default call options) must find it untouched after a
// stream, and concurrent streams over it must not race (-race), nor one
// stream's end cancel another's context.
func TestStreamClientCallOptions(t *testing.T) {
	s := startServer(t, "tcp", nil, nil)
	l, err := mutexbucket.New(1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("passthrough:///"+s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStreamInterceptor(admitgrpc.StreamClientInterceptor(l)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	shared := make([]grpc.CallOption, 1, 8)
	shared[0] = grpc.WaitForReady(true)
	desc := &grpc.StreamDesc{StreamName: "Watch", ServerStreams: true}
	open := func() error {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		st, err := cc.NewStream(ctx, desc, healthpb.Health_Watch_FullMethodName, shared...)
		if err != nil {
			return err
		}
		if err := st.SendMsg(&healthpb.HealthCheckRequest{}); err != nil {
			return err
		}
		if err := st.CloseSend(); err != nil {
			return err
		}
		var resp healthpb.HealthCheckResponse
		return st.RecvMsg(&resp)
	}
	if err := open(); err != nil {
		t.Fatal(err)
	}
	if spare := shared[1:cap(shared)]; spare[0] != nil {
		t.Fatalf("the interceptor wrote %T into the caller's CallOption slice, past its length", spare[0])
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := open(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}
