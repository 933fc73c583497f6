// Command redisbench measures redisbucket on this machine, against one
// redis-server it starts on a loopback port: the floor (redis-benchmark
// PING and EVALSHA of an empty script), BenchmarkDecision (redisbucket
// against go-redis/redis_rate v10, go-redis auto-pipelining, rueidis and
// local batching, at 1 and 64 goroutines, one hot key and 10k keys), and
// the storm (admitted against capacity + rate × elapsed on the server's
// clock). It prints one report and, with -save, writes it to
// results/redis-<date>-<host>-<commit>.txt.
//
//	cd redisbucket && go run ./internal/cmd/redisbench -save ../results
//
// Two focused runs replace the full one. -paired N runs redis_rate and
// redisbucket at 64 goroutines, one hot key and 10k keys, in N rounds of
// one process per case with the order reversed every other round, and
// reports the ratio of each round (its median and spread) and the server's
// µs per call and CPU time per decision; -pin puts redis-server and the
// client on different CPUs, -against COMMIT adds a build of redisbucket at
// that commit (results/redis-paired-...). -callgrind counts redis-server's
// instructions per decision under valgrind, which a busy machine does not
// disturb (results/redis-servercost-...).
//
//	cd redisbucket && go run ./internal/cmd/redisbench -paired 20 -pin -save ../results
//	cd redisbucket && go run ./internal/cmd/redisbench -callgrind -save ../results
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admit-go/admit/redisbucket"
	"github.com/admit-go/admit/redisbucket/redistest"

	"github.com/admit-go/admit/internal/provenance"
)

func main() {
	save := flag.String("save", "", "directory to write the report into (results/)")
	benchtime := flag.String("benchtime", "20000x", "go test -benchtime for BenchmarkDecision")
	count := flag.Int("count", 3, "go test -count for BenchmarkDecision")
	trial := flag.Duration("trial", 250*time.Millisecond, "storm trial length")
	rounds := flag.Int("paired", 0, "instead of the full run: this many paired rounds of redis_rate and redisbucket at 64 goroutines (see paired)")
	pin := flag.Bool("pin", false, "with -paired: redis-server on CPU 0, the client on CPU 1 (taskset)")
	against := flag.String("against", "", "with -paired or -callgrind: also redisbucket at this commit (\"old\")")
	cost := flag.Bool("callgrind", false, "instead of the full run: redis-server's instructions per decision under callgrind")
	calls := flag.Int("calls", 10000, "with -callgrind: decisions measured per case")
	table := flag.Bool("costtable", false, "only the -callgrind table, nothing else (for -callgrind -against)")
	flag.Parse()
	log.SetFlags(0)
	if *table {
		redis.SetLogger(quiet{})
		costTable(os.Stdout, *calls)
		return
	}

	dir, err := os.MkdirTemp("", "redisbench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := redistest.Start(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()

	var out bytes.Buffer
	w := io.MultiWriter(os.Stdout, &out)
	provenance.Write(w, runtime.Version(), "cd redisbucket && go run ./internal/cmd/redisbench "+strings.Join(os.Args[1:], " "))
	fmt.Fprintf(w, "redis-server: %s\n", redisVersion())
	fmt.Fprintf(w, "note: client, server and redis-benchmark share the machine's cores; every figure includes that contention\n\n")

	kind := "redis"
	switch {
	case *rounds > 0:
		kind = "redis-paired"
		if *pin {
			kind = "redis-paired-pinned"
		}
		paired(w, srv, *rounds, *pin, *against, *benchtime)
	case *cost:
		kind = "redis-servercost"
		redis.SetLogger(quiet{})
		serverCost(w, *calls, *against)
	default:
		floors(w, srv)
		decisions(w, srv, *benchtime, *count)
		storm(w, srv, *trial)
	}
	fmt.Fprintf(w, "\nloadavg-at-end: %s\n", provenance.LoadAvg())

	if *save != "" {
		commit, _ := provenance.Commit()
		host, _ := os.Hostname()
		name := filepath.Join(*save, fmt.Sprintf("%s-%s-%s-%s.txt", kind, time.Now().UTC().Format("2006-01-02"), host, commit))
		if err := os.WriteFile(name, out.Bytes(), 0o644); err != nil {
			log.Fatal(err)
		}
		log.Printf("wrote %s", name)
	}
}

// floors runs redis-benchmark: PING and EVALSHA of "return 1", with 1 and
// 64 connections, no client-side pipelining, then with -P 16.
func floors(w io.Writer, srv *redistest.Server) {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	sha, err := c.ScriptLoad(context.Background(), "return 1").Result()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintf(w, "## Floor: redis-benchmark on the same server (requests/s, latency in ms)\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "command\tconnections\tpipeline\trequests/s\tp50 ms\tp99 ms\t\n")
	for _, cmd := range [][]string{{"PING"}, {"EVALSHA", sha, "0"}} {
		for _, cp := range [][2]int{{1, 1}, {64, 1}, {64, 16}} {
			args := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(srv.Port), "-n", "100000", "-c", strconv.Itoa(cp[0]), "-P", strconv.Itoa(cp[1]), "--csv"}
			args = append(args, cmd...)
			b, err := exec.Command("redis-benchmark", args...).CombinedOutput()
			if err != nil {
				log.Fatalf("redis-benchmark %v: %v: %s", args, err, b)
			}
			rps, p50, p99 := parseCSV(b)
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t\n", cmd[0], cp[0], cp[1], rps, p50, p99)
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
}

// parseCSV reads redis-benchmark --csv: a header line and one row with
// "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",
// "p95_latency_ms","p99_latency_ms","max_latency_ms".
func parseCSV(b []byte) (rps, p50, p99 string) {
	var rows [][]string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ",")
		for i := range f {
			f[i] = strings.Trim(f[i], `"`)
		}
		rows = append(rows, f)
	}
	if len(rows) < 2 || len(rows[1]) < 7 {
		return "?", "?", "?"
	}
	return rows[1][1], rows[1][4], rows[1][6]
}

// decisions runs BenchmarkDecision against srv and prints the raw output
// and a summary: the median of the runs per case, and the ratio to
// redis_rate's decisions/s in the same case.
func decisions(w io.Writer, srv *redistest.Server, benchtime string, count int) {
	args := []string{"test", "-run", "^$", "-bench", "^BenchmarkDecision$", "-cpu", strconv.Itoa(runtime.NumCPU()),
		"-benchtime", benchtime, "-count", strconv.Itoa(count), "."}
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "REDISBUCKET_ADDR="+srv.Addr)
	b, err := cmd.CombinedOutput()
	if err != nil {
		log.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	fmt.Fprintf(w, "## BenchmarkDecision: go %s (REDISBUCKET_ADDR=the server above)\n\n", strings.Join(args, " "))
	type agg struct{ dps, p50, p99 []float64 }
	cases := map[string]*agg{}
	var order []string
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "BenchmarkDecision/") {
			continue
		}
		fmt.Fprintln(w, line)
		f := strings.Fields(line)
		name := strings.TrimPrefix(f[0], "BenchmarkDecision/")
		if i := strings.LastIndex(name, "-"); i > 0 {
			name = name[:i]
		}
		a := cases[name]
		if a == nil {
			a = &agg{}
			cases[name] = a
			order = append(order, name)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "decisions/s":
				a.dps = append(a.dps, v)
			case "p50-µs":
				a.p50 = append(a.p50, v)
			case "p99-µs":
				a.p99 = append(a.p99, v)
			}
		}
	}
	fmt.Fprintf(w, "\n## Summary: median of %d runs; ratio = decisions/s over redis_rate's in the same keys and goroutines\n\n", count)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "keys\tgoroutines\timpl\tdecisions/s\tp50 µs\tp99 µs\tratio\t\n")
	for _, name := range order {
		a := cases[name]
		parts := strings.Split(name, "/")
		base := parts[0] + "/" + parts[1] + "/impl=redis_rate"
		ratio := "-"
		if r := cases[base]; r != nil && len(r.dps) > 0 {
			ratio = fmt.Sprintf("%.2f×", median(a.dps)/median(r.dps))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%.0f\t%.0f\t%s\t\n", strings.TrimPrefix(parts[0], "keys="), strings.TrimPrefix(parts[1], "goroutines="),
			strings.TrimPrefix(parts[2], "impl="), median(a.dps), median(a.p50), median(a.p99), ratio)
	}
	tw.Flush()
	fmt.Fprintln(w)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// storm: goroutines call AllowN(key, 1) on one key of a full limiter for a
// trial; admitted against capacity + rate × elapsed, elapsed from TIME
// before the first call to TIME after the last (plus rate × age with
// batching). Worst excess of three trials.
func storm(w io.Writer, srv *redistest.Server, trial time.Duration) {
	fmt.Fprintf(w, "## Storm: AllowN(key, 1) from many goroutines on a new key, %v per trial, worst of 3; elapsed on the server's clock\n\n", trial)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "impl\tgoroutines\tcapacity\trate/s\telapsed\tadmitted\tbound\texcess\tover\t\n")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 64})
	defer c.Close()
	const age = 10 * time.Millisecond
	run := 0
	for _, impl := range []string{"redisbucket", "redisbucket-batch"} {
		for _, cr := range []struct {
			capacity int64
			rate     float64
		}{{10, 1e5}, {1, 1000}, {1000, 1e6}} {
			for _, g := range []int{2, 8, 64} {
				var worst struct {
					elapsed       time.Duration
					admitted      int64
					bound, excess float64
				}
				worst.excess = math.Inf(-1)
				over := 0
				for range 3 {
					run++
					opts := []redisbucket.Option{redisbucket.WithPrefix(fmt.Sprintf("storm:%d:", run)), redisbucket.WithTimeout(time.Second)}
					extra := 0.0
					if impl == "redisbucket-batch" {
						opts = append(opts, redisbucket.WithBatch(100, age))
						extra = cr.rate * age.Seconds()
					}
					l, err := redisbucket.New(c, cr.capacity, cr.rate, opts...)
					if err != nil {
						log.Fatal(err)
					}
					t0 := serverTime(c)
					var admitted atomic.Int64
					var failed atomic.Int64
					var wg sync.WaitGroup
					end := time.Now().Add(trial)
					for range g {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for time.Now().Before(end) {
								d, err := l.AllowN(context.Background(), "k", 1)
								if err != nil {
									failed.Add(1)
								} else if d.Allowed {
									admitted.Add(1)
								}
							}
						}()
					}
					wg.Wait()
					t1 := serverTime(c)
					if failed.Load() > 0 {
						log.Fatalf("storm: %d decisions failed", failed.Load())
					}
					el := time.Duration(t1-t0) * time.Microsecond
					bound := float64(cr.capacity) + cr.rate*el.Seconds() + extra
					ex := float64(admitted.Load()) - bound
					if ex > 0 {
						over++
					}
					if ex > worst.excess {
						worst.elapsed, worst.admitted, worst.bound, worst.excess = el, admitted.Load(), bound, ex
					}
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%g\t%v\t%d\t%.0f\t%+.0f\t%d/3\t\n", impl, g, cr.capacity, cr.rate,
					worst.elapsed.Round(time.Millisecond), worst.admitted, worst.bound, worst.excess, over)
			}
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "\nbound = capacity + rate × elapsed, plus rate × %v (the lease age) for redisbucket-batch\n", age)
}

func serverTime(c *redis.Client) int64 {
	t, err := c.Time(context.Background()).Result()
	if err != nil {
		log.Fatal(err)
	}
	return t.UnixMicro()
}

func redisVersion() string {
	b, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}
