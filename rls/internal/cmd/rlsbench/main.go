// Command rlsbench is a gRPC load generator for rate limit services (RLS
// v3): it measures decisions per second and latency percentiles at given
// numbers of concurrent streams, and, in accuracy mode, the most requests
// one descriptor admitted within any window of given lengths; in raise
// mode, the time until a drained client is admitted after a reload raises
// its limit. It is how admit-rls and envoyproxy/ratelimit were compared
// side by side.
//
//	rlsbench -addr 127.0.0.1:8081 -streams 1,16,64 -d 5s
//	rlsbench -addr 127.0.0.1:8081 -accuracy -streams 16 -d 3s -windows 100ms,1s -boundary 50ms
//	rlsbench -addr 127.0.0.1:8081 -raise /path/to/config/raise.yaml -rounds 5
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "gRPC address of the service")
	streams := flag.String("streams", "1,16,64", "concurrent streams, comma-separated")
	d := flag.Duration("d", 5*time.Second, "duration of each run")
	domain := flag.String("domain", "bench", "domain")
	key := flag.String("key", "client", "descriptor key")
	values := flag.Int("values", 1000, "distinct descriptor values, taken in turn (throughput mode)")
	accuracy := flag.Bool("accuracy", false, "accuracy mode: one value, admissions per window")
	windows := flag.String("windows", "100ms,1s", "accuracy windows, comma-separated")
	label := flag.String("label", "", "label printed on every line")
	lead := flag.Duration("boundary", 0, "accuracy mode: start this long before a whole second of the wall clock, so that a burst from an idle client crosses a unit boundary")
	raise := flag.String("raise", "", "raise mode: the configuration file to write (domain raise, key client), in the service's configuration directory")
	rounds := flag.Int("rounds", 5, "raise mode: rounds")
	flag.Parse()
	if *raise != "" {
		if err := raiseRounds(*addr, *raise, *label, *rounds); err != nil {
			fmt.Fprintln(os.Stderr, "rlsbench:", err)
			os.Exit(1)
		}
		return
	}
	if *accuracy && *lead > 0 {
		now := time.Now()
		next := now.Truncate(time.Second).Add(time.Second)
		if next.Sub(now) < *lead {
			next = next.Add(time.Second)
		}
		time.Sleep(time.Until(next.Add(-*lead)))
	}
	if err := run(*addr, *streams, *d, *domain, *key, *values, *accuracy, *windows, *label); err != nil {
		fmt.Fprintln(os.Stderr, "rlsbench:", err)
		os.Exit(1)
	}
}

func run(addr, streams string, d time.Duration, domain, key string, values int, accuracy bool, windows, label string) error {
	var conns []*grpc.ClientConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 4 {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	for _, s := range strings.Split(streams, ",") {
		n, err := strconv.Atoi(s)
		if err != nil {
			return err
		}
		r := load(conns, n, d, domain, key, values, accuracy)
		if !accuracy {
			fmt.Printf("%s streams=%d decisions=%d per_sec=%.0f p50=%v p99=%v ok=%d over=%d errors=%d\n", label, n,
				r.n, float64(r.n)/d.Seconds(), pct(r.lat, 50), pct(r.lat, 99), r.ok, r.over, r.errs)
			continue
		}
		fmt.Printf("%s streams=%d decisions=%d admitted=%d over %v errors=%d", label, n, r.n, r.ok, d, r.errs)
		for _, w := range strings.Split(windows, ",") {
			wd, err := time.ParseDuration(w)
			if err != nil {
				return err
			}
			fmt.Printf(" max_in_%v=%d", wd, maxWithin(r.admits, wd))
		}
		fmt.Println()
	}
	return nil
}

type result struct {
	n, ok, over, errs int
	lat               []time.Duration
	admits            []time.Duration // receive time since start, of each admitted request
}

func load(conns []*grpc.ClientConn, streams int, d time.Duration, domain, key string, values int, accuracy bool) result {
	var mu sync.Mutex
	var total result
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	for g := range streams {
		wg.Go(func() {
			c := pb.NewRateLimitServiceClient(conns[g%len(conns)])
			var r result
			for i := g; time.Now().Before(end); i += streams {
				v := "hot"
				if !accuracy {
					v = strconv.Itoa(i % values)
				}
				req := &pb.RateLimitRequest{Domain: domain, Descriptors: []*common.RateLimitDescriptor{{
					Entries: []*common.RateLimitDescriptor_Entry{{Key: key, Value: v}},
				}}}
				t0 := time.Now()
				resp, err := c.ShouldRateLimit(context.Background(), req)
				t1 := time.Now()
				r.n++
				r.lat = append(r.lat, t1.Sub(t0))
				switch {
				case err != nil:
					r.errs++
				case resp.OverallCode == pb.RateLimitResponse_OK:
					r.ok++
					r.admits = append(r.admits, t1.Sub(start))
				default:
					r.over++
				}
			}
			mu.Lock()
			total.n += r.n
			total.ok += r.ok
			total.over += r.over
			total.errs += r.errs
			total.lat = append(total.lat, r.lat...)
			total.admits = append(total.admits, r.admits...)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(total.lat)
	slices.Sort(total.admits)
	return total
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, len(sorted)*p/100)].Round(time.Microsecond)
}

// maxWithin is the most admissions whose times lie within one window of
// length w (sorted times, two pointers).
func maxWithin(ts []time.Duration, w time.Duration) int {
	best, lo := 0, 0
	for hi := range ts {
		for ts[hi]-ts[lo] > w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}
