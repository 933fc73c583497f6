package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/admit-go/admit"
)

// Config is what a crawl is allowed to do.
type Config struct {
	Workers int   // fetches in flight at most
	Queue   int   // URLs waiting to be fetched at most
	MaxBody int64 // bytes read from a page at most
}

// Stats is what a crawl did.
type Stats struct {
	Fetched   map[string]int // requests per host
	First     map[string]time.Time
	Last      map[string]time.Time
	Errors    int   // fetches that failed
	Redirects int   // redirects received; each Location was offered as a link
	Waited    int64 // times a worker waited for its host's bucket
	Blocked   int64 // times a worker waited for room in the queue (back-pressure)
	Deferred  int64 // links set aside because waiting for room would have deadlocked; each is queued later
	MaxQueued int   // the most URLs queued at once
}

// Crawler fetches pages no faster than a per-host token bucket allows.
//
// The design, in three parts:
//
//   - Politeness: before each request the worker takes one token from the
//     host's bucket in a keyed limiter (key = host:port). If the bucket is
//     empty it sleeps for the Decision's RetryAfter, the exact time until a
//     token exists, and asks again: no polling, and no host ever receives
//     more than capacity + rate × elapsed requests.
//   - Every request asks: the HTTP client follows no redirect. A redirect's
//     Location is offered like a link found on the page, so it is
//     deduplicated, kept to the seeds' hosts, queued, and fetched with a
//     token of its own host's bucket. (A client that followed redirects
//     would send a host several requests per token, and visit hosts outside
//     the seeds.)
//   - Bounded concurrency: Workers goroutines, no more, take URLs from the
//     queue.
//   - Back-pressure: the queue is a channel of Queue URLs. A worker that
//     finds it full waits for room, so discovery slows to the pace at which
//     fetches drain the queue instead of the queue growing. A crawl graph
//     branches, so if every worker waited at once nobody would drain it:
//     the last worker that would wait sets the link aside instead (counted
//     in Stats.Deferred), and every worker that finishes a fetch moves set
//     aside links into the queue while it has room. Nothing found is lost:
//     Run returns once every reachable page is fetched (or ctx ends). The
//     seen set, one entry per distinct URL, is the one structure that grows
//     with the site; the links set aside are a part of it (their strings
//     are the seen set's), never more entries than it has.
type Crawler struct {
	limiter admit.KeyedLimiter
	client  *http.Client
	cfg     Config
	allowed map[string]bool // hosts the crawl may visit

	queue chan string
	// outstanding counts the URLs queued, set aside, being offered or
	// being fetched: it reaches 0 only when every URL found is fetched.
	outstanding atomic.Int64
	waiting     atomic.Int64 // workers blocked on a full queue
	done        chan struct{}
	doneOnce    sync.Once

	mu    sync.Mutex
	seen  map[string]bool
	aside []string // set aside for want of room, oldest first; all in seen
	stats Stats
}

// New returns a crawler limited per host by l that visits only the hosts of
// seeds. It sends its requests through a copy of client (nil means a zero
// http.Client) that follows no redirect, whatever client.CheckRedirect says.
func New(l admit.KeyedLimiter, client *http.Client, cfg Config, seeds []string) (*Crawler, error) {
	if cfg.Workers < 1 || cfg.Queue < 1 || cfg.MaxBody < 1 {
		return nil, fmt.Errorf("crawler: Workers %d, Queue %d and MaxBody %d must be at least 1", cfg.Workers, cfg.Queue, cfg.MaxBody)
	}
	own := &http.Client{}
	if client != nil {
		*own = *client // a shallow copy: the Transport and its connections are shared
	}
	own.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c := &Crawler{
		limiter: l, client: own, cfg: cfg, allowed: map[string]bool{},
		queue: make(chan string, cfg.Queue), done: make(chan struct{}), seen: map[string]bool{},
		stats: Stats{Fetched: map[string]int{}, First: map[string]time.Time{}, Last: map[string]time.Time{}},
	}
	for _, s := range seeds {
		u, err := url.Parse(s)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("crawler: seed %q is not an absolute URL", s)
		}
		c.allowed[u.Host] = true
	}
	if len(seeds) > cfg.Queue {
		return nil, fmt.Errorf("crawler: %d seeds do not fit a queue of %d", len(seeds), cfg.Queue)
	}
	for _, s := range seeds {
		c.offer(context.Background(), s, false)
	}
	return c, nil
}

// Run crawls until every reachable page is fetched or ctx ends, each page
// once.
func (c *Crawler) Run(ctx context.Context) Stats {
	if c.outstanding.Load() == 0 {
		c.finish()
	}
	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Go(func() { c.work(ctx) })
	}
	wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

func (c *Crawler) finish() { c.doneOnce.Do(func() { close(c.done) }) }

func (c *Crawler) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.done:
			return
		case u := <-c.queue:
			c.fetch(ctx, u)
			c.requeue()
			if c.outstanding.Add(-1) == 0 {
				c.finish()
			}
		}
	}
}

// offer queues u unless it was seen or leaves the allowed hosts. canWait
// is false for the seeds, which New has made room for.
func (c *Crawler) offer(ctx context.Context, raw string, canWait bool) {
	u, err := url.Parse(raw)
	if err != nil || !c.allowed[u.Host] || (u.Scheme != "http" && u.Scheme != "https") {
		return
	}
	u.Fragment = ""
	s := u.String()
	c.mu.Lock()
	if c.seen[s] {
		c.mu.Unlock()
		return
	}
	c.seen[s] = true
	c.mu.Unlock()

	c.outstanding.Add(1)
	select {
	case c.queue <- s:
		c.noteQueued()
		return
	default:
	}
	// Full. Wait for room unless every other worker is already waiting:
	// then nobody would drain the queue, and waiting would deadlock.
	if !canWait || c.waiting.Add(1) == int64(c.cfg.Workers) {
		if canWait {
			c.waiting.Add(-1)
		}
		c.setAside(s)
		return
	}
	defer c.waiting.Add(-1)
	c.mu.Lock()
	c.stats.Blocked++
	c.mu.Unlock()
	select {
	case c.queue <- s:
		c.noteQueued()
	case <-ctx.Done():
		c.setAside(s) // the crawl is over; Run returns without it
	}
}

// setAside keeps s, still outstanding, until a worker finds room for it.
// The worker offering it is in the middle of a fetch, after which it runs
// requeue: a link set aside always has a requeue coming. requeue leaves
// links aside only when the queue is full, and a worker that takes from a
// full queue runs requeue after its fetch, so every link set aside is
// queued in the end.
func (c *Crawler) setAside(s string) {
	c.mu.Lock()
	c.stats.Deferred++
	c.aside = append(c.aside, s)
	c.mu.Unlock()
}

// requeue moves links set aside into the queue, oldest first, while it has
// room; it never blocks.
func (c *Crawler) requeue() {
	c.mu.Lock()
	defer c.mu.Unlock()
	moved := 0
	for _, s := range c.aside {
		select {
		case c.queue <- s:
			moved++
			c.stats.MaxQueued = max(c.stats.MaxQueued, len(c.queue))
			continue
		default:
		}
		break
	}
	c.aside = c.aside[moved:]
	if len(c.aside) == 0 {
		c.aside = nil // let the backing array go
	}
}

func (c *Crawler) noteQueued() {
	n := len(c.queue)
	c.mu.Lock()
	c.stats.MaxQueued = max(c.stats.MaxQueued, n)
	c.mu.Unlock()
}

// wait blocks until host's bucket gives a token. A shared limiter whose
// backend is down answers with admit.ErrUnavailable and its failure
// policy's decision: an admission is followed, a refusal with a wait is
// waited out, a blind refusal (no wait known) is retried after a delay that
// doubles from 10 ms to a second, and a refusal that no wait can change
// (the fallback found the cost above its capacity, or rejected the limit)
// is returned.
func (c *Crawler) wait(ctx context.Context, host string) error {
	var backoff time.Duration
	for {
		d, err := c.limiter.AllowN(ctx, host, 1)
		if err != nil && (!errors.Is(err, admit.ErrUnavailable) ||
			errors.Is(err, admit.ErrUnsatisfiable) || errors.Is(err, admit.ErrInvalidConfig)) {
			return err
		}
		if d.Allowed { // with ErrUnavailable: the failure policy admitted (admit.KeyedLimiter's contract)
			return nil
		}
		c.mu.Lock()
		c.stats.Waited++
		c.mu.Unlock()
		wait := d.RetryAfter
		if wait <= 0 {
			backoff = min(max(2*backoff, 10*time.Millisecond), time.Second)
			wait = backoff
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// href finds links in the synthetic site's pages; a real crawler would use
// an HTML parser (golang.org/x/net/html), which the core module does not
// depend on.
var href = regexp.MustCompile(`href="([^"]+)"`)

func (c *Crawler) fetch(ctx context.Context, raw string) {
	u, _ := url.Parse(raw) // offer parsed it
	if err := c.wait(ctx, u.Host); err != nil {
		if ctx.Err() == nil {
			c.fail() // the limiter refused for good (never so with keyed's defaults)
		}
		return
	}
	now := time.Now()
	c.mu.Lock()
	c.stats.Fetched[u.Host]++
	if _, ok := c.stats.First[u.Host]; !ok {
		c.stats.First[u.Host] = now
	}
	c.stats.Last[u.Host] = now
	c.mu.Unlock()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		c.fail()
		return
	}
	resp, err := c.client.Do(req)
	if err != nil {
		c.fail()
		return
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxBody))
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		loc, lerr := resp.Location() // resolved against the request's URL
		if lerr != nil {
			c.fail()
			return
		}
		c.mu.Lock()
		c.stats.Redirects++
		c.mu.Unlock()
		c.offer(ctx, loc.String(), true)
		return
	}
	if err != nil || resp.StatusCode != http.StatusOK {
		c.fail()
		return
	}
	for _, m := range href.FindAllSubmatch(body, -1) {
		ref, err := url.Parse(string(m[1]))
		if err != nil {
			continue
		}
		c.offer(ctx, u.ResolveReference(ref).String(), true)
	}
}

func (c *Crawler) fail() {
	c.mu.Lock()
	c.stats.Errors++
	c.mu.Unlock()
}
