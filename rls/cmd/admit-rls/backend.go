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

// probeEvery is how often the backend is probed (Redis: PING), so that an
// outage and its end are seen with no traffic too, as when a load
// balancer has stopped sending any because the health check failed.
const probeEvery = time.Second

// backend is the Store in use, watched for outages: a decision or a probe
// that fails with admit.ErrUnavailable starts one, the first success ends
// it. It logs the start (with the error), at most one line every logEvery
// while it lasts (the failures since the start, the latest error), and the
// end (how long, how many failures); it tells onChange, which drives the
// health checks when REDIS_HEALTH_CHECK_ACTIVE_CONNECTION asks. A decision
// that succeeds costs one atomic load more.
type backend struct {
	rls.Store
	name     string
	onChange func(healthy bool)

	down     atomic.Bool
	mu       sync.Mutex // guards the rest
	since    time.Time  // the outage's start
	failures int64      // since then
	logged   time.Time  // the last line about it
}

// Decide implements rls.Store.
func (b *backend) Decide(ctx context.Context, hits []rls.Hit, results []rls.Result) (bool, error) {
	ok, err := b.Store.Decide(ctx, hits, results)
	switch {
	case err == nil:
		if b.down.Load() {
			b.recovered()
		}
	case errors.Is(err, admit.ErrUnavailable):
		b.failed(err)
	}
	return ok, err
}

// healthy reports whether the backend answered its latest call.
func (b *backend) healthy() bool { return !b.down.Load() }

func (b *backend) failed(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if !b.down.Load() {
		b.down.Store(true)
		b.since, b.failures, b.logged = now, 1, now
		slog.Error("backend unavailable", "backend", b.name, "err", err)
		if b.onChange != nil {
			b.onChange(false)
		}
		return
	}
	b.failures++
	if now.Sub(b.logged) >= logEvery {
		b.logged = now
		slog.Error("backend still unavailable", "backend", b.name, "for", now.Sub(b.since).Round(time.Millisecond).String(),
			"failures", b.failures, "err", err)
	}
}

func (b *backend) recovered() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.down.Load() {
		return
	}
	b.down.Store(false)
	slog.Warn("backend recovered", "backend", b.name, "after", time.Since(b.since).Round(time.Millisecond).String(), "failures", b.failures)
	if b.onChange != nil {
		b.onChange(true)
	}
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
		pctx, cancel := context.WithTimeout(ctx, min(timeout, probeEvery))
		err := ping(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			b.failed(fmt.Errorf("%w: %s: %w", admit.ErrUnavailable, b.name, err))
		case b.down.Load():
			b.recovered()
		}
	}
}
