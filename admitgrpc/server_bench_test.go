package admitgrpc_test

import (
	"context"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitgrpc"
	"github.com/admit-go/admit/keyed"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// BenchmarkUnaryCall is one admitted unary call, client and server, over
// a real loopback connection: under one limit, and under two chosen by
// WithLimits. allocs/op counts both ends' allocations, grpc-go's included;
// the difference between the cases is the interceptor's.
func BenchmarkUnaryCall(b *testing.B) {
	two := []admit.Limit{
		admit.Per(time.Second, 1e9).WithBurst(1 << 40).Named("burst"),
		admit.Per(24*time.Hour, 1<<45).Named("daily"),
	}
	for _, c := range []struct {
		name string
		opts []admitgrpc.Option
	}{
		{"limits=one", nil},
		{"limits=two", []admitgrpc.Option{admitgrpc.WithLimits(func(context.Context, string) ([]admit.Limit, error) { return two, nil })}},
	} {
		b.Run(c.name, func(b *testing.B) {
			l, err := keyed.New(1<<40, 1e9)
			if err != nil {
				b.Fatal(err)
			}
			s := startServer(b, "tcp", admitgrpc.UnaryServerInterceptor(l, c.opts...), nil)
			cl := dial(b, s.addr)
			ctx := context.Background()
			req := &healthpb.HealthCheckRequest{}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := cl.Check(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
