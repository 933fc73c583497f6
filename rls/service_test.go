package rls_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/config"
	"github.com/admit-go/admit/rls/memstore"
	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestMaxLimited: descriptors no limit applies to are not counted against
// the cap; more than MaxLimited limited ones are InvalidArgument, and take
// nothing.
func TestMaxLimited(t *testing.T) {
	cfg, err := config.Load([]config.File{{Name: "c.yaml", Content: []byte(
		"domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")}}, false)
	require.NoError(t, err)
	svc := rls.New(memstore.New(), rls.Options{})
	svc.SetConfig(cfg)
	desc := func(k, v string) *common.RateLimitDescriptor {
		return &common.RateLimitDescriptor{Entries: []*common.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
	}
	var ds []*common.RateLimitDescriptor
	for i := range 1000 {
		ds = append(ds, desc("other", fmt.Sprint(i)))
	}
	for i := range rls.MaxLimited {
		ds = append(ds, desc("user", fmt.Sprint(i)))
	}
	resp, err := svc.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: ds})
	require.NoError(t, err)
	require.Equal(t, pb.RateLimitResponse_OK, resp.OverallCode)
	require.Equal(t, uint32(4), resp.Statuses[1000].LimitRemaining)

	ds = append(ds, desc("user", "one more"))
	_, err = svc.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: ds})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	resp, err = svc.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: ds[1000:1001]})
	require.NoError(t, err)
	require.Equal(t, uint32(3), resp.Statuses[0].LimitRemaining, "the refused request took nothing")
}
