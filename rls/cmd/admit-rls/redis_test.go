package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/admit-go/admit/redisbucket/redistest"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// replicas checks that two admit-rls processes on one store share their
// buckets, and that a refused request takes from none of its descriptors.
func replicas(t *testing.T, env []string) {
	files := map[string]string{"e2e.yaml": e2eConfig}
	a, b := startRLS(t, env, files), startRLS(t, env, files)
	require.Equal(t, ok, a.ask(t, "e2e", d("user", "ann")).OverallCode)
	require.Equal(t, ok, b.ask(t, "e2e", d("user", "ann")).OverallCode)
	resp := a.ask(t, "e2e", d("user", "ann"))
	require.Equal(t, ok, resp.OverallCode)
	require.Equal(t, uint32(0), resp.Statuses[0].LimitRemaining)
	require.Equal(t, over, b.ask(t, "e2e", d("user", "ann")).OverallCode)

	for range 2 {
		require.Equal(t, ok, a.ask(t, "e2e", d("user", "bo"), d("tenant", "acme", "user", "bo")).OverallCode)
	}
	resp = b.ask(t, "e2e", d("user", "bo"), d("tenant", "acme", "user", "bo"))
	require.Equal(t, over, resp.OverallCode)
	require.Equal(t, []pb.RateLimitResponse_Code{ok, over}, codes3(resp))
	require.Equal(t, uint32(1), a.ask(t, "e2e", addend(d("user", "bo"), 0)).Statuses[0].LimitRemaining,
		"the refused request took nothing from user=bo")
	require.Equal(t, ok, a.ask(t, "e2e", d("user", "bo")).OverallCode)
	require.Equal(t, over, b.ask(t, "e2e", d("user", "bo")).OverallCode)
}

func TestRedisSingle(t *testing.T) {
	s := redistest.New(t)
	replicas(t, []string{"BACKEND_TYPE=redis", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + s.Addr})
}

func TestRedisCluster(t *testing.T) {
	t.Parallel() // forming a Cluster is mostly waiting
	cl := redistest.NewCluster(t)
	replicas(t, []string{"BACKEND_TYPE=redis", "REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=CLUSTER",
		"REDIS_URL=" + strings.Join(cl.Addrs(), ",")})
}

// TestRedisDown: with Redis gone, a request fails with Unavailable within
// REDIS_TIMEOUT (Envoy's failure_mode_deny then decides), or is admitted
// with REDIS_FAILURE_MODE_ALLOW.
func TestRedisDown(t *testing.T) {
	s := redistest.New(t)
	env := []string{"BACKEND_TYPE=redis", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + s.Addr, "REDIS_TIMEOUT=5s"} // Redis killed: refused at once
	files := map[string]string{"e2e.yaml": e2eConfig}
	deny := startRLS(t, append(env, "USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:0"), files)
	allow := startRLS(t, append(env, "REDIS_FAILURE_MODE_ALLOW=true"), files)
	require.Equal(t, ok, deny.ask(t, "e2e", d("user", "cy")).OverallCode)
	s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := deny.client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "e2e", Descriptors: []*commonDescriptor{d("user", "cy")}})
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	for range 5 {
		require.Equal(t, ok, allow.ask(t, "e2e", d("user", "cy")).OverallCode)
	}
	// Unlimited and unmatched descriptors do not need Redis.
	require.Equal(t, ok, deny.ask(t, "e2e", d("free", "x")).OverallCode)
	res, err := http.Get("http://" + deny.addrs["prometheus"] + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Contains(t, string(body), `admit_rls_backend_errors_total{domain="e2e"} 1`)
	// admitotel's: the failed request is an error, and Redis's (Unavailable)
	// a backend error; the two that Redis answered or did not need, allowed.
	require.Contains(t, string(body), `admit_decisions_total{admit_limiter="e2e",admit_result="error"} 1`+"\n")
	require.Contains(t, string(body), `admit_decisions_total{admit_limiter="e2e",admit_result="allowed"} 2`+"\n")
	require.Contains(t, string(body), `admit_backend_errors_total{admit_limiter="e2e"} 1`+"\n")
}

// TestRedisUnrepresentable: a rule Redis's integers cannot hold is refused
// when loaded, at start and on reload, rather than failing its requests.
func TestRedisUnrepresentable(t *testing.T) {
	s := redistest.New(t)
	env := []string{"BACKEND_TYPE=redis", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + s.Addr}
	huge := "domain: h\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 1, burst: 2000000000}\n"
	log := refuse(t, env, map[string]string{"h.yaml": huge})
	require.Contains(t, log, "rule h.k")
	require.Contains(t, log, "does not fit")

	p := startRLS(t, env, map[string]string{"e2e.yaml": e2eConfig})
	require.NoError(t, os.WriteFile(filepath.Join(p.configDir, "h.yaml"), []byte(huge), 0o644))
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(p.log(), "does not fit") {
		require.True(t, time.Now().Before(deadline), "waiting for the refusal")
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, ok, p.ask(t, "e2e", d("user", "x")).OverallCode)
	require.Nil(t, p.ask(t, "h", d("k", "x")).Statuses[0].CurrentLimit, "the refused file did not apply")
}

// TestRedisUnixSocket: REDIS_SOCKET_TYPE=unix (envoyproxy/ratelimit's
// default) with REDIS_URL a socket path.
func TestRedisUnixSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "redis.sock")
	redistest.New(t, "--unixsocket", sock, "--unixsocketperm", "700")
	p := startRLS(t, []string{"BACKEND_TYPE=redis", "REDIS_SOCKET_TYPE=unix", "REDIS_URL=" + sock}, map[string]string{"e2e.yaml": e2eConfig})
	require.Equal(t, ok, p.ask(t, "e2e", d("plan", "basic")).OverallCode)
	require.Equal(t, over, p.ask(t, "e2e", d("plan", "basic")).OverallCode)
}
