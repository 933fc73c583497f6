// Package redistest starts real redis-server processes on loopback ports
// for redisbucket's tests and measurements: persistence off, files in a
// directory the caller owns, killed with the caller (Pdeathsig).
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server process started on a 127.0.0.1 port.
type Server struct {
	Addr string // host:port
	Port int
	Dir  string // its working directory and log

	args []string
	cmd  *exec.Cmd
}

// Start starts a redis-server on a free 127.0.0.1 port, with its files
// under dir. extra are more command-line options. It waits until the server
// answers PING.
func Start(dir string, extra ...string) (*Server, error) {
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
		s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), Port: port, Dir: d}
		s.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", d, "--daemonize", "no", "--protected-mode", "yes", "--loglevel", "warning",
			"--logfile", filepath.Join(d, "redis.log")}, extra...)
		if lastErr = s.Restart(); lastErr == nil {
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

// Restart runs the server process again on the same port (after Kill) and
// waits for PING.
func (s *Server) Restart() error {
	s.cmd = exec.Command("redis-server", s.args...)
	s.cmd.Dir = s.Dir
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func(c *exec.Cmd) { _ = c.Wait(); close(exited) }(s.cmd)
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
			return fmt.Errorf("redis-server on %s exited: %s", s.Addr, log)
		default:
		}
		if c.Ping(context.Background()).Err() == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Kill()
	return fmt.Errorf("redis-server on %s did not answer PING within 10s", s.Addr)
}

// Kill stops the process at once (SIGKILL, after SIGCONT in case it is
// stopped) and waits until it is gone.
func (s *Server) Kill() {
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

// Signal sends sig to the process (SIGSTOP and SIGCONT freeze and thaw it).
func (s *Server) Signal(sig syscall.Signal) error { return s.cmd.Process.Signal(sig) }

// Cluster is three masters on loopback ports, no replicas.
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts three cluster-enabled servers, joins them with
// redis-cli --cluster create, and waits until every node reports
// cluster_state:ok.
func StartCluster(dir string) (*Cluster, error) {
	cl := &Cluster{}
	addrs := []string{}
	for i := range 3 {
		s, err := Start(dir, "--cluster-enabled", "yes", "--cluster-config-file", fmt.Sprintf("nodes-%d.conf", i),
			"--cluster-node-timeout", "5000")
		if err != nil {
			cl.Stop()
			return nil, err
		}
		cl.Nodes = append(cl.Nodes, s)
		addrs = append(addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		cl.Stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	// Wait until every node reports the cluster up.
	for _, s := range cl.Nodes {
		c := redis.NewClient(&redis.Options{Addr: s.Addr})
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
			cl.Stop()
			return nil, fmt.Errorf("cluster node %s did not reach cluster_state:ok", s.Addr)
		}
	}
	return cl, nil
}

// Addrs are the nodes' addresses.
func (cl *Cluster) Addrs() []string {
	var a []string
	for _, s := range cl.Nodes {
		a = append(a, s.Addr)
	}
	return a
}

// Stop kills every node.
func (cl *Cluster) Stop() {
	for _, s := range cl.Nodes {
		s.Kill()
	}
}
