package rls_test

import (
	"testing"

	"github.com/admit-go/admit/rls"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
)

// TestWildcardAnywhereDecides: a "*" inside a value limits the values it
// matches (envoyproxy/ratelimit's main branch since 2026-03), and with
// share_threshold they draw from one bucket.
func TestWildcardAnywhereDecides(t *testing.T) {
	svc := newService(t, "domain: d\ndescriptors:\n"+
		"  - key: path\n    value: /api/*/users\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"+
		"  - key: route\n    value: /v1*/x\n    share_threshold: true\n    rate_limit: {unit: hour, requests_per_unit: 1}\n", rls.Options{})
	require.Equal(t, pb.RateLimitResponse_OK, ask(t, svc, "d", entry("path", "/api/a/users")).OverallCode)
	require.Equal(t, pb.RateLimitResponse_OVER_LIMIT, ask(t, svc, "d", entry("path", "/api/a/users")).OverallCode)
	require.Equal(t, pb.RateLimitResponse_OK, ask(t, svc, "d", entry("path", "/api/b/users")).OverallCode, "each value its own bucket")
	require.Equal(t, pb.RateLimitResponse_OK, ask(t, svc, "d", entry("route", "/v1/a/x")).OverallCode)
	require.Equal(t, pb.RateLimitResponse_OVER_LIMIT, ask(t, svc, "d", entry("route", "/v1/b/x")).OverallCode, "shared")
}
