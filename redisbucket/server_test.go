package redisbucket_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is a redis-server process the tests started on a loopback port,
// with persistence off and its files in a temporary directory.
type server struct {
	addr string
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
}

// startServer starts a redis-server on a free 127.0.0.1 port. extra are
// more command-line options. It waits until the server answers PING.
func startServer(dir string, extra ...string) (*server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("redis-server is not installed (make test installs it: apt-get install redis-server redis-tools): %w", err)
	}
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		d := filepath.Join(dir, strconv.Itoa(port))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		s := &server{addr: fmt.Sprintf("127.0.0.1:%d", port), port: port, dir: d}
		s.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", d, "--daemonize", "no", "--protected-mode", "yes", "--loglevel", "warning",
			"--logfile", filepath.Join(d, "redis.log")}, extra...)
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// start runs the server process (again, after kill) and waits for PING.
func (s *server) start() error {
	s.cmd = exec.Command("redis-server", s.args...)
	s.cmd.Dir = s.dir
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func(c *exec.Cmd) { _ = c.Wait(); close(exited) }(s.cmd)
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server on %s exited: %s", s.addr, log)
		default:
		}
		if c.Ping(context.Background()).Err() == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.kill()
	return fmt.Errorf("redis-server on %s did not answer PING within 10s", s.addr)
}

// kill stops the process at once (SIGKILL) and reaps it.
func (s *server) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		_ = s.cmd.Process.Kill()
		for i := 0; i < 500; i++ {
			if s.cmd.Process.Signal(syscall.Signal(0)) != nil {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
}

func (s *server) signal(sig syscall.Signal) error { return s.cmd.Process.Signal(sig) }

// client returns a go-redis client for the server that honours context
// deadlines, as redisbucket requires, and closes it when t ends.
func (s *server) client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// serverTime reads the server's clock (TIME) in microseconds.
func serverTime(t testing.TB, c redis.UniversalClient) int64 {
	t.Helper()
	tm, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return tm.UnixMicro()
}

// cluster is three masters on loopback ports, no replicas.
type cluster struct {
	nodes []*server
}

func startCluster(dir string) (*cluster, error) {
	cl := &cluster{}
	addrs := []string{}
	for i := range 3 {
		s, err := startServer(dir, "--cluster-enabled", "yes", "--cluster-config-file", fmt.Sprintf("nodes-%d.conf", i),
			"--cluster-node-timeout", "5000")
		if err != nil {
			cl.stop()
			return nil, err
		}
		cl.nodes = append(cl.nodes, s)
		addrs = append(addrs, s.addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		cl.stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	// Wait until every node reports the cluster up.
	for _, s := range cl.nodes {
		c := redis.NewClient(&redis.Options{Addr: s.addr})
		ok := false
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			info, err := c.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				ok = true
				break
			}
		}
		c.Close()
		if !ok {
			cl.stop()
			return nil, fmt.Errorf("cluster node %s did not reach cluster_state:ok", s.addr)
		}
	}
	return cl, nil
}

func (cl *cluster) addrs() []string {
	var a []string
	for _, s := range cl.nodes {
		a = append(a, s.addr)
	}
	return a
}

func (cl *cluster) stop() {
	for _, s := range cl.nodes {
		s.kill()
	}
}

// readLines is for children's output.
func readLines(b []byte) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

func countGoroutines() int { return runtime.NumGoroutine() }
