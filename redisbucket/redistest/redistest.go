// Package redistest starts real redis-server processes on loopback for
// tests, as net/http/httptest starts HTTP servers: one Server, or a Cluster
// of three masters. Persistence is off, a server's files (its log among
// them) go under a directory the caller owns, and every server is killed
// with the process that started it (Pdeathsig), so a test binary that dies
// leaves none behind. A server can be killed and restarted on its port, or
// frozen with SIGSTOP, to stage outages.
//
// If redis-server or redis-cli is missing, the first Start runs the
// repository's .ci/redis-server (found in the working directory or one
// above it), which installs Debian's packages; make test runs it too.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server process on a 127.0.0.1 port. Its methods must
// not be called concurrently with each other; a Server must not be copied
// after Start returns it.
type Server struct {
	Addr string // 127.0.0.1:port
	Port int
	Dir  string // the server's working directory, with its redis.log

	args   []string
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd has been reaped
}

// New starts a server with Start under tb.TempDir() and stops it when tb's
// test ends; it calls tb.Fatal if the server does not start.
func New(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	s, err := Start(tb.TempDir(), extra...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// Start starts redis-server on a free 127.0.0.1 port, with its files in a
// directory under dir named for the port and with extra as further
// command-line options, and waits until it answers PING. A port found free
// may be taken before the server binds it, so Start tries a few.
func Start(dir string, extra ...string) (*Server, error) {
	if err := installed(); err != nil {
		return nil, err
	}
	var err error
	for range 5 {
		var addr string
		if addr, err = FreeAddr(); err != nil {
			return nil, err
		}
		port := addr[strings.LastIndexByte(addr, ':')+1:]
		d := filepath.Join(dir, port)
		if err = os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		s := &Server{Addr: addr, Dir: d}
		s.Port, _ = strconv.Atoi(port)
		s.args = append([]string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", d, "--daemonize", "no", "--protected-mode", "yes", "--loglevel", "warning",
			"--logfile", filepath.Join(d, "redis.log")}, extra...)
		if err = s.Restart(); err == nil {
			return s, nil
		}
	}
	return nil, err
}

// FreeAddr returns a 127.0.0.1 address that nothing listened on a moment
// ago: a server may bind it, and a client dialling it is refused.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Restart starts the server's process again, on the same port and with the
// same options (after Stop, say), and waits until it answers PING.
func (s *Server) Restart() error {
	s.cmd = exec.Command("redis-server", s.args...)
	s.cmd.Dir = s.Dir
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return err
	}
	s.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) { _ = cmd.Wait(); close(exited) }(s.cmd, s.exited)
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		select {
		case <-s.exited:
			log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
			return fmt.Errorf("redis-server on %s exited: %s", s.Addr, log)
		default:
		}
		if c.Ping(context.Background()).Err() == nil {
			return nil
		}
	}
	s.Stop()
	return fmt.Errorf("redis-server on %s did not answer PING within 10s", s.Addr)
}

// Stop kills the process at once, as a crash would (SIGKILL, after SIGCONT
// in case it is frozen), and waits until it is reaped. It does nothing on a
// Server whose process has not been started or is already stopped.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// Signal sends sig to the process: SIGSTOP freezes it (connections stay
// open, nothing answers) and SIGCONT thaws it.
func (s *Server) Signal(sig syscall.Signal) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return errors.New("redistest: the server's process was not started here")
	}
	return s.cmd.Process.Signal(sig)
}

// Cluster is three cluster-enabled masters without replicas, the 16384
// slots split among them.
type Cluster struct {
	Nodes []*Server
}

// Proxy starts a TCP proxy on loopback to upstream, closed when tb's test
// ends, and returns its address, and cut, which closes every connection it
// holds (an idle timeout, a load balancer, a restart). Before it forwards
// each chunk of upstream's replies it calls reply (from the connection's
// goroutine): false closes the client's connection in place of the chunk.
func Proxy(tb testing.TB, upstream string, reply func() bool) (addr string, cut func()) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn // requires mu
	closed := false      // requires mu: no connection is kept after cleanup
	tb.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				down.Close()
				continue
			}
			mu.Lock()
			if closed { // accepted as cleanup closed the others
				mu.Unlock()
				down.Close()
				up.Close()
				return
			}
			conns = append(conns, down, up)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(up, down); up.Close() }()
			go func() {
				defer wg.Done()
				defer down.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := up.Read(buf)
					if n > 0 {
						if !reply() {
							return // the reply is lost with the connection
						}
						if _, werr := down.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return // EOF or closed: the proxy's side closes too
					}
				}
			}()
		}
	}()
	cut = func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
		conns = nil
	}
	return ln.Addr().String(), cut
}

// ReplyDropper is a Proxy that, once armed, closes the client's connection
// in place of forwarding the next reply: the server ran the command, and
// the client saw the connection end (a reset, a proxy or a failover)
// before its reply, the case in which a client that retries sends a write
// twice.
func ReplyDropper(tb testing.TB, upstream string) (addr string, arm, cut func()) {
	tb.Helper()
	var armed atomic.Bool
	addr, cut = Proxy(tb, upstream, func() bool { return !armed.CompareAndSwap(true, false) })
	return addr, func() { armed.Store(true) }, cut
}

// NewCluster starts a Cluster with StartCluster under tb.TempDir() and stops
// it when tb's test ends; it calls tb.Fatal if the cluster does not start.
func NewCluster(tb testing.TB) *Cluster {
	tb.Helper()
	cl, err := StartCluster(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Stop)
	return cl
}

// StartCluster starts three cluster-enabled servers with their files under
// dir, joins them with redis-cli --cluster create, and waits until every
// node reports cluster_state:ok.
func StartCluster(dir string) (*Cluster, error) {
	cl := &Cluster{}
	for i := range 3 {
		s, err := Start(dir, "--cluster-enabled", "yes", "--cluster-config-file", fmt.Sprintf("nodes-%d.conf", i),
			"--cluster-node-timeout", "5000")
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
	a := make([]string, 0, len(cl.Nodes))
	for _, s := range cl.Nodes {
		a = append(a, s.Addr)
	}
	return a
}

// Owners returns key's slot, a client of the master that owns it and one
// of another master, both closed when tb's test ends.
func (cl *Cluster) Owners(tb testing.TB, key string) (slot int64, owner, other *redis.Client) {
	tb.Helper()
	ctx := context.Background()
	admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer admin.Close()
	slot, err := admin.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		tb.Fatal(err)
	}
	m, err := admin.MasterForKey(ctx, key)
	if err != nil {
		tb.Fatal(err)
	}
	for _, s := range cl.Nodes {
		if s.Addr != m.Options().Addr && other != nil {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
		tb.Cleanup(func() { c.Close() })
		if s.Addr == m.Options().Addr {
			owner = c
		} else {
			other = c
		}
	}
	return slot, owner, other
}

// Disagree makes two masters disagree about key's slot, as they do for a
// moment while a slot moves or a replica takes over: its owner hands it to
// another master (CLUSTER SETSLOT … NODE, sent to the owner only), which
// still routes it to the owner, so that each answers MOVED to the other for
// as long as the Cluster runs. A Cluster client follows the redirects until
// its limit and then returns the last MOVED. It calls tb.Fatal if either
// master does not answer a GET of key with MOVED.
func (cl *Cluster) Disagree(tb testing.TB, key string) {
	tb.Helper()
	ctx := context.Background()
	slot, owner, other := cl.Owners(tb, key)
	otherID, err := other.ClusterMyID(ctx).Result()
	if err != nil {
		tb.Fatal(err)
	}
	if err := owner.Do(ctx, "cluster", "setslot", slot, "node", otherID).Err(); err != nil {
		tb.Fatal(err)
	}
	for _, c := range []*redis.Client{owner, other} {
		if err := c.Get(ctx, key).Err(); !redis.HasErrorPrefix(err, "MOVED") {
			tb.Fatalf("GET %s on %s: %v, want MOVED", key, c.Options().Addr, err)
		}
	}
}

// Stop kills every node.
func (cl *Cluster) Stop() {
	for _, s := range cl.Nodes {
		s.Stop()
	}
}

// installed makes sure redis-server and redis-cli are on PATH, running the
// repository's .ci/redis-server once if either is missing.
var installed = sync.OnceValue(func() error {
	if missing() == nil {
		return nil
	}
	script, err := findScript()
	if err != nil {
		return fmt.Errorf("%w (make test installs it: .ci/redis-server, or apt-get install redis-server redis-tools)", missing())
	}
	if out, err := exec.Command(script).CombinedOutput(); err != nil {
		return fmt.Errorf("installing redis-server with %s: %v: %s", script, err, out)
	}
	return missing()
})

func missing() error {
	for _, name := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(name); err != nil {
			return fmt.Errorf("%s is not installed: %w", name, err)
		}
	}
	return nil
}

// findScript looks for .ci/redis-server in the working directory (a test's
// is its package's) and each directory above it.
func findScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, ".ci", "redis-server")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}
