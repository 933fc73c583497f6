package rls_test

import (
	"testing"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/admit-go/admit/rls"
)

// TestOverridePeekRefills: a rule of 10 an hour (burst 10) on
// user=u. Each request carries the descriptor twice: as is, hits_addend 4,
// and with a limit override of 5 an hour and hits_addend 0. The second
// hit's carry clamps what the first left to full under 5; that full was
// taken for a full bucket (dropped, or kept as the bucket before the
// take), and the take of 4 was lost every time: 81 tokens in an instant.
func TestOverridePeekRefills(t *testing.T) {
	svc := newService(t, "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 10}\n", rls.Options{})
	d := func(n uint64, o *common.RateLimitDescriptor_RateLimitOverride) *common.RateLimitDescriptor {
		e := entry("user", "u")
		e.HitsAddend, e.Limit = wrapperspb.UInt64(n), o
		return e
	}
	five := &common.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_HOUR}
	ask(t, svc, "d", d(1, nil))
	admitted := 1
	for range 20 {
		if ask(t, svc, "d", d(4, nil), d(0, five)).OverallCode == pb.RateLimitResponse_OK {
			admitted += 4
		}
	}
	if admitted > 10 {
		t.Errorf("user=u under 10 an hour admitted %d tokens in one instant", admitted)
	}
}
