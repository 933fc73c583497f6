package rls_test

import (
	"context"
	"fmt"
	"time"

	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/config"
	"github.com/admit-go/admit/rls/memstore"
	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// A Service answers Envoy's ShouldRateLimit; called directly here, as the
// gRPC server (pb.RegisterRateLimitServiceServer) or HTTPHandler would call
// it. The request carries two descriptors. The per-user limit of 2 a second
// refuses the third request, 200ms after the first, and then neither
// descriptor takes a token: remote_address's bucket is left full. A reset
// is the time until the bucket is full, rounded up to whole seconds.
func ExampleService_ShouldRateLimit() {
	cfg, err := config.Load([]config.File{{Name: "example.yaml", Content: []byte(`
domain: example
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 2}
`)}}, false)
	if err != nil {
		fmt.Println(err)
		return
	}
	clk := buckettest.NewFakeClock(0)
	svc := rls.New(memstore.New(memstore.WithClock(clk)), rls.Options{})
	if err := svc.Check(cfg); err != nil {
		fmt.Println(err)
		return
	}
	svc.SetConfig(cfg)

	req := &pb.RateLimitRequest{
		Domain: "example",
		Descriptors: []*common.RateLimitDescriptor{
			{Entries: []*common.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}},
			{Entries: []*common.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}},
		},
	}
	for range 3 {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Print(resp.GetOverallCode())
		for _, st := range resp.GetStatuses() {
			fmt.Printf("  %v %d/%v remaining=%d reset=%v", st.GetCode(),
				st.GetCurrentLimit().GetRequestsPerUnit(), st.GetCurrentLimit().GetUnit(),
				st.GetLimitRemaining(), st.GetDurationUntilReset().AsDuration())
		}
		fmt.Println()
		clk.Advance(100 * time.Millisecond)
	}
	// Output:
	// OK  OK 10/SECOND remaining=9 reset=1s  OK 2/SECOND remaining=1 reset=1s
	// OK  OK 10/SECOND remaining=9 reset=1s  OK 2/SECOND remaining=0 reset=1s
	// OVER_LIMIT  OK 10/SECOND remaining=10 reset=0s  OVER_LIMIT 2/SECOND remaining=0 reset=1s
}
