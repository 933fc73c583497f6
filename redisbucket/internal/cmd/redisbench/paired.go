package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/redis/go-redis/v9"

	"github.com/admit-go/admit/redisbucket/redistest"
)

// build is one test binary of this module: "new" from this checkout, "old"
// from the checkout -against names.
type build struct {
	name, bin string
}

// pairedRun is one BenchmarkDecision case in one process: its decisions/s,
// the server's time per EVALSHA over the run (INFO commandstats, reset
// before it), and the CPU time per decision of the client process (its
// rusage, so including its start and warm-up, the same for every case) and
// of redis-server (/proc/<pid>/stat, 10 ms ticks). CPU time per decision is
// what a decision costs where client and server share cores, and moves far
// less than decisions/s when other work shares the machine.
type pairedRun struct {
	dps, usec, clientCPU, serverCPU float64
	line                            string
}

// paired runs BenchmarkDecision's 64-goroutine cases, one hot key and 10k
// keys, for redis_rate and redisbucket, one case per process, in rounds:
// every round runs each (keys, build, impl) once, in an order reversed
// every other round, so that a slow phase of a shared machine falls on
// both sides of each ratio alike. Each round gives one ratio per case,
// redisbucket's decisions/s over redis_rate's in the same round and build;
// the report is their median and spread, with the server's µs per call.
// With pin, the server runs on CPU 0 and the client on CPU 1 (taskset), so
// that neither takes the other's core; GOMAXPROCS is then 1.
func paired(w io.Writer, srv *redistest.Server, rounds int, pin bool, against, benchtime string) {
	dir, err := os.MkdirTemp("", "redisbench-paired-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	builds := []build{{name: "new", bin: compile(".", filepath.Join(dir, "new.test"))}}
	if against != "" {
		// A worktree of the commit, removed afterwards; its redisbucket
		// module builds against that commit's core module (replace ../).
		tree := filepath.Join(dir, "old")
		if out, err := exec.Command("git", "worktree", "add", "--detach", tree, against).CombinedOutput(); err != nil {
			log.Fatalf("git worktree add %s: %v: %s", against, err, out)
		}
		defer exec.Command("git", "worktree", "remove", "--force", tree).Run()
		builds = append(builds, build{name: "old", bin: compile(filepath.Join(tree, "redisbucket"), filepath.Join(dir, "old.test"))})
	}
	cpu := "2"
	var client []string
	pid := serverPID(srv)
	decisions, err := strconv.ParseFloat(strings.TrimSuffix(benchtime, "x"), 64)
	if err != nil || !strings.HasSuffix(benchtime, "x") {
		log.Fatalf("-paired needs -benchtime as a count of decisions (20000x), not %q", benchtime)
	}
	if pin {
		if out, err := exec.Command("taskset", "-a", "-p", "-c", "0", strconv.Itoa(pid)).CombinedOutput(); err != nil {
			log.Fatalf("taskset the server: %v: %s", err, out)
		}
		client = []string{"taskset", "-c", "1"}
		cpu = "1"
	}
	type caseKey struct{ keys, build, impl string }
	var order []caseKey
	for _, keys := range []string{"1", "10k"} {
		for _, b := range builds {
			for _, impl := range []string{"redis_rate", "redisbucket"} {
				order = append(order, caseKey{keys, b.name, impl})
			}
		}
	}
	bin := map[string]string{}
	for _, b := range builds {
		bin[b.name] = b.bin
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	runs := map[caseKey][]pairedRun{}
	pinned := "not pinned"
	if pin {
		pinned = "redis-server on CPU 0, the client on CPU 1"
	}
	fmt.Fprintf(w, "## Paired rounds: BenchmarkDecision at 64 goroutines, one case per process, -benchtime %s, -cpu %s, %s\n\n", benchtime, cpu, pinned)
	if against != "" {
		fmt.Fprintf(w, "builds: new = this checkout, old = commit %s\n\n", against)
	}
	for r := range rounds {
		seq := append([]caseKey(nil), order...)
		if r%2 == 1 {
			for i, j := 0, len(seq)-1; i < j; i, j = i+1, j-1 {
				seq[i], seq[j] = seq[j], seq[i]
			}
		}
		for _, k := range seq {
			if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
				log.Fatal(err)
			}
			bench := fmt.Sprintf("^BenchmarkDecision$/^keys=%s$/^goroutines=64$/^impl=%s$", k.keys, k.impl)
			args := append(append([]string(nil), client...), bin[k.build], "-test.run", "^$", "-test.bench", bench,
				"-test.benchtime", benchtime, "-test.count", "1", "-test.cpu", cpu)
			// A process whose benchmark fails (a decision that timed out on
			// a starved machine) is reported and its case run again, up to
			// twice: the benchmark stays strict, the report says so.
			var cmd *exec.Cmd
			var cpu0 float64
			var out []byte
			for try := 0; ; try++ {
				cmd = exec.Command(args[0], args[1:]...)
				cmd.Env = append(os.Environ(), "REDISBUCKET_ADDR="+srv.Addr)
				cpu0 = processCPU(pid)
				out, err = cmd.CombinedOutput()
				if err == nil {
					break
				}
				if try == 2 {
					log.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
				}
				fmt.Fprintf(w, "failed, run again: build %s, round %d, keys=%s, impl=%s: %s\n", k.build, r+1, k.keys, k.impl, failure(out))
			}
			run := pairedRun{usec: evalshaUsec(c),
				clientCPU: float64(cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime()) / 1e3 / decisions,
				serverCPU: (processCPU(pid) - cpu0) / decisions}
			for _, line := range strings.Split(string(out), "\n") {
				if !strings.HasPrefix(line, "BenchmarkDecision/") {
					continue
				}
				f := strings.Fields(line)
				for i := 2; i+1 < len(f); i += 2 {
					if f[i+1] == "decisions/s" {
						run.dps, _ = strconv.ParseFloat(f[i], 64)
					}
				}
				run.line = line
			}
			if run.line == "" {
				log.Fatalf("%s: no result\n%s", strings.Join(args, " "), out)
			}
			runs[k] = append(runs[k], run)
			// benchfmt: the build as a configuration line, so that
			// benchstat can pivot on it; the server's µs per call as a
			// metric of its own.
			fmt.Fprintf(w, "build: %s\nround: %d\n%s %.2f server-µs/call %.2f client-cpu-µs/op %.2f server-cpu-µs/op\n", k.build, r+1, run.line, run.usec, run.clientCPU, run.serverCPU)
		}
	}
	fmt.Fprintf(w, "\n## Summary: %d rounds; ratio = redisbucket's decisions/s over redis_rate's in the same round and build\n\n", rounds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "keys\tbuild\tredis_rate/s\tredisbucket/s\tratio median\tmin\tmax\trounds ≥ 1\tEVALSHA µs rr\trb\tclient CPU µs/op rr\trb\tserver CPU µs/op rr\trb\t\n")
	for _, keys := range []string{"1", "10k"} {
		for _, b := range builds {
			rr, rb := runs[caseKey{keys, b.name, "redis_rate"}], runs[caseKey{keys, b.name, "redisbucket"}]
			var ratios, rrD, rbD, rrU, rbU, rrC, rbC, rrS, rbS []float64
			above := 0
			for i := range rr {
				ratios = append(ratios, rb[i].dps/rr[i].dps)
				if rb[i].dps >= rr[i].dps {
					above++
				}
				rrD, rbD = append(rrD, rr[i].dps), append(rbD, rb[i].dps)
				rrU, rbU = append(rrU, rr[i].usec), append(rbU, rb[i].usec)
				rrC, rbC = append(rrC, rr[i].clientCPU), append(rbC, rb[i].clientCPU)
				rrS, rbS = append(rrS, rr[i].serverCPU), append(rbS, rb[i].serverCPU)
			}
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%.3f\t%.3f\t%.3f\t%d/%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", keys, b.name, median(rrD), median(rbD),
				median(ratios), minOf(ratios), maxOf(ratios), above, len(ratios), median(rrU), median(rbU), median(rrC), median(rbC), median(rrS), median(rbS))
		}
	}
	tw.Flush()
	if against != "" {
		fmt.Fprintf(w, "\nnew over old, redisbucket's decisions/s in the same round:\n")
		for _, keys := range []string{"1", "10k"} {
			nw, od := runs[caseKey{keys, "new", "redisbucket"}], runs[caseKey{keys, "old", "redisbucket"}]
			var r []float64
			for i := range nw {
				r = append(r, nw[i].dps/od[i].dps)
			}
			fmt.Fprintf(w, "  keys=%s: median %.3f (min %.3f, max %.3f)\n", keys, median(r), minOf(r), maxOf(r))
		}
	}
	fmt.Fprintln(w)
}

// failure is the first line of a failed benchmark's output that says why.
func failure(out []byte) string {
	for _, line := range strings.Split(string(out), "\n") {
		if t := strings.TrimSpace(line); strings.Contains(t, ".go:") {
			return t
		}
	}
	return "no reason given"
}

// compile builds the test binary of the redisbucket checkout in dir.
func compile(dir, out string) string {
	cmd := exec.Command("go", "test", "-c", "-o", out, ".")
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		log.Fatalf("go test -c in %s: %v\n%s", dir, err, b)
	}
	return out
}

// serverPID is the redis-server's process id, from INFO server.
func serverPID(srv *redistest.Server) int {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		log.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, err := strconv.Atoi(v)
			if err == nil {
				return pid
			}
		}
	}
	log.Fatal("INFO server has no process_id")
	return 0
}

// evalshaUsec is INFO commandstats' usec_per_call for EVALSHA.
func evalshaUsec(c *redis.Client) float64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		log.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:"); ok {
			for _, kv := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "usec_per_call="); ok {
					f, _ := strconv.ParseFloat(v, 64)
					return f
				}
			}
		}
	}
	return math.NaN()
}

// processCPU is the user and system CPU time of process pid so far, in
// µs, from /proc/<pid>/stat (fields 14 and 15, in clock ticks of 10 ms).
func processCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		log.Fatal(err)
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) * 1e4
}

func minOf(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[0]
}

func maxOf(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)-1]
}
