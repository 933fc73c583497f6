package admitgrpc_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitgrpc"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/redisbucket"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// startRedis starts a real redis-server on a free loopback port for the
// test, persistence off, killed when the test ends (and with the test
// process). If redis-server is missing it runs the repository's
// .ci/redis-server, which installs Debian's package. redisbucket's tests
// use their own internal starter, which another module cannot import.
func startRedis(t *testing.T) *redis.Client {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if out, err := exec.Command("../.ci/redis-server").CombinedOutput(); err != nil {
			t.Fatalf("installing redis-server: %v: %s", err, out)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir := t.TempDir()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", dir, "--daemonize", "no", "--loglevel", "warning",
		"--logfile", filepath.Join(dir, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	for deadline := time.Now().Add(10 * time.Second); c.Ping(context.Background()).Err() != nil; {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			t.Fatalf("redis-server exited: %s", log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("redis-server did not answer PING within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return c
}

// deadRedis is a client of a loopback port nothing listens on: every
// command fails (connection refused).
func deadRedis(t *testing.T) *redis.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRedis runs the interceptor over redisbucket on a real redis-server:
// the same answers as over keyed, the wait from the server's clock.
func TestRedis(t *testing.T) {
	l, err := redisbucket.New(startRedis(t), 2, 10) // a burst of 2, then 10 per second
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "tcp", admitgrpc.UnaryServerInterceptor(l, admitgrpc.WithPolicyName("shared")), nil)
	c := dial(t, s.addr)
	ctx := context.Background()
	for i := range 2 {
		hd, err := check(t, c, ctx)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		wantHeader(t, hd, "ratelimit-policy", `"shared";q=2`) // redisbucket reports no FillTime
	}
	hd, err := check(t, c, ctx)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third call: %v; want ResourceExhausted", err)
	}
	wantHeader(t, hd, "retry-after", "1")
	ri, _ := details(t, err)
	if ri == nil || ri.RetryDelay.AsDuration() <= 0 || ri.RetryDelay.AsDuration() > 100*time.Millisecond {
		t.Fatalf("RetryInfo %v; want a delay in (0, 100ms]", ri)
	}
	// Waiting the delay is enough (the server's clock has moved at least
	// as far as ours).
	time.Sleep(ri.RetryDelay.AsDuration())
	if _, err := check(t, c, ctx); err != nil {
		t.Fatalf("after RetryDelay: %v", err)
	}
	if got := s.handled.Load(); got != 3 {
		t.Fatalf("the handler ran %d times; want 3", got)
	}
}

// TestLimiterFailure covers the answers to a failed backend: no decision
// (fail closed: Unavailable; the interceptor's WithFailOpen: served), and a
// decision of the limiter's own failure policy, which is followed.
func TestLimiterFailure(t *testing.T) {
	ctx := context.Background()
	newRedis := func(opts ...redisbucket.Option) admit.KeyedLimiter {
		l, err := redisbucket.New(deadRedis(t), 2, 1, append(opts, redisbucket.WithTimeout(200*time.Millisecond))...)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	fallback, err := keyed.New(1, 1e-3, admit.WithClock(buckettest.NewFakeClock(0)))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		l        admit.KeyedLimiter
		opts     []admitgrpc.Option
		want     []codes.Code
		ratelim  []string // the ratelimit header of each call
		wantHand int64
	}{
		{"fail closed", newRedis(), nil, []codes.Code{codes.Unavailable, codes.Unavailable}, []string{"", ""}, 0},
		{"interceptor fails open", newRedis(), []admitgrpc.Option{admitgrpc.WithFailOpen()}, []codes.Code{codes.OK, codes.OK}, []string{"", ""}, 2},
		{"backend fails open", newRedis(redisbucket.WithFailOpen()), nil, []codes.Code{codes.OK, codes.OK}, []string{"", ""}, 2},
		{"fallback decides", newRedis(redisbucket.WithFallback(fallback)), []admitgrpc.Option{admitgrpc.WithFailOpen()},
			[]codes.Code{codes.OK, codes.ResourceExhausted}, []string{`"default";r=0;t=1000`, `"default";r=0;t=1000`}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := startServer(t, "tcp", admitgrpc.UnaryServerInterceptor(c.l, c.opts...), nil)
			cl := dial(t, s.addr)
			for i, want := range c.want {
				hd, err := check(t, cl, ctx)
				if status.Code(err) != want {
					t.Fatalf("call %d: %v; want %v", i, err, want)
				}
				wantHeader(t, hd, "ratelimit", c.ratelim[i])
			}
			if got := s.handled.Load(); got != c.wantHand {
				t.Fatalf("the handler ran %d times; want %d", got, c.wantHand)
			}
		})
	}
}
