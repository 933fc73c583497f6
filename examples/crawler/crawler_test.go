package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/keyed"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// checkPoliteness checks, from the servers' own arrival times, that no host
// received more than capacity + rate × (t_j − t_i) + 1 requests in any
// window [t_i, t_j] (the +1 is the limiter contract's rounding unit; a
// request's arrival lags its admission by the loopback delay, which could
// only matter if it varied by more than 1/rate).
func checkPoliteness(t *testing.T, hits map[string][]time.Time, capacity int64, rate float64) {
	t.Helper()
	for host, ts := range hits {
		for i := range ts {
			for j := i; j < len(ts); j++ {
				n := float64(j - i + 1)
				if bound := float64(capacity) + rate*ts[j].Sub(ts[i]).Seconds() + 1; n > bound {
					t.Errorf("%s received %d requests in %v, more than capacity %d + rate %g × elapsed + 1 = %.2f",
						host, j-i+1, ts[j].Sub(ts[i]), capacity, rate, bound)
				}
			}
		}
	}
}

func TestCrawlIsPolite(t *testing.T) {
	o := Options{Hosts: 3, Pages: 10, Rate: 10, Burst: 3, Workers: 4, Queue: 64}
	var out bytes.Buffer
	site, st, err := run(context.Background(), o, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	hits := site.Hits()
	checkPoliteness(t, hits, o.Burst, o.Rate)
	if len(hits) != o.Hosts {
		t.Fatalf("%d hosts were visited, want %d", len(hits), o.Hosts)
	}
	// The queue had room for everything: every page once, no more.
	for _, srv := range site.Servers {
		host := strings.TrimPrefix(srv.URL, "http://")
		if got := len(hits[host]); got != o.Pages {
			t.Errorf("%s served %d requests, want each of its %d pages once", host, got, o.Pages)
		}
		if st.Fetched[host] != len(hits[host]) {
			t.Errorf("%s: the crawler counted %d fetches, the server %d", host, st.Fetched[host], len(hits[host]))
		}
	}
	if st.Deferred != 0 || st.Errors != 0 {
		t.Errorf("deferred %d, errors %d; want none", st.Deferred, st.Errors)
	}
	if st.Waited == 0 {
		t.Error("no worker ever waited for a token: the limit was never reached, so the test checked nothing")
	}
	for _, want := range []string{"achieved/s", "limit/s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestCrawlBackPressure: with a queue of 3, discovery outruns fetching;
// workers wait for room rather than the queue growing, the crawl ends with
// every page fetched, and every host is still polite.
func TestCrawlBackPressure(t *testing.T) {
	o := Options{Hosts: 3, Pages: 8, Rate: 20, Burst: 2, Workers: 3, Queue: 3}
	var out bytes.Buffer
	site, st, err := run(context.Background(), o, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	checkPoliteness(t, site.Hits(), o.Burst, o.Rate)
	if st.MaxQueued > o.Queue {
		t.Fatalf("queue held %d URLs, bound %d", st.MaxQueued, o.Queue)
	}
	// Discovery (up to two new links per page, at once) outruns fetching
	// (20 pages/s per host), so offers must find the queue full: they wait
	// (Blocked), or are set aside when every worker would wait.
	if st.Blocked+st.Deferred == 0 {
		t.Fatal("no offer ever found the queue full: back-pressure was not exercised")
	}
	total := 0
	for _, n := range st.Fetched {
		total += n
	}
	if total != o.Hosts*o.Pages || st.Errors != 0 {
		t.Fatalf("fetched %d pages, %d errors; want all %d, none", total, st.Errors, o.Hosts*o.Pages)
	}
}

func TestCrawlCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	if _, _, err := run(ctx, Options{Hosts: 2, Pages: 5, Rate: 1, Burst: 1, Workers: 2, Queue: 4}, &out); err != nil {
		t.Fatal(err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{{0, 1, 1}, {1, 0, 1}, {1, 1, 0}} {
		if _, err := New(nil, nil, cfg, nil); err == nil {
			t.Errorf("New with %+v: no error", cfg)
		}
	}
	if _, err := New(nil, nil, Config{1, 1, 1}, []string{"/relative"}); err == nil {
		t.Error("relative seed accepted")
	}
	if _, err := New(nil, nil, Config{1, 1, 1}, []string{"http://a/", "http://b/"}); err == nil {
		t.Error("two seeds accepted into a queue of 1")
	}
}

// counting is a keyed limiter that records, per key, the tokens it gave.
type counting struct {
	admit.KeyedLimiter
	mu    sync.Mutex
	given map[string]int
}

func (c *counting) AllowN(ctx context.Context, key string, n int64) (admit.Decision, error) {
	d, err := c.KeyedLimiter.AllowN(ctx, key, n)
	if err == nil && d.Allowed {
		c.mu.Lock()
		c.given[key] += int(n)
		c.mu.Unlock()
	}
	return d, err
}

// TestCrawlRedirects: each redirect hop is a request of its own, under the
// host's limiter and the host restriction. Host A's first page links to a
// chain of two redirects ending at a page, to a redirect to an off-seed host
// C, and to a redirect to itself; host B's first page redirects to that same
// page of A. Every request a host receives took a token of that host's
// bucket, C receives nothing, each URL is fetched once, and nothing fails.
func TestCrawlRedirects(t *testing.T) {
	var mu sync.Mutex
	hits := map[string][]time.Time{}
	paths := map[string][]string{}
	record := func(r *http.Request) {
		mu.Lock()
		hits[r.Host] = append(hits[r.Host], time.Now())
		paths[r.Host] = append(paths[r.Host], r.URL.Path)
		mu.Unlock()
	}
	offSeed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		record(r)
		io.WriteString(w, `<a href="/y">more</a>`)
	}))
	defer offSeed.Close()
	a := httptest.NewUnstartedServer(nil)
	a.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		record(r)
		switch r.URL.Path {
		case "/p0":
			io.WriteString(w, `<a href="/r1">r1</a> <a href="/off">off</a> <a href="/loop">loop</a>`)
		case "/r1":
			http.Redirect(w, r, "/r2", http.StatusFound)
		case "/r2":
			http.Redirect(w, r, "p1", http.StatusTemporaryRedirect) // relative to /r2
		case "/p1":
			io.WriteString(w, `<a href="/p0">home</a>`)
		case "/off":
			http.Redirect(w, r, offSeed.URL+"/x", http.StatusFound)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusMovedPermanently)
		default:
			http.NotFound(w, r)
		}
	})
	a.Start()
	defer a.Close()
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		record(r)
		http.Redirect(w, r, a.URL+"/p1", http.StatusPermanentRedirect)
	}))
	defer b.Close()

	const capacity, rate = 1, 50
	kl, err := keyed.New(capacity, rate)
	if err != nil {
		t.Fatal(err)
	}
	l := &counting{KeyedLimiter: kl, given: map[string]int{}}
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	c, err := New(l, client, Config{Workers: 3, Queue: 16, MaxBody: 1 << 16}, []string{a.URL + "/p0", b.URL + "/p0"})
	if err != nil {
		t.Fatal(err)
	}
	st := c.Run(context.Background())

	hostA, hostB, hostC := strings.TrimPrefix(a.URL, "http://"), strings.TrimPrefix(b.URL, "http://"), strings.TrimPrefix(offSeed.URL, "http://")
	mu.Lock()
	defer mu.Unlock()
	if len(paths[hostC]) != 0 {
		t.Errorf("the off-seed host received %v", paths[hostC])
	}
	for host, want := range map[string][]string{hostA: {"/loop", "/off", "/p0", "/p1", "/r1", "/r2"}, hostB: {"/p0"}} {
		got := slices.Sorted(slices.Values(paths[host]))
		if !slices.Equal(got, want) {
			t.Errorf("%s received %v, want each of %v once", host, got, want)
		}
	}
	for host, ts := range hits {
		if l.given[host] != len(ts) || st.Fetched[host] != len(ts) {
			t.Errorf("%s received %d requests for %d tokens (%d fetches counted)", host, len(ts), l.given[host], st.Fetched[host])
		}
	}
	checkPoliteness(t, hits, capacity, rate)
	if st.Redirects != 5 || st.Errors != 0 {
		t.Errorf("%d redirects, %d errors; want 5 and none", st.Redirects, st.Errors)
	}
}

// TestCrawlComplete: Run returns only once every reachable page is
// fetched, however small the queue. One worker and a queue of one: the
// first page links to three leaves that nothing else links to, so two of
// them find the queue full while the only worker, the one offering them,
// could never drain it; set aside, they must still be fetched, each once.
func TestCrawlComplete(t *testing.T) {
	var mu sync.Mutex
	paths := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths[r.URL.Path]++
		mu.Unlock()
		if r.URL.Path == "/" {
			io.WriteString(w, `<a href="/a">a</a> <a href="/b">b</a> <a href="/c">c</a>`)
		}
	}))
	defer srv.Close()
	l, err := keyed.New(100, 1000)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	c, err := New(l, client, Config{Workers: 1, Queue: 1, MaxBody: 1 << 16}, []string{srv.URL + "/"})
	if err != nil {
		t.Fatal(err)
	}
	st := c.Run(context.Background())
	mu.Lock()
	defer mu.Unlock()
	for _, p := range []string{"/", "/a", "/b", "/c"} {
		if paths[p] != 1 {
			t.Errorf("%s fetched %d times; want once (all: %v)", p, paths[p], paths)
		}
	}
	if st.Deferred != 2 || st.Errors != 0 {
		t.Errorf("deferred %d, errors %d; want 2 and none", st.Deferred, st.Errors)
	}
}

// TestCrawlCompleteSite: on the synthetic site, with queues far smaller
// than the site and few workers, every page of every host is fetched
// exactly once. (The rate is high to keep the test short; politeness,
// which the servers' arrival times can show only when 1/rate is well above
// the loopback's jitter, is the other tests' subject.)
func TestCrawlCompleteSite(t *testing.T) {
	for _, o := range []Options{
		{Hosts: 3, Pages: 40, Rate: 2000, Burst: 5, Workers: 1, Queue: 3},
		{Hosts: 3, Pages: 40, Rate: 2000, Burst: 5, Workers: 2, Queue: 3},
		{Hosts: 4, Pages: 30, Rate: 2000, Burst: 5, Workers: 4, Queue: 4},
	} {
		var out bytes.Buffer
		site, st, err := run(context.Background(), o, &out)
		if err != nil {
			t.Fatal(err)
		}
		hits := site.Hits()
		for _, srv := range site.Servers {
			host := strings.TrimPrefix(srv.URL, "http://")
			if got := len(hits[host]); got != o.Pages {
				t.Errorf("%+v: %s served %d requests; want each of its %d pages once\n%s", o, host, got, o.Pages, out.String())
			}
		}
		if st.MaxQueued > o.Queue || st.Errors != 0 {
			t.Errorf("%+v: queue held %d, bound %d; %d errors", o, st.MaxQueued, o.Queue, st.Errors)
		}
	}
}

// down is a limiter whose shared backend is down: every call answers
// its failure policy's Decision with an error wrapping admit.ErrUnavailable
// (and the policy's own error, if any), as redisbucket does while Redis is
// unreachable.
type down struct {
	d      admit.Decision
	policy error // the failure policy's own error, or nil
}

func (l down) AllowN(context.Context, string, int64) (admit.Decision, error) {
	if l.policy != nil {
		return l.d, fmt.Errorf("%w: backend down (fallback: %w)", admit.ErrUnavailable, l.policy)
	}
	return l.d, fmt.Errorf("%w: backend down", admit.ErrUnavailable)
}

// TestCrawlBackendDown: a failure policy's decision is followed. Its
// admission (redisbucket.WithFailOpen) fetches at once; a refusal no wait
// can change (a fallback that finds the cost above its capacity) is a
// failed fetch at once. The crawler used to discard any decision that came
// with an error and retry every millisecond until its context ended.
func TestCrawlBackendDown(t *testing.T) {
	for _, c := range []struct {
		name                   string
		l                      down
		fetched, errors, waits int
	}{
		{"fail open", down{d: admit.Decision{Allowed: true, Limit: 1}}, 1, 0, 0},
		{"refused for good", down{policy: admit.ErrUnsatisfiable}, 0, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "leaf") }))
			defer srv.Close()
			cr, err := New(c.l, srv.Client(), Config{Workers: 1, Queue: 4, MaxBody: 1 << 10}, []string{srv.URL + "/"})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st := cr.Run(ctx)
			if got := st.Fetched[srv.Listener.Addr().String()]; ctx.Err() != nil || got != c.fetched || st.Errors != c.errors || st.Waited != int64(c.waits) {
				t.Fatalf("context ended: %v; fetched %d, %d errors, %d waits; want %d, %d, %d, at once",
					ctx.Err(), got, st.Errors, st.Waited, c.fetched, c.errors, c.waits)
			}
		})
	}
}
