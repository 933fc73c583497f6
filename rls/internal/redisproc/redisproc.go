// Package redisproc starts real redis-server processes on loopback for
// admit-rls's tests: one server, or a Cluster of three masters. Persistence
// is off, files go under a directory the caller owns, and a server dies
// with its parent (Pdeathsig).
package redisproc

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

// Server is one redis-server process.
type Server struct {
	Addr string
	cmd  *exec.Cmd
}

// Start starts redis-server on a free 127.0.0.1 port with extra options and
// waits until it answers PING. It tries a few ports, since a port found
// free may be taken before the server binds it.
func Start(dir string, extra ...string) (*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("redis-server is not installed (.ci/redis-server installs it): %w", err)
	}
	var err error
	for range 5 {
		var s *Server
		if s, err = start(dir, extra); err == nil {
			return s, nil
		}
	}
	return nil, err
}

func start(dir string, extra []string) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	d := filepath.Join(dir, strconv.Itoa(port))
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, err
	}
	args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", d, "--logfile", "redis.log", "--loglevel", "warning"}, extra...)
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: exec.Command("redis-server", args...)}
	s.cmd.Dir = d
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() { s.cmd.Wait(); close(exited) }()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(d, "redis.log"))
			return nil, fmt.Errorf("redis-server on %s exited: %s", s.Addr, log)
		default:
		}
		if c.Ping(context.Background()).Err() == nil {
			return s, nil
		}
	}
	s.Stop()
	return nil, fmt.Errorf("redis-server on %s did not answer PING", s.Addr)
}

// Signal sends sig to the server (SIGSTOP and SIGCONT freeze and thaw it).
func (s *Server) Signal(sig syscall.Signal) error { return s.cmd.Process.Signal(sig) }

// Stop kills the server and waits for it to go.
func (s *Server) Stop() {
	if s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGCONT)
		s.cmd.Process.Kill()
		for range 500 {
			if s.cmd.Process.Signal(syscall.Signal(0)) != nil {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// Cluster is three masters without replicas.
type Cluster struct{ Nodes []*Server }

// StartCluster starts three cluster-enabled servers, joins them with
// redis-cli --cluster create and waits for cluster_state:ok on each.
func StartCluster(dir string) (*Cluster, error) {
	cl := &Cluster{}
	for i := range 3 {
		s, err := Start(dir, "--cluster-enabled", "yes", "--cluster-config-file", fmt.Sprintf("nodes-%d.conf", i))
		if err != nil {
			cl.Stop()
			return nil, err
		}
		cl.Nodes = append(cl.Nodes, s)
	}
	args := append(append([]string{"--cluster", "create"}, cl.Addrs()...), "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		cl.Stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	for _, s := range cl.Nodes {
		c := redis.NewClient(&redis.Options{Addr: s.Addr})
		up := false
		for deadline := time.Now().Add(20 * time.Second); !up && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			info, err := c.ClusterInfo(context.Background()).Result()
			up = err == nil && strings.Contains(info, "cluster_state:ok")
		}
		c.Close()
		if !up {
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
		s.Stop()
	}
}
