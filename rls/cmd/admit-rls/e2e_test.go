package main

import (
	"context"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	ratelimit "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

const ok, over = pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT

// e2eConfig exercises every kind of rule; its limits are per minute or
// longer, so nothing refills within a test.
const e2eConfig = `
domain: e2e
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: /api/*
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: tenant
    value: acme
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 60, burst: 2}
  - key: free
    rate_limit: {unlimited: true}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: plan
    value: basic
    rate_limit: {name: basic, unit: minute, requests_per_unit: 1}
  - key: premium
    rate_limit:
      unit: minute
      requests_per_unit: 100
      replaces: [{name: basic}]
`

func codes3(resp *pb.RateLimitResponse) []pb.RateLimitResponse_Code {
	var cs []pb.RateLimitResponse_Code
	for _, s := range resp.Statuses {
		cs = append(cs, s.Code)
	}
	return cs
}

// TestLimits: a key's bucket admits requests_per_unit, then refuses, with
// its limit, what remains and the time until it is full in every status.
func TestLimits(t *testing.T) {
	p := startRLS(t, nil, map[string]string{"e2e.yaml": e2eConfig})
	for want := 2; want >= 0; want-- {
		resp := p.ask(t, "e2e", d("user", "alice"))
		require.Equal(t, ok, resp.OverallCode)
		st := resp.Statuses[0]
		require.Equal(t, ok, st.Code)
		require.Equal(t, uint32(3), st.CurrentLimit.RequestsPerUnit)
		require.Equal(t, pb.RateLimitResponse_RateLimit_MINUTE, st.CurrentLimit.Unit)
		require.Equal(t, uint32(want), st.LimitRemaining)
		reset := st.DurationUntilReset.AsDuration()
		require.True(t, reset > 0 && reset <= time.Duration(3-want)*20*time.Second, "reset %v", reset)
	}
	resp := p.ask(t, "e2e", d("user", "alice"))
	require.Equal(t, over, resp.OverallCode)
	require.Equal(t, over, resp.Statuses[0].Code)
	require.Equal(t, uint32(0), resp.Statuses[0].LimitRemaining)
	// Another value of the key has its own bucket; another domain, none.
	require.Equal(t, ok, p.ask(t, "e2e", d("user", "bob")).OverallCode)
	resp = p.ask(t, "elsewhere", d("user", "alice"))
	require.Equal(t, ok, resp.OverallCode)
	require.Nil(t, resp.Statuses[0].CurrentLimit)
}

// TestNestingAllOrNothing: a nested rule (with a burst) refuses the request,
// and the request's other descriptor keeps what it had.
func TestNestingAllOrNothing(t *testing.T) {
	p := startRLS(t, nil, map[string]string{"e2e.yaml": e2eConfig})
	for range 2 {
		resp := p.ask(t, "e2e", d("user", "carol"), d("tenant", "acme", "user", "carol"))
		require.Equal(t, ok, resp.OverallCode)
		require.Equal(t, uint32(60), resp.Statuses[1].CurrentLimit.RequestsPerUnit)
	}
	resp := p.ask(t, "e2e", d("user", "carol"), d("tenant", "acme", "user", "carol"))
	require.Equal(t, over, resp.OverallCode)
	require.Equal(t, []pb.RateLimitResponse_Code{ok, over}, codes3(resp))
	require.Equal(t, uint32(1), resp.Statuses[0].LimitRemaining, "the refused request took nothing from user=carol")
	// user=carol still has its one token.
	require.Equal(t, ok, p.ask(t, "e2e", d("user", "carol")).OverallCode)
	require.Equal(t, over, p.ask(t, "e2e", d("user", "carol")).OverallCode)
	// The nested rule applies only under tenant=acme.
	require.Nil(t, p.ask(t, "e2e", d("tenant", "other", "user", "carol")).Statuses[0].CurrentLimit)
}

// TestWildcards: a value ending in "*" matches by prefix, each value its
// own bucket, or one shared bucket with share_threshold.
func TestWildcards(t *testing.T) {
	p := startRLS(t, nil, map[string]string{"e2e.yaml": e2eConfig})
	for range 2 {
		require.Equal(t, ok, p.ask(t, "e2e", d("path", "/api/a")).OverallCode)
	}
	require.Equal(t, over, p.ask(t, "e2e", d("path", "/api/a")).OverallCode)
	require.Equal(t, ok, p.ask(t, "e2e", d("path", "/api/b")).OverallCode)
	require.Nil(t, p.ask(t, "e2e", d("path", "/web/a")).Statuses[0].CurrentLimit)

	require.Equal(t, ok, p.ask(t, "e2e", d("files", "files/a.pdf")).OverallCode)
	require.Equal(t, ok, p.ask(t, "e2e", d("files", "files/b.csv")).OverallCode)
	require.Equal(t, over, p.ask(t, "e2e", d("files", "files/c.txt")).OverallCode, "share_threshold: one bucket")
}

// TestUnlimited: never refused, never counted.
func TestUnlimited(t *testing.T) {
	p := startRLS(t, nil, map[string]string{"e2e.yaml": e2eConfig})
	for range 20 {
		resp := p.ask(t, "e2e", d("free", "x"))
		require.Equal(t, ok, resp.OverallCode)
		require.Equal(t, uint32(math.MaxUint32), resp.Statuses[0].LimitRemaining)
	}
}

// TestShadowMode: a shadow_mode rule answers OK over its limit and does not
// refuse the request; under the global SHADOW_MODE every request is OK,
// and a descriptor over its limit still says OVER_LIMIT in its status, as
// in envoyproxy/ratelimit.
func TestShadowMode(t *testing.T) {
	p := startRLS(t, nil, map[string]string{"e2e.yaml": e2eConfig})
	require.Equal(t, ok, p.ask(t, "e2e", d("shadow", "x")).OverallCode)
	resp := p.ask(t, "e2e", d("shadow", "x"), d("user", "dan"))
	require.Equal(t, ok, resp.OverallCode)
	require.Equal(t, []pb.RateLimitResponse_Code{ok, ok}, codes3(resp))
	require.Equal(t, uint32(0), resp.Statuses[0].LimitRemaining)
	require.Equal(t, uint32(2), resp.Statuses[1].LimitRemaining, "user=dan took its token")

	g := startRLS(t, []string{"SHADOW_MODE=true"}, map[string]string{"e2e.yaml": e2eConfig})
	for i := range 5 {
		resp := g.ask(t, "e2e", d("plan", "basic"))
		require.Equal(t, ok, resp.OverallCode)
		if i == 0 {
			require.Equal(t, ok, resp.Statuses[0].Code)
		} else {
			require.Equal(t, over, resp.Statuses[0].Code, "1 a minute: over its limit")
		}
	}
}

// TestReplaces: a matched rule that replaces another by name lifts it.
func TestReplaces(t *testing.T) {
	p := startRLS(t, nil, map[string]string{"e2e.yaml": e2eConfig})
	for range 3 {
		resp := p.ask(t, "e2e", d("plan", "basic"), d("premium", "u1"))
		require.Equal(t, ok, resp.OverallCode)
		require.Nil(t, resp.Statuses[0].CurrentLimit, "basic is replaced")
		require.Equal(t, uint32(100), resp.Statuses[1].CurrentLimit.RequestsPerUnit)
	}
	require.Equal(t, ok, p.ask(t, "e2e", d("plan", "basic")).OverallCode, "the replaced rule took nothing")
	require.Equal(t, over, p.ask(t, "e2e", d("plan", "basic")).OverallCode)
}

// TestHitsAddend: the request's hits_addend is the cost, a descriptor's
// overrides it, 0 checks without taking, and a cost above the burst is
// always over the limit.
func TestHitsAddend(t *testing.T) {
	p := startRLS(t, nil, map[string]string{"e2e.yaml": e2eConfig})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := p.client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "e2e", Descriptors: []*commonDescriptor{d("user", "erin")}, HitsAddend: 2})
	require.NoError(t, err)
	require.Equal(t, ok, resp.OverallCode)
	require.Equal(t, uint32(1), resp.Statuses[0].LimitRemaining)
	for range 3 {
		resp := p.ask(t, "e2e", addend(d("user", "erin"), 0))
		require.Equal(t, ok, resp.OverallCode)
		require.Equal(t, uint32(1), resp.Statuses[0].LimitRemaining)
	}
	require.Equal(t, over, p.ask(t, "e2e", addend(d("user", "erin"), 2)).OverallCode)
	require.Equal(t, ok, p.ask(t, "e2e", addend(d("user", "erin"), 1)).OverallCode)
	require.Equal(t, over, p.ask(t, "e2e", addend(d("user", "fay"), 4)).OverallCode, "4 > burst 3")
	require.Equal(t, uint32(3), p.ask(t, "e2e", addend(d("user", "fay"), 0)).Statuses[0].LimitRemaining)
}

// TestOverride: a descriptor's limit replaces the configured one.
func TestOverride(t *testing.T) {
	p := startRLS(t, nil, map[string]string{"e2e.yaml": e2eConfig})
	od := d("user", "gus")
	od.Limit = &commonOverride{RequestsPerUnit: 1, Unit: ratelimit.RateLimitUnit_MINUTE}
	resp := p.ask(t, "e2e", od)
	require.Equal(t, ok, resp.OverallCode)
	require.Equal(t, uint32(1), resp.Statuses[0].CurrentLimit.RequestsPerUnit)
	require.Equal(t, over, p.ask(t, "e2e", od).OverallCode)
	// An override applies also where no rule matches.
	od = d("nothing", "x")
	od.Limit = &commonOverride{RequestsPerUnit: 1, Unit: ratelimit.RateLimitUnit_HOUR}
	require.Equal(t, ok, p.ask(t, "e2e", od).OverallCode)
	require.Equal(t, over, p.ask(t, "e2e", od).OverallCode)
}

// TestHeaders: LIMIT_RESPONSE_HEADERS_ENABLED adds the RateLimit headers of
// the descriptor closest to its limit.
func TestHeaders(t *testing.T) {
	p := startRLS(t, []string{"LIMIT_RESPONSE_HEADERS_ENABLED=true"}, map[string]string{"e2e.yaml": e2eConfig})
	resp := p.ask(t, "e2e", d("user", "hal"), d("tenant", "acme", "user", "hal"))
	h := map[string]string{}
	for _, hv := range resp.ResponseHeadersToAdd {
		h[hv.Key] = hv.Value
	}
	require.Equal(t, map[string]string{"RateLimit-Limit": "60", "RateLimit-Remaining": "1", "RateLimit-Reset": "60"}, h)
	require.Empty(t, startRLS(t, nil, map[string]string{"e2e.yaml": e2eConfig}).ask(t, "e2e", d("user", "x")).ResponseHeadersToAdd)
}

// TestHTTP: /healthcheck and POST /json.
func TestHTTP(t *testing.T) {
	p := startRLS(t, nil, map[string]string{"e2e.yaml": e2eConfig})
	base := "http://" + p.addrs["http"]
	res, err := http.Get(base + "/healthcheck")
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "OK", string(body))

	post := func(js string) (int, *pb.RateLimitResponse) {
		res, err := http.Post(base+"/json", "application/json", strings.NewReader(js))
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusTooManyRequests {
			return res.StatusCode, nil
		}
		var r pb.RateLimitResponse
		require.NoError(t, protojson.Unmarshal(b, &r), "%s", b)
		return res.StatusCode, &r
	}
	js := `{"domain": "e2e", "descriptors": [{"entries": [{"key": "plan", "value": "basic"}]}]}`
	code, r := post(js)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, ok, r.OverallCode)
	code, r = post(js)
	require.Equal(t, http.StatusTooManyRequests, code)
	require.Equal(t, over, r.OverallCode)
	code, _ = post(`{"domain": `)
	require.Equal(t, http.StatusBadRequest, code)
	code, _ = post(`{"domain": "e2e"}`)
	require.Equal(t, http.StatusBadRequest, code)
}

// TestReload: a changed file applies without a restart; an invalid one is
// logged and the previous configuration stays; fixing it applies.
func TestReload(t *testing.T) {
	p := startRLS(t, nil, map[string]string{"e2e.yaml": e2eConfig})
	file := filepath.Join(p.configDir, "e2e.yaml")
	limitOf := func(v string) uint32 {
		st := p.ask(t, "e2e", addend(d("user", v), 0)).Statuses[0]
		if st.CurrentLimit == nil {
			return 0
		}
		return st.CurrentLimit.RequestsPerUnit
	}
	require.Equal(t, uint32(3), limitOf("x"))
	write := func(s string) {
		tmp := file + ".tmp"
		require.NoError(t, os.WriteFile(tmp, []byte(s), 0o644))
		require.NoError(t, os.Rename(tmp, file))
	}
	waitFor := func(what string, cond func() bool) {
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			require.True(t, time.Now().Before(deadline), "waiting for %s", what)
			time.Sleep(20 * time.Millisecond)
		}
	}
	write(strings.Replace(e2eConfig, "requests_per_unit: 3}", "requests_per_unit: 7}", 1))
	waitFor("the new limit", func() bool { return limitOf("x") == 7 })

	write("domain: e2e\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	waitFor("the failure's log line", func() bool { return strings.Contains(p.log(), "invalid rate limit unit 'fortnight'") })
	require.Equal(t, uint32(7), limitOf("x"), "the previous configuration stays")

	write(strings.Replace(e2eConfig, "requests_per_unit: 3}", "requests_per_unit: 9}", 1))
	waitFor("the fixed file", func() bool { return limitOf("x") == 9 })
}

// TestRefusedSettings: what admit-rls does not implement stops it at start,
// naming the setting.
func TestRefusedSettings(t *testing.T) {
	files := map[string]string{"e2e.yaml": e2eConfig}
	for _, env := range []string{"USE_STATSD=true", "BACKEND_TYPE=memcache", "CONFIG_TYPE=GRPC_XDS_SOTW", "MEMCACHE_HOST_PORT=127.0.0.1:11211"} {
		log := refuse(t, []string{env}, files)
		require.Contains(t, log, strings.SplitN(env, "=", 2)[0], env)
	}
	log := refuse(t, nil, map[string]string{"q.yaml": "domain: q\ndescriptors:\n  - key: a\n    quota_mode: true\n"})
	require.Contains(t, log, "quota_mode is not implemented")
	// USE_STATSD=false is accepted.
	p := startRLS(t, []string{"USE_STATSD=false"}, files)
	require.Equal(t, ok, p.ask(t, "e2e", d("user", "x")).OverallCode)
}

// TestInvalidRequest: an empty domain or no descriptors is InvalidArgument.
func TestInvalidRequest(t *testing.T) {
	p := startRLS(t, nil, map[string]string{"e2e.yaml": e2eConfig})
	_, err := p.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Descriptors: []*commonDescriptor{d("a", "b")}})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	_, err = p.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "e2e"})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
}
