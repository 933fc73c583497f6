package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/admit-go/admit/redisbucket"
	"github.com/admit-go/admit/redisbucket/redistest"
)

// serverCost measures the instructions redis-server executes per decision,
// with callgrind: deterministic, so it needs no quiet machine. For each
// implementation and key count, a fresh redis-server runs under valgrind
// with instrumentation off; every key is decided once (the script loaded,
// the keys written), then instrumentation is on for calls decisions, made
// one at a time from one connection, over the same keys in the same order,
// and the dump's total is divided by calls. It counts all of the server's
// work for a call: reading and parsing the command, the script, the reply.
// As in BenchmarkDecision, capacity 1e9 at 1 token per second, so every
// decision admits and writes.
//
// With against, the same measurement also runs on redisbucket at that
// commit: this command's own source, built in a worktree of the commit.
func serverCost(w io.Writer, calls int, against string) {
	if _, err := exec.LookPath("valgrind"); err != nil {
		log.Fatal("the server-cost run needs valgrind (apt-get install valgrind)")
	}
	fmt.Fprintf(w, "## Server instructions per decision: redis-server under callgrind, %d decisions from one connection after one warm pass over the keys\n\n", calls)
	costTable(w, calls)
	if against == "" {
		return
	}
	dir, err := os.MkdirTemp("", "redisbench-against-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	tree := filepath.Join(dir, "old")
	if out, err := exec.Command("git", "worktree", "add", "--detach", tree, against).CombinedOutput(); err != nil {
		log.Fatalf("git worktree add %s: %v: %s", against, err, out)
	}
	defer exec.Command("git", "worktree", "remove", "--force", tree).Run()
	src, _ := filepath.Glob("internal/cmd/redisbench/*.go")
	if len(src) == 0 {
		log.Fatal("-against needs to run from redisbucket/, where internal/cmd/redisbench is")
	}
	to := filepath.Join(tree, "redisbucket", "internal", "cmd", "redisbench")
	if err := os.MkdirAll(to, 0o755); err != nil {
		log.Fatal(err)
	}
	for _, f := range src {
		b, err := os.ReadFile(f)
		if err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, filepath.Base(f)), b, 0o644); err != nil {
			log.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "redisbench-old")
	build := exec.Command("go", "build", "-o", bin, "./internal/cmd/redisbench")
	build.Dir = filepath.Join(tree, "redisbucket")
	if out, err := build.CombinedOutput(); err != nil {
		log.Fatalf("building redisbench at %s: %v: %s", against, err, out)
	}
	out, err := exec.Command(bin, "-costtable", "-calls", strconv.Itoa(calls)).Output()
	if err != nil {
		log.Fatalf("redisbench at %s: %v", against, err)
	}
	fmt.Fprintf(w, "redisbucket at commit %s (this command's source built there):\n\n%s\n", against, out)
}

// costTable prints the instructions per decision of each implementation.
func costTable(w io.Writer, calls int) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "keys\timpl\tinstructions/decision\tvs redis_rate\t\n")
	for _, keys := range []int{1, 10_000} {
		var base float64
		for _, impl := range []string{"redis_rate", "redisbucket"} {
			ir := costOf(impl, keys, calls)
			if impl == "redis_rate" {
				base = ir
			}
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.3f×\t\n", keyLabel(keys), impl, ir, ir/base)
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
}

func keyLabel(k int) string {
	if k >= 1000 {
		return fmt.Sprintf("%dk", k/1000)
	}
	return fmt.Sprint(k)
}

// costOf runs one implementation against a fresh redis-server under
// callgrind and returns its instructions per decision.
func costOf(impl string, keys, calls int) float64 {
	dir, err := os.MkdirTemp("", "redisbench-callgrind-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	addr, err := redistest.FreeAddr()
	if err != nil {
		log.Fatal(err)
	}
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	out := filepath.Join(dir, "callgrind.out")
	cmd := exec.Command("valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file="+out,
		"redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	cmd.Stderr = io.Discard
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 1, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	defer c.Close()
	ctx := context.Background()
	up := false
	for deadline := time.Now().Add(time.Minute); !up && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		up = c.Ping(ctx).Err() == nil
	}
	if !up {
		log.Fatalf("redis-server under valgrind did not answer on %s", addr)
	}
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("user-%d", i)
	}
	const capacity, rate = 1_000_000_000, 1
	var decide func(key string) error
	switch impl {
	case "redis_rate":
		l := redis_rate.NewLimiter(c)
		limit := redis_rate.Limit{Rate: rate, Burst: capacity, Period: time.Second}
		decide = func(key string) error { _, err := l.Allow(ctx, "bench:rr:"+key, limit); return err }
	case "redisbucket":
		l, err := redisbucket.New(c, capacity, rate, redisbucket.WithPrefix("bench:rb:"), redisbucket.WithTimeout(time.Minute))
		if err != nil {
			log.Fatal(err)
		}
		decide = func(key string) error { _, err := l.AllowN(ctx, key, 1); return err }
	}
	for _, k := range names {
		if err := decide(k); err != nil {
			log.Fatal(err)
		}
	}
	control := func(args ...string) {
		if b, err := exec.Command("callgrind_control", append(args, strconv.Itoa(cmd.Process.Pid))...).CombinedOutput(); err != nil {
			log.Fatalf("callgrind_control %v: %v: %s", args, err, b)
		}
	}
	control("-i", "on")
	for i := range calls {
		if err := decide(names[i%keys]); err != nil {
			log.Fatal(err)
		}
	}
	control("-i", "off")
	control("-d")
	dumps, _ := filepath.Glob(out + ".*")
	if len(dumps) == 0 {
		log.Fatalf("no callgrind dump in %s", dir)
	}
	b, err := os.ReadFile(dumps[len(dumps)-1])
	if err != nil {
		log.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "totals: "); ok {
			total, err := strconv.ParseFloat(strings.Fields(v)[0], 64)
			if err != nil {
				log.Fatal(err)
			}
			return total / float64(calls)
		}
	}
	log.Fatalf("no totals in %s", dumps[len(dumps)-1])
	return 0
}

// quiet drops go-redis's log lines: the pool logs every failed dial while
// valgrind starts redis-server.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
