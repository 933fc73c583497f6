package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/admit-go/admit/redisbucket/redistest"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// lines returns the log lines that contain s.
func (p *proc) lines(s string) []string {
	var out []string
	for _, l := range strings.Split(p.log(), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// waitLog waits until the log holds s (an outage's end comes 10 s after
// its last failure).
func (p *proc) waitLog(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(40 * time.Second)
	for !strings.Contains(p.log(), s) {
		require.True(t, time.Now().Before(deadline), "waiting for %q in the log:\n%s", s, p.log())
		time.Sleep(20 * time.Millisecond)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestLogFormatJSON: LOG_FORMAT=json writes every line as JSON, from the
// first; a start-up error comes in the same format as the rest, whichever
// it is.
func TestLogFormatJSON(t *testing.T) {
	p := startRLS(t, []string{"LOG_FORMAT=json", "REDIS_POOL_SIZE=5", "BACKEND_TYPE=memory"}, map[string]string{"e2e.yaml": e2eConfig})
	require.Equal(t, ok, p.ask(t, "e2e", d("user", "j")).OverallCode)
	for _, l := range strings.Split(strings.TrimSpace(p.log()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), "not JSON: %s", l)
		for _, k := range []string{"level", "@timestamp", "@message"} { // envoyproxy/ratelimit's keys
			require.Contains(t, m, k, l)
		}
	}
	require.Len(t, p.lines(`"note":"REDIS_POOL_SIZE has no effect in admit-rls`), 1)

	for _, format := range []string{"json", "text"} {
		log := refuse(t, []string{"LOG_FORMAT=" + format, "USE_STATSD=true", "QUOTA_MODE=true"}, map[string]string{"e2e.yaml": e2eConfig})
		_, out, _ := strings.Cut(log, "): ") // launch's prefix, then stderr
		out = strings.TrimSpace(out)
		require.NotEmpty(t, out)
		for _, l := range strings.Split(out, "\n") {
			if format == "json" {
				var m map[string]any
				require.NoError(t, json.Unmarshal([]byte(l), &m), "not JSON: %s", l)
			} else {
				require.True(t, strings.HasPrefix(l, "time="), "not slog's text format: %s", l)
			}
		}
		require.Contains(t, out, "USE_STATSD")
		require.Contains(t, out, "QUOTA_MODE", "every refused setting in the one error")
	}
	// A LOG_LEVEL that is no level stops the start, as it stops
	// envoyproxy/ratelimit.
	require.Contains(t, refuse(t, []string{"LOG_LEVEL=verbose"}, map[string]string{"e2e.yaml": e2eConfig}), `LOG_LEVEL=\"VERBOSE\"`)
}

// TestDebugListener: DEBUG_HOST:DEBUG_PORT serves envoyproxy/ratelimit's
// debug endpoints: /rlconfig, the rules in force, /stats, the Go profiles,
// and their list.
func TestDebugListener(t *testing.T) {
	p := startRLS(t, nil, map[string]string{"e2e.yaml": e2eConfig})
	code, body := get(t, "http://"+p.addrs["debug"]+"/rlconfig")
	require.Equal(t, http.StatusOK, code)
	// As envoyproxy/ratelimit prints them, the burst extension after.
	require.Contains(t, body, "e2e.user: unit=MINUTE requests_per_unit=3, shadow_mode: false, quota_mode: false\n")
	require.Contains(t, body, "e2e.free: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n")
	require.Contains(t, body, "e2e.tenant_acme.user: unit=HOUR requests_per_unit=60, shadow_mode: false, quota_mode: false, burst: 2\n")
	code, _ = get(t, "http://"+p.addrs["debug"]+"/debug/pprof/goroutine?debug=1")
	require.Equal(t, http.StatusOK, code)
	code, body = get(t, "http://"+p.addrs["debug"]+"/stats")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "\nmemstats: {")
	// Any other path lists the endpoints, as envoyproxy/ratelimit's does.
	for _, path := range []string{"/", "/nothing"} {
		code, body = get(t, "http://"+p.addrs["debug"]+path)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "/debug/pprof/: root of various pprof endpoints. hit for help.\n"+
			"/debug/pprof/profile: CPU profiling endpoint\n"+
			"/debug/pprof/trace: trace endpoint\n"+
			"/rlconfig: print out the currently loaded configuration for debugging\n"+
			"/stats: print out stats\n", body)
	}
}

// TestSIGHUP: SIGHUP stops admit-rls gracefully with status 0, as it
// stops envoyproxy/ratelimit (which shuts down on SIGINT, SIGTERM and
// SIGHUP alike), rather than killing it with its calls in flight.
func TestSIGHUP(t *testing.T) {
	p := startRLS(t, nil, map[string]string{"e2e.yaml": e2eConfig})
	require.Equal(t, ok, p.ask(t, "e2e", d("user", "x")).OverallCode)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	<-p.done
	require.NoError(t, p.cmd.Wait())
}

// TestMaxConnectionAge: GRPC_MAX_CONNECTION_AGE sends clients GOAWAY, so
// that they spread over new replicas: a client that keeps asking dials
// again, and its calls go on.
func TestMaxConnectionAge(t *testing.T) {
	p := startRLS(t, []string{"GRPC_MAX_CONNECTION_AGE=300ms", "GRPC_MAX_CONNECTION_AGE_GRACE=100ms"}, map[string]string{"e2e.yaml": e2eConfig})
	var dials atomic.Int64
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
	conn, err := grpc.NewClient(p.addrs["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dialer))
	require.NoError(t, err)
	defer conn.Close()
	client := pb.NewRateLimitServiceClient(conn)
	deadline := time.Now().Add(30 * time.Second)
	for dials.Load() < 2 {
		require.True(t, time.Now().Before(deadline), "the server never closed the connection")
		_, err = client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "e2e", Descriptors: []*commonDescriptor{d("free", "age")}})
		require.NoError(t, err)
		time.Sleep(50 * time.Millisecond)
	}
}

// health returns a process's /healthcheck status and its gRPC health
// service's status for "ratelimit".
func (p *proc) health(t *testing.T) (int, healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	code, _ := get(t, "http://"+p.addrs["http"]+"/healthcheck")
	conn, err := grpc.NewClient(p.addrs["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	res, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
	require.NoError(t, err)
	return code, res.Status
}

// waitHealth waits until both health checks answer as healthy says.
func (p *proc) waitHealth(t *testing.T, healthy bool) {
	t.Helper()
	wantCode, wantStatus := http.StatusOK, healthpb.HealthCheckResponse_SERVING
	if !healthy {
		wantCode, wantStatus = http.StatusInternalServerError, healthpb.HealthCheckResponse_NOT_SERVING
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, st := p.health(t)
		if code == wantCode && st == wantStatus {
			return
		}
		require.True(t, time.Now().Before(deadline), "health %d %v, waiting for %d %v:\n%s", code, st, wantCode, wantStatus, p.log())
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRedisOutage: an outage is logged once when it starts, not once per
// failed request, and its end is logged once no call has failed for a
// while (the probe sees it with no traffic); with
// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION the health checks fail once no
// connection to Redis is open (HTTP 500, gRPC NOT_SERVING), so that a load
// balancer stops sending traffic there, and recover when one opens again,
// as envoyproxy/ratelimit's do; without it they stay healthy.
func TestRedisOutage(t *testing.T) {
	t.Parallel() // most of it waits for the outage's quiet interval
	s := redistest.New(t)
	env := []string{"BACKEND_TYPE=redis", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + s.Addr, "REDIS_TIMEOUT=5s"}
	files := map[string]string{"e2e.yaml": e2eConfig}
	checked := startRLS(t, append(env, "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true"), files)
	plain := startRLS(t, env, files)
	for _, p := range []*proc{checked, plain} {
		p.waitHealth(t, true)
	}

	s.Stop()
	for range 20 {
		for _, p := range []*proc{checked, plain} {
			_, err := p.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "e2e", Descriptors: []*commonDescriptor{d("user", "out")}})
			require.Error(t, err)
		}
	}
	for _, p := range []*proc{checked, plain} {
		p.waitLog(t, "backend unavailable")
		require.Len(t, p.lines("backend unavailable"), 1, "one line for the outage's start, not one per request:\n%s", p.log())
	}
	checked.waitHealth(t, false)
	code, st := plain.health(t)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, st)

	// No traffic while it comes back (the load balancer has left): the
	// probe's connection makes it healthy, and ends the outage.
	require.NoError(t, s.Restart())
	checked.waitHealth(t, true)
	require.Equal(t, ok, checked.ask(t, "e2e", d("user", "back")).OverallCode)
	for _, p := range []*proc{checked, plain} {
		p.waitLog(t, "backend recovered")
		require.Len(t, p.lines("backend unavailable"), 1, p.log())
	}
}

// TestPartialOutage: a Cluster with one master down fails the requests
// whose keys live there and answers the others. That is one outage,
// logged once when it starts (not once per alternation of failure and
// success), and the health checks stay healthy, as envoyproxy/ratelimit's
// do: the connections to the other masters stay open.
func TestPartialOutage(t *testing.T) {
	t.Parallel() // forming a Cluster is mostly waiting
	cl := redistest.NewCluster(t)
	p := startRLS(t, []string{"BACKEND_TYPE=redis", "REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=CLUSTER", "REDIS_TIMEOUT=5s",
		"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true", "REDIS_URL=" + strings.Join(cl.Addrs(), ",")}, map[string]string{"e2e.yaml": e2eConfig})
	require.Equal(t, ok, p.ask(t, "e2e", d("user", "x")).OverallCode)
	// Every status the gRPC health service reports from now on.
	conn, err := grpc.NewClient(p.addrs["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	wctx, stop := context.WithCancel(context.Background())
	watch, err := healthpb.NewHealthClient(conn).Watch(wctx, &healthpb.HealthCheckRequest{Service: "ratelimit"})
	require.NoError(t, err)
	first, err := watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, first.Status)
	seen := make(chan []healthpb.HealthCheckResponse_ServingStatus, 1)
	go func() {
		var sts []healthpb.HealthCheckResponse_ServingStatus
		for {
			res, err := watch.Recv()
			if err != nil {
				seen <- sts
				return
			}
			sts = append(sts, res.Status)
		}
	}()

	cl.Nodes[0].Stop()
	failed := 0
	for i := range 60 {
		_, err := p.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "e2e", Descriptors: []*commonDescriptor{d("user", fmt.Sprint("u", i))}})
		if err != nil {
			failed++
		}
	}
	require.True(t, failed > 0 && failed < 60, "the keys of one master in three fail: %d of 60", failed)
	time.Sleep(2 * probeEvery) // the probe's calls too
	require.Len(t, p.lines("backend unavailable"), 1, p.log())
	require.Empty(t, p.lines("backend recovered"), p.log())
	code, st := p.health(t)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, st)
	stop()
	require.Empty(t, <-seen, "the health service changed its status during a partial outage")
}

// TestRedisStartupRetry: Redis not answering at start is retried with
// backoff (REDIS_STARTUP_*), as envoyproxy/ratelimit retries it: admit-rls
// starts once Redis answers, or gives up after
// REDIS_STARTUP_MAX_ELAPSED_TIME.
func TestRedisStartupRetry(t *testing.T) {
	s := redistest.New(t)
	s.Stop()
	// Until admit-rls has tried twice, something on Redis's port that
	// hangs up on every connection; then Redis itself.
	ln, err := net.Listen("tcp", s.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	var tries atomic.Int64
	restarted := make(chan error, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			if tries.Add(1) == 2 {
				ln.Close()
				restarted <- s.Restart()
				return
			}
		}
	}()
	env := []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + s.Addr, "REDIS_STARTUP_INITIAL_INTERVAL=50ms", "REDIS_STARTUP_MAX_INTERVAL=100ms"}
	p := startRLS(t, env, map[string]string{"e2e.yaml": e2eConfig})
	select {
	case err := <-restarted:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("admit-rls started without trying Redis twice (%d tries):\n%s", tries.Load(), p.log())
	}
	require.NotEmpty(t, p.lines("retrying"))
	require.Equal(t, ok, p.ask(t, "e2e", d("user", "retry")).OverallCode)

	s.Stop()
	log := refuse(t, append(env, "REDIS_STARTUP_MAX_ELAPSED_TIME=300ms"), map[string]string{"e2e.yaml": e2eConfig})
	require.Contains(t, log, "retrying")
	require.Contains(t, log, "admit-rls stopped")
	require.Contains(t, log, "redis at "+s.Addr)
}

// TestCacheKeyPrefix: CACHE_KEY_PREFIX starts every Redis key.
func TestCacheKeyPrefix(t *testing.T) {
	s := redistest.New(t)
	p := startRLS(t, []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + s.Addr, "CACHE_KEY_PREFIX=team_"}, map[string]string{"e2e.yaml": e2eConfig})
	require.Equal(t, ok, p.ask(t, "e2e", d("user", "pre")).OverallCode)
	keys, err := redisClient(t, s.Addr, "", 0).Keys(context.Background(), "*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.True(t, strings.HasPrefix(keys[0], "team_admit-rls:"), keys[0])
}

// TestRedisTLS: a rediss:// URL (or REDIS_TLS) with REDIS_TLS_CACERT, on a
// redis-server that speaks only TLS on that port; with another CA the
// connection is refused.
func TestRedisTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCert(t, dir, "ca", nil, nil)
	newCert(t, dir, "server", ca, caKey)
	newCert(t, dir, "other", nil, nil)
	addr, err := redistest.FreeAddr()
	require.NoError(t, err)
	_, tlsPort, _ := net.SplitHostPort(addr)
	redistest.New(t, "--tls-port", tlsPort, "--tls-cert-file", filepath.Join(dir, "server.pem"),
		"--tls-key-file", filepath.Join(dir, "server.key"), "--tls-ca-cert-file", filepath.Join(dir, "ca.pem"),
		"--tls-auth-clients", "no")
	files := map[string]string{"e2e.yaml": e2eConfig}
	p := startRLS(t, []string{"REDIS_URL=rediss://127.0.0.1:" + tlsPort, "REDIS_TLS_CACERT=" + filepath.Join(dir, "ca.pem")}, files)
	require.Equal(t, ok, p.ask(t, "e2e", d("user", "tls")).OverallCode)
	require.Contains(t, p.log(), "tls=true")

	log := refuse(t, []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=127.0.0.1:" + tlsPort, "REDIS_TLS=true",
		"REDIS_TLS_CACERT=" + filepath.Join(dir, "other.pem"), "REDIS_STARTUP_MAX_ELAPSED_TIME=200ms"}, files)
	require.Contains(t, log, "certificate")
}

// newCert writes name.pem and name.key into dir: a CA when parent is nil,
// else a certificate for 127.0.0.1 that parent signs.
func newCert(t *testing.T, dir, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
	}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage = x509.KeyUsageCertSign
		parent, parentKey = tmpl, key
	} else {
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	kb, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600))
	return cert, key
}

// TestStartupErrorsNameTheSettings: the errors of the two likeliest first
// mistakes say which setting to change: a configuration directory that is
// not there names RUNTIME_ROOT and its two subdirectories, and a host:port
// REDIS_URL under the default socket type (unix, as upstream's) says to set
// REDIS_SOCKET_TYPE=tcp.
func TestStartupErrorsNameTheSettings(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent")
	log := refuse(t, []string{"RUNTIME_ROOT=" + missing}, map[string]string{"e2e.yaml": e2eConfig})
	require.Contains(t, log, "RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY")
	require.Contains(t, log, missing)

	s := redistest.New(t)
	s.Stop()
	log = refuse(t, []string{"BACKEND_TYPE=redis", "REDIS_URL=" + s.Addr, "REDIS_STARTUP_MAX_ELAPSED_TIME=200ms"}, map[string]string{"e2e.yaml": e2eConfig})
	require.Contains(t, log, "set REDIS_SOCKET_TYPE=tcp for a host:port")
}
