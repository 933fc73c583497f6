package admitgrpc_test

import (
	"context"
	"fmt"
	"net"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitgrpc"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func ExampleUnaryServerInterceptor() {
	// Each client: a burst of 2, then 1 call per second. (A stopped fake
	// clock keeps the output fixed; drop the option in real code.)
	l, err := keyed.New(2, 1, admit.WithClock(buckettest.NewFakeClock(0)))
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(admitgrpc.UnaryServerInterceptor(l, admitgrpc.WithPolicyName("api"))),
		grpc.ChainStreamInterceptor(admitgrpc.StreamServerInterceptor(l, admitgrpc.WithPolicyName("api"))),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()

	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer cc.Close()
	client := healthpb.NewHealthClient(cc)
	for range 3 {
		// An admitted call carries the fields in its header metadata; a
		// refused one, trailers-only, in its trailer.
		var hd, tr metadata.MD
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&hd), grpc.Trailer(&tr))
		if err != nil {
			hd = tr
		}
		st := status.Convert(err)
		fmt.Println(st.Code())
		fmt.Println("  ratelimit-policy:", hd.Get("ratelimit-policy"))
		fmt.Println("  ratelimit:", hd.Get("ratelimit"))
		if ra := hd.Get("retry-after"); len(ra) > 0 {
			fmt.Println("  retry-after:", ra)
		}
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				fmt.Println("  RetryInfo:", ri.RetryDelay.AsDuration())
			}
		}
	}
	// Output:
	// OK
	//   ratelimit-policy: ["api";q=2;w=2]
	//   ratelimit: ["api";r=1;t=1]
	// OK
	//   ratelimit-policy: ["api";q=2;w=2]
	//   ratelimit: ["api";r=0;t=2]
	// ResourceExhausted
	//   ratelimit-policy: ["api";q=2;w=2]
	//   ratelimit: ["api";r=0;t=2]
	//   retry-after: [1]
	//   RetryInfo: 1s
}
