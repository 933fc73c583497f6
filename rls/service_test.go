package rls_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/config"
	"github.com/admit-go/admit/rls/memstore"
	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
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

// TestMaxDescriptors: a request may carry MaxDescriptors descriptors,
// limited or not; one more is InvalidArgument before anything is decided
// (a million empty descriptors, 2 MiB on the wire, cost hundreds of MiB
// to decide before the bound).
func TestMaxDescriptors(t *testing.T) {
	svc := newService(t, "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5}\n", rls.Options{})
	ds := []*common.RateLimitDescriptor{entry("user", "u")}
	for len(ds) < rls.MaxDescriptors {
		ds = append(ds, &common.RateLimitDescriptor{})
	}
	resp, err := svc.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: ds})
	require.NoError(t, err)
	require.Equal(t, uint32(4), resp.Statuses[0].LimitRemaining)
	ds = append(ds, &common.RateLimitDescriptor{})
	_, err = svc.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: ds})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.Equal(t, uint32(3), ask(t, svc, "d", entry("user", "u")).Statuses[0].LimitRemaining, "the refused request took nothing")
}

// TestOverrideUnknownUnit: an override whose unit is UNKNOWN (0, the
// proto's default) names no window: the request is InvalidArgument and
// takes nothing (envoyproxy/ratelimit panics computing the window's
// length, and its service raises the panic again: the process ends).
func TestOverrideUnknownUnit(t *testing.T) {
	svc := newService(t, "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5}\n", rls.Options{})
	bad := entry("team", "t")
	bad.Limit = &common.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: typev3.RateLimitUnit_UNKNOWN}
	_, err := svc.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: []*common.RateLimitDescriptor{entry("user", "u"), bad}})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.Equal(t, uint32(4), ask(t, svc, "d", entry("user", "u")).Statuses[0].LimitRemaining, "the refused request took nothing")
}

// TestResetWholeSeconds: duration_until_reset is the time until the bucket
// is full rounded up to whole seconds, as the RateLimit-Reset header is:
// Envoy's x-ratelimit-reset takes the duration's whole seconds, and a
// refusal 0.8 s from full answered as 800ms told the client 0, come back
// at once (envoyproxy/ratelimit, counting to its window's end, answers
// 1 at least).
func TestResetWholeSeconds(t *testing.T) {
	cfg, err := config.Load([]config.File{{Name: "c.yaml", Content: []byte(
		"domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 2}\n" +
			"  - key: team\n    rate_limit: {unit: minute, requests_per_unit: 3}\n")}}, false)
	require.NoError(t, err)
	clk := buckettest.NewFakeClock(0)
	svc := rls.New(memstore.New(memstore.WithClock(clk)), rls.Options{Headers: true})
	require.NoError(t, svc.Check(cfg))
	svc.SetConfig(cfg)
	for _, step := range []struct {
		advance time.Duration
		desc    *common.RateLimitDescriptor
		code    pb.RateLimitResponse_Code
		reset   time.Duration // until full: 0.5 s, 0.9 s, 0.8 s, 20 s, 39.5 s
	}{
		{0, entry("user", "u"), pb.RateLimitResponse_OK, time.Second},
		{100 * time.Millisecond, entry("user", "u"), pb.RateLimitResponse_OK, time.Second},
		{100 * time.Millisecond, entry("user", "u"), pb.RateLimitResponse_OVER_LIMIT, time.Second},
		{0, entry("team", "t"), pb.RateLimitResponse_OK, 20 * time.Second},
		{500 * time.Millisecond, entry("team", "t"), pb.RateLimitResponse_OK, 40 * time.Second},
	} {
		clk.Advance(step.advance)
		resp := ask(t, svc, "d", step.desc)
		require.Equal(t, step.code, resp.OverallCode)
		require.Equal(t, step.reset, resp.Statuses[0].DurationUntilReset.AsDuration())
		hd := map[string]string{}
		for _, h := range resp.ResponseHeadersToAdd {
			hd[h.Key] = h.Value
		}
		require.Equal(t, fmt.Sprint(int(step.reset.Seconds())), hd["RateLimit-Reset"])
	}
}

// newService returns a Service on a memory store with yaml as its
// configuration (one file).
func newService(t *testing.T, yaml string, opts rls.Options) *rls.Service {
	t.Helper()
	cfg, err := config.Load([]config.File{{Name: "c.yaml", Content: []byte(yaml)}}, false)
	require.NoError(t, err)
	svc := rls.New(memstore.New(), opts)
	require.NoError(t, svc.Check(cfg))
	svc.SetConfig(cfg)
	return svc
}

func entry(k, v string) *common.RateLimitDescriptor {
	return &common.RateLimitDescriptor{Entries: []*common.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
}

func ask(t *testing.T, svc *rls.Service, domain string, ds ...*common.RateLimitDescriptor) *pb.RateLimitResponse {
	t.Helper()
	resp, err := svc.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: domain, Descriptors: ds})
	require.NoError(t, err)
	return resp
}

// TestOverLimitAnswers: a descriptor over its limit answers
// limit_remaining 0 (its bucket may hold tokens, fewer than its cost), in
// shadow mode too, as envoyproxy/ratelimit does, so the RateLimit-Remaining
// of a refusal is 0; the headers describe the last descriptor over its
// limit. Under the global shadow mode a descriptor over its limit still
// answers OVER_LIMIT, and the request OK.
func TestOverLimitAnswers(t *testing.T) {
	const yaml = "domain: d\ndescriptors:\n" +
		"  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5}\n" +
		"  - key: team\n    rate_limit: {unit: hour, requests_per_unit: 9}\n" +
		"  - key: shadow\n    shadow_mode: true\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"
	svc := newService(t, yaml, rls.Options{Headers: true})
	cost := func(ds *common.RateLimitDescriptor, n uint64) *common.RateLimitDescriptor {
		ds.HitsAddend = wrapperspb.UInt64(n)
		return ds
	}
	resp := ask(t, svc, "d", cost(entry("user", "u"), 7), cost(entry("team", "t"), 10), cost(entry("shadow", "s"), 7))
	require.Equal(t, pb.RateLimitResponse_OVER_LIMIT, resp.OverallCode)
	require.Equal(t, []pb.RateLimitResponse_Code{pb.RateLimitResponse_OVER_LIMIT, pb.RateLimitResponse_OVER_LIMIT, pb.RateLimitResponse_OK},
		[]pb.RateLimitResponse_Code{resp.Statuses[0].Code, resp.Statuses[1].Code, resp.Statuses[2].Code})
	for i, st := range resp.Statuses {
		require.Zero(t, st.LimitRemaining, "status %d: over its limit (shadowed or not), nothing left for its cost", i)
	}
	require.Equal(t, "9", resp.ResponseHeadersToAdd[0].Value, "the headers describe the last descriptor over its limit")
	require.Equal(t, "0", resp.ResponseHeadersToAdd[1].Value)
	resp = ask(t, svc, "d", entry("user", "u"), entry("team", "t"))
	require.Equal(t, uint32(4), resp.Statuses[0].LimitRemaining, "the refused request took nothing")
	require.Equal(t, "4", resp.ResponseHeadersToAdd[1].Value, "the first with the fewest remaining")

	g := newService(t, yaml, rls.Options{ShadowMode: true})
	resp = ask(t, g, "d", cost(entry("user", "u"), 7), entry("team", "t"))
	require.Equal(t, pb.RateLimitResponse_OK, resp.OverallCode)
	require.Equal(t, pb.RateLimitResponse_OVER_LIMIT, resp.Statuses[0].Code)
	require.Zero(t, resp.Statuses[0].LimitRemaining)
	require.Equal(t, pb.RateLimitResponse_OK, resp.Statuses[1].Code)
	require.Equal(t, uint32(8), resp.Statuses[1].LimitRemaining, "the global shadow mode admits, and takes")
}

// TestOverrideKeepsDebt: an override on a descriptor whose rule has
// debt: true shares the rule's bucket and keeps its debt; a usage report
// carrying the override is charged as the rule's are. (An override of the
// rule's own numbers used to forgive the whole debt.)
func TestOverrideKeepsDebt(t *testing.T) {
	svc := newService(t, "domain: llm\ndescriptors:\n  - key: team\n    rate_limit: {unit: hour, requests_per_unit: 1000, debt: true}\n", rls.Options{})
	name := "a"
	team := func(n uint64, override *common.RateLimitDescriptor_RateLimitOverride) *common.RateLimitDescriptor {
		ds := entry("team", name)
		ds.HitsAddend = wrapperspb.UInt64(n)
		ds.Limit = override
		return ds
	}
	same := &common.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1000, Unit: typev3.RateLimitUnit_HOUR}
	higher := &common.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2000, Unit: typev3.RateLimitUnit_HOUR}
	require.Equal(t, pb.RateLimitResponse_OVER_LIMIT, ask(t, svc, "llm", team(3000, nil)).OverallCode, "a report of 3000 on 1000: balance -1000")
	for _, o := range []*common.RateLimitDescriptor_RateLimitOverride{same, higher, nil} {
		resp := ask(t, svc, "llm", team(0, o))
		require.Equal(t, pb.RateLimitResponse_OVER_LIMIT, resp.OverallCode, "override %v: the debt stays", o)
	}
	// A report under an override is charged too: a fresh team, 1500 under
	// the override of 2000, then 1000 more.
	name = "b"
	require.Equal(t, pb.RateLimitResponse_OK, ask(t, svc, "llm", team(1500, higher)).OverallCode)
	require.Equal(t, pb.RateLimitResponse_OVER_LIMIT, ask(t, svc, "llm", team(1000, higher)).OverallCode, "1000 on a balance of 500")
	resp := ask(t, svc, "llm", team(0, higher))
	require.Equal(t, pb.RateLimitResponse_OVER_LIMIT, resp.OverallCode, "the report was charged: in debt")
}

// TestZeroLimitReset: a rule of requests_per_unit: 0 refuses every request
// and has no bucket to fill. It answered no duration_until_reset and a
// RateLimit-Reset of 0, which tells a client to retry at once, for ever;
// envoyproxy/ratelimit answers the end of the rule's unit window. It now
// answers one unit.
func TestZeroLimitReset(t *testing.T) {
	svc := newService(t, "domain: d\ndescriptors:\n  - key: zero\n    rate_limit: {unit: hour, requests_per_unit: 0}\n", rls.Options{Headers: true})
	resp := ask(t, svc, "d", &common.RateLimitDescriptor{Entries: []*common.RateLimitDescriptor_Entry{{Key: "zero", Value: "a"}}})
	require.Equal(t, pb.RateLimitResponse_OVER_LIMIT, resp.OverallCode)
	require.NotNil(t, resp.Statuses[0].DurationUntilReset)
	require.Equal(t, time.Hour, resp.Statuses[0].DurationUntilReset.AsDuration())
	hd := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		hd[h.Key] = h.Value
	}
	require.Equal(t, "3600", hd["RateLimit-Reset"], "%v", hd)
}
