// Command crawler is a polite web crawler: it never sends a host more than
// capacity + rate × elapsed requests (a per-host token bucket from package
// keyed, keyed by host:port; a redirect is a request like any other), keeps a bounded number of fetches in flight,
// and feeds them from a bounded queue that pushes back on discovery instead
// of growing. It crawls a synthetic site of several loopback httptest hosts
// whose pages link to each other, and prints each host's achieved request
// rate beside its limit.
//
//	go run ./examples/crawler [-hosts 3] [-pages 15] [-rate 20] [-burst 3] [-workers 4] [-queue 8]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/admit-go/admit/keyed"
)

// Site is a set of loopback hosts serving linked pages, recording the time
// of every request each host receives.
type Site struct {
	Servers []*httptest.Server
	mu      sync.Mutex
	hits    map[string][]time.Time // by host:port, in arrival order
	pages   int
}

// NewSite starts hosts httptest servers of pages pages each. Page i of host
// h links to page i+1 of the same host (relative), to page (3i+h) mod pages
// of the next host (absolute) and back to the first page: every page is
// reachable from any host's first page, and links repeat, so the crawler
// must deduplicate.
func NewSite(hosts, pages int) *Site {
	s := &Site{hits: map[string][]time.Time{}, pages: pages}
	for range hosts {
		s.Servers = append(s.Servers, httptest.NewUnstartedServer(nil))
	}
	for h, srv := range s.Servers {
		srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.mu.Lock()
			s.hits[r.Host] = append(s.hits[r.Host], time.Now())
			s.mu.Unlock()
			var i int
			if _, err := fmt.Sscanf(r.URL.Path, "/p%d", &i); err != nil || i < 0 || i >= pages {
				http.NotFound(w, r)
				return
			}
			next := s.Servers[(h+1)%len(s.Servers)].URL
			fmt.Fprintf(w, `<html><body><h1>host %d page %d</h1>`, h, i)
			if i+1 < pages {
				fmt.Fprintf(w, `<a href="p%d">next</a> `, i+1)
			}
			fmt.Fprintf(w, `<a href="%s/p%d">elsewhere</a> <a href="/p0#top">home</a></body></html>`, next, (3*i+h)%pages)
		})
		srv.Start()
	}
	return s
}

// Hits returns each host's request arrival times, by host:port.
func (s *Site) Hits() map[string][]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]time.Time{}
	for h, ts := range s.hits {
		out[h] = slices.Clone(ts)
	}
	return out
}

// Seeds returns each host's first page.
func (s *Site) Seeds() []string {
	var seeds []string
	for _, srv := range s.Servers {
		seeds = append(seeds, srv.URL+"/p0")
	}
	return seeds
}

// Close stops every host.
func (s *Site) Close() {
	for _, srv := range s.Servers {
		srv.Close()
	}
}

// Options are the command's flags.
type Options struct {
	Hosts, Pages   int
	Rate           float64
	Burst          int64
	Workers, Queue int
}

// run crawls a fresh synthetic site and prints the per-host table to out.
// It returns the site (closed) for inspection, and the crawl's stats.
func run(ctx context.Context, o Options, out io.Writer) (*Site, Stats, error) {
	site := NewSite(o.Hosts, o.Pages)
	defer site.Close()
	l, err := keyed.New(o.Burst, o.Rate)
	if err != nil {
		return nil, Stats{}, err
	}
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	c, err := New(l, client, Config{Workers: o.Workers, Queue: o.Queue, MaxBody: 1 << 20}, site.Seeds())
	if err != nil {
		return nil, Stats{}, err
	}
	start := time.Now()
	st := c.Run(ctx)
	elapsed := time.Since(start)

	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "host\trequests\tspan\tachieved/s\tafter burst/s\tlimit/s\tburst\t\n")
	hosts := make([]string, 0, len(st.Fetched))
	for h := range st.Fetched {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	for _, h := range hosts {
		n := st.Fetched[h]
		span := st.Last[h].Sub(st.First[h])
		achieved, steady := "-", "-"
		if span > 0 {
			achieved = fmt.Sprintf("%.1f", float64(n)/span.Seconds())
			// The burst is spent at once; the rest arrive at the rate.
			steady = fmt.Sprintf("%.1f", float64(max(int64(n)-o.Burst, 0))/span.Seconds())
		}
		fmt.Fprintf(tw, "%s\t%d\t%v\t%s\t%s\t%g\t%d\t\n", h, n, span.Round(time.Millisecond), achieved, steady, o.Rate, o.Burst)
	}
	tw.Flush()
	fmt.Fprintf(out, "%d workers, queue %d: %v; waited for a token %d times, for queue room %d times (max queued %d), set aside %d links (all fetched later), %d redirects, %d errors\n",
		o.Workers, o.Queue, elapsed.Round(time.Millisecond), st.Waited, st.Blocked, st.MaxQueued, st.Deferred, st.Redirects, st.Errors)
	return site, st, nil
}

func main() {
	var o Options
	flag.IntVar(&o.Hosts, "hosts", 3, "synthetic hosts")
	flag.IntVar(&o.Pages, "pages", 15, "pages per host")
	flag.Float64Var(&o.Rate, "rate", 20, "requests per second per host")
	flag.Int64Var(&o.Burst, "burst", 3, "requests a host may receive at once")
	flag.IntVar(&o.Workers, "workers", 4, "fetches in flight at most")
	flag.IntVar(&o.Queue, "queue", 8, "queued URLs at most")
	flag.Parse()
	if _, _, err := run(context.Background(), o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, strings.TrimSpace(err.Error()))
		os.Exit(1)
	}
}
