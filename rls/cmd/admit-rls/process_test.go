package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// binary is the admit-rls executable TestMain builds.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "admit-rls-test")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "admit-rls")
	out, err := exec.Command("go", "build", "-race", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building admit-rls: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running admit-rls process.
type proc struct {
	cmd       *exec.Cmd
	configDir string
	addrs     map[string]string // "grpc", "http", "prometheus" → host:port
	client    pb.RateLimitServiceClient

	mu     sync.Mutex
	stderr strings.Builder
	done   chan struct{} // closed when stderr hits EOF
}

// listening matches the log line of a listener, in the text format or in
// JSON (LOG_FORMAT=json).
var listening = regexp.MustCompile(`msg=listening what=(\w+) addr=(\S+)|"@message":"listening","what":"(\w+)","addr":"([^"]+)"`)

// startRLS starts admit-rls with env (on top of loopback addresses on free
// ports and a runtime directory holding files), waits until it listens,
// and stops it with SIGTERM at the end of the test, which must exit 0.
func startRLS(t *testing.T, env []string, files map[string]string) *proc {
	t.Helper()
	p, err := launch(t, env, files)
	require.NoError(t, err)
	return p
}

func launch(t *testing.T, env []string, files map[string]string) (*proc, error) {
	t.Helper()
	root := t.TempDir()
	p := &proc{configDir: filepath.Join(root, "sub", "config"), addrs: map[string]string{}, done: make(chan struct{})}
	require.NoError(t, os.MkdirAll(p.configDir, 0o755))
	for name, content := range files {
		path := filepath.Join(p.configDir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	}
	p.cmd = exec.Command(binary)
	p.cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0",
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=sub", "RUNTIME_APPDIRECTORY=config",
		"LOG_LEVEL=INFO",
		// The race detector's default sleeps a second at exit; children
		// start and stop some fifty times.
		"GORACE=atexit_sleep_ms=0",
	}, env...)
	stderr, err := p.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	ready := make(chan struct{})
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.stderr.WriteString(line + "\n")
			if m := listening.FindStringSubmatch(line); m != nil {
				if m[1] == "" {
					m = m[2:]
				}
				p.addrs[m[1]] = m[2]
				if !signalled && p.addrs["grpc"] != "" && p.addrs["http"] != "" {
					signalled = true
					close(ready)
				}
			}
			p.mu.Unlock()
		}
		io.Copy(io.Discard, stderr)
	}()
	select {
	case <-ready:
	case <-p.done:
		err := p.cmd.Wait()
		return nil, fmt.Errorf("admit-rls exited (%v): %s", err, p.log())
	case <-time.After(60 * time.Second):
		p.cmd.Process.Kill()
		p.cmd.Wait()
		return nil, fmt.Errorf("admit-rls did not listen: %s", p.log())
	}
	conn, err := grpc.NewClient(p.addrs["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	p.client = pb.NewRateLimitServiceClient(conn)
	t.Cleanup(func() {
		conn.Close()
		if p.cmd.ProcessState == nil { // not yet waited for by the test
			p.cmd.Process.Signal(syscall.SIGTERM)
			<-p.done
			if err := p.cmd.Wait(); err != nil {
				t.Errorf("admit-rls exited with %v: %s", err, p.log())
			}
		}
		if t.Failed() {
			t.Logf("admit-rls stderr:\n%s", p.log())
		}
	})
	return p, nil
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// refuse runs admit-rls with env and files until it exits, for settings it
// must refuse; it returns the error, which holds stderr.
func refuse(t *testing.T, env []string, files map[string]string) string {
	t.Helper()
	_, err := launch(t, env, files)
	if err == nil {
		t.Fatal("admit-rls started")
	}
	return err.Error()
}

// d builds a descriptor from key, value pairs.
func d(kv ...string) *common.RateLimitDescriptor {
	var es []*common.RateLimitDescriptor_Entry
	for i := 0; i < len(kv); i += 2 {
		es = append(es, &common.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return &common.RateLimitDescriptor{Entries: es}
}

// addend returns ds with its hits_addend set to n.
func addend(ds *common.RateLimitDescriptor, n uint64) *common.RateLimitDescriptor {
	ds.HitsAddend = wrapperspb.UInt64(n)
	return ds
}

func (p *proc) ask(t *testing.T, domain string, ds ...*common.RateLimitDescriptor) *pb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := p.client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: domain, Descriptors: ds})
	require.NoError(t, err)
	require.Len(t, resp.Statuses, len(ds))
	return resp
}

type (
	commonDescriptor = common.RateLimitDescriptor
	commonOverride   = common.RateLimitDescriptor_RateLimitOverride
)
