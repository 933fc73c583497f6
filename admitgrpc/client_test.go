package admitgrpc_test

import (
	"context"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitgrpc"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/mutexbucket"
	"github.com/admit-go/admit/redisbucket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
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
	dead, err := redisbucket.New(deadRedis(t), 1, 1, redisbucket.WithTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		l    admit.Limiter
		ctx  func() (context.Context, context.CancelFunc)
		want codes.Code
	}{
		{"never refills: ErrUnsatisfiable", drained(0), background, codes.ResourceExhausted},
		{"deadline before the token: ErrDeadline", drained(1), shortDeadline, codes.ResourceExhausted},
		{"cancelled while waiting", drained(0.01), cancelSoon, codes.Canceled},
		{"backend down: ErrUnavailable", dead.Bucket("client"), background, codes.Unavailable},
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
