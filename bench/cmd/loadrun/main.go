// Command loadrun drives a real net/http server on 127.0.0.1 with a real
// load generator (tsenart/vegeta, as a library) and reports requests per
// second and latency percentiles with and without each rate-limiting
// middleware of bench.MiddlewareImpls (none is the server without one).
//
// Every middleware gets a quota no run can spend, so every request is
// admitted and the difference from none is the middleware's cost as a
// client sees it. Each implementation runs two attacks on a fresh server:
//
//   - fixed: -rate requests per second for -duration; the latency
//     percentiles at a load the machine sustains;
//   - max: as fast as -workers concurrent keep-alive clients can go, for
//     -duration; the throughput, with its (queueing) latencies.
//
// The load generator and the server share the machine's cores, so on a
// small machine the numbers bound the middleware's cost from above rather
// than isolate it; BenchmarkMiddleware isolates it. Run from the bench
// directory:
//
//	go run ./cmd/loadrun [-duration 3s] [-rate 2000] [-workers 16] [-rounds 1] [-save ../results]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/admit-go/admit/bench"
	"github.com/admit-go/admit/internal/provenance"
)

func main() {
	duration := flag.Duration("duration", 3*time.Second, "length of each attack")
	rate := flag.Int("rate", 2000, "requests per second of the fixed-rate attack")
	workers := flag.Uint64("workers", 16, "concurrent clients of the max-rate attack")
	rounds := flag.Int("rounds", 1, "times to repeat every attack, implementations interleaved")
	save := flag.String("save", "", "also write the output to <save>/loadrun-<YYYY-MM-DD>.txt")
	flag.Parse()

	var out io.Writer = os.Stdout
	if *save != "" {
		check(os.MkdirAll(*save, 0o755))
		path := filepath.Join(*save, "loadrun-"+time.Now().Format("2006-01-02")+".txt")
		f, err := os.Create(path)
		check(err)
		defer func() {
			check(f.Close())
			fmt.Fprintln(os.Stderr, "loadrun: wrote", path)
		}()
		out = io.MultiWriter(os.Stdout, f)
	}
	provenance.Write(out, fmt.Sprintf("%s %s/%s", runtime.Version(), runtime.GOOS, runtime.GOARCH),
		"cd bench && go run ./cmd/loadrun "+strings.Join(os.Args[1:], " "))
	fmt.Fprintf(out, "gomaxprocs: %d (server and load generator in one process)\n\n", runtime.GOMAXPROCS(0))

	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "attack\timpl\tround\trequests\tsent/s\tok/s\tsuccess\tp50\tp90\tp99\tmax\t\n")
	for round := 1; round <= *rounds; round++ {
		for _, mode := range []string{"fixed", "max"} {
			for _, impl := range bench.MiddlewareImpls {
				m, err := attack(impl, mode, *rate, *workers, *duration)
				check(err)
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.0f\t%.0f\t%.1f%%\t%v\t%v\t%v\t%v\t\n", mode, impl.Name, round,
					m.Requests, m.Rate, m.Throughput, 100*m.Success,
					rnd(m.Latencies.P50), rnd(m.Latencies.P90), rnd(m.Latencies.P99), rnd(m.Latencies.Max))
			}
		}
	}
	check(tw.Flush())
}

func rnd(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return d.Round(time.Microsecond)
	}
	return d.Round(10 * time.Microsecond)
}

// attack serves impl on a fresh loopback server and attacks it once.
func attack(impl bench.MiddlewareImpl, mode string, rate int, workers uint64, d time.Duration) (*vegeta.Metrics, error) {
	h, err := impl.New(true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	}))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "loadrun: serve:", err)
		}
	}()

	target := vegeta.Target{Method: http.MethodGet, URL: "http://" + ln.Addr().String() + "/"}
	opts := []func(*vegeta.Attacker){vegeta.KeepAlive(true), vegeta.Timeout(10 * time.Second)}
	var pacer vegeta.Pacer = vegeta.Rate{Freq: rate, Per: time.Second}
	if mode == "max" {
		pacer = vegeta.Rate{Freq: 0} // as fast as the workers go
		opts = append(opts, vegeta.Workers(workers), vegeta.MaxWorkers(workers), vegeta.Connections(int(workers)))
	}
	a := vegeta.NewAttacker(opts...)
	var m vegeta.Metrics
	for res := range a.Attack(vegeta.NewStaticTargeter(target), pacer, d, impl.Name) {
		m.Add(res)
	}
	m.Close()
	if m.StatusCodes["200"] != int(m.Requests) {
		return nil, fmt.Errorf("%s %s: status codes %v, errors %v: every request should be admitted", mode, impl.Name, m.StatusCodes, m.Errors)
	}
	return &m, nil
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadrun:", err)
		os.Exit(1)
	}
}
