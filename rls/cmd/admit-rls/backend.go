package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/rls"
)

// logEvery is the shortest interval between two log lines about one
// outage.
const logEvery = 10 * time.Second

// quiet is how long the backend must answer every call before an outage
// is over.
const quiet = 10 * time.Second

// probeEvery is how often the backend is probed (Redis: PING), so that an
// outage and its end are seen with no traffic too, as when a load
// balancer has stopped sending any because the health check failed.
const probeEvery = time.Second

// backend is the Store in use, watched for outages, for the log. A
// decision or a probe that fails with admit.ErrUnavailable starts an
// outage, logged at once with the error; the outage lasts until no call
// has failed for quiet (a partial outage, a Cluster with a node down or
// calls that pass REDIS_TIMEOUT now and then, is one outage however its
// failures and successes interleave), with at most one line every logEvery
// meanwhile (how long, the failures and successes since the start, the
// latest error), and its end is logged (how long it failed, the counts).
// So an outage makes at most one line per logEvery and its end, and two
// outages are at least quiet apart: never a line per failed request. A
// decision that succeeds costs one atomic load more. (Health follows
// another rule, the connections' count: see conns.)
type backend struct {
	rls.Store
	name string
	now  func() time.Time // time.Now; a fake clock in tests
	log  *slog.Logger     // slog.Default() when nil

	down      atomic.Bool
	mu        sync.Mutex // guards the rest
	since     time.Time  // the outage's start
	lastFail  time.Time
	logged    time.Time // the last line about it
	failures  int64     // since its start
	successes int64
	lastErr   error
}

// Decide implements rls.Store.
func (b *backend) Decide(ctx context.Context, hits []rls.Hit, results []rls.Result) (bool, error) {
	ok, err := b.Store.Decide(ctx, hits, results)
	switch {
	case err == nil:
		if b.down.Load() {
			b.succeeded()
		}
	case errors.Is(err, admit.ErrUnavailable):
		b.failed(err)
	}
	return ok, err
}

func (b *backend) logger() *slog.Logger {
	if b.log != nil {
		return b.log
	}
	return slog.Default()
}

func (b *backend) clock() time.Time {
	if b.now != nil {
		return b.now()
	}
	return time.Now()
}

func (b *backend) failed(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock()
	b.lastFail, b.lastErr = now, err
	if !b.down.Load() {
		b.down.Store(true)
		b.since, b.failures, b.successes, b.logged = now, 1, 0, now
		b.logger().Error("backend unavailable", "backend", b.name, "err", err)
		return
	}
	b.failures++
	b.still(now)
}

func (b *backend) succeeded() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.down.Load() {
		return
	}
	now := b.clock()
	b.successes++
	if now.Sub(b.lastFail) < quiet {
		b.still(now)
		return
	}
	b.down.Store(false)
	b.logger().Warn("backend recovered", "backend", b.name, "failed_for", b.lastFail.Sub(b.since).Round(time.Millisecond).String(),
		"failures", b.failures, "successes", b.successes)
}

// still logs the outage's state if logEvery has passed since its last
// line. Called with mu held.
func (b *backend) still(now time.Time) {
	if now.Sub(b.logged) < logEvery {
		return
	}
	b.logged = now
	b.logger().Error("backend still unavailable", "backend", b.name, "for", now.Sub(b.since).Round(time.Millisecond).String(),
		"failures", b.failures, "successes", b.successes, "err", b.lastErr)
}

// probe calls ping every probeEvery until ctx ends, each bounded by
// timeout, and counts its outcome as a decision's.
func (b *backend) probe(ctx context.Context, ping func(context.Context) error, timeout time.Duration) {
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, timeout)
		err := ping(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			b.failed(fmt.Errorf("%w: %s: %w", admit.ErrUnavailable, b.name, err))
		case b.down.Load():
			b.succeeded()
		}
	}
}
