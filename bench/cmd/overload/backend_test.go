package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestCapacityStepAtOnce queues n calls on a backend of c workers, halves
// its workers and then restores them, and checks by counts, not by time,
// that each change takes effect at once: after the halving no call starts
// while c/2 or more are in service, however many calls were queued before
// it (the backend this replaced took workers away by queueing behind every
// waiting call, so with 400 queued the halving came only after all of them
// had started); after the raise, queued calls start without any call
// finishing. The calls still start in the order they arrived, and every
// call is served although every caller gave up.
func TestCapacityStepAtOnce(t *testing.T) {
	const c, n = 8, 400
	b := newBackend(c)
	release := make(chan struct{})
	var inService, over atomic.Int64
	var limit atomic.Int64
	limit.Store(c)
	var early atomic.Int64 // calls that started before an earlier arrival
	b.work = func(r *http.Request) {
		if k := inService.Add(1); k > limit.Load() {
			over.Add(1)
		}
		i, err := strconv.Atoi(r.URL.Query().Get("i"))
		if err != nil {
			panic(err)
		}
		// First in, first out: the calls started so far are the first
		// ones to arrive, so call i is among them only once more than i
		// have started.
		if i >= b.stats().started {
			early.Add(1)
		}
		<-release
		inService.Add(-1)
	}
	waitFor := func(ok func() bool) {
		for !ok() {
			time.Sleep(50 * time.Microsecond)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("/?i=%d", i), nil)
		wg.Go(func() {
			rec := httptest.NewRecorder()
			b.ServeHTTP(rec, req)
			codes[i] = rec.Code
		})
		// Call i is in service or queued before call i+1 arrives: the
		// queue holds the calls in the order of their indices.
		waitFor(func() bool { st := b.stats(); return st.busy+st.waiting == i+1 })
	}
	cancel() // every caller gives up; the backend serves them all the same
	waitFor(func() bool { return inService.Load() == c })
	if st := b.stats(); st.busy != c || st.waiting != n-c {
		t.Fatalf("before the step: %+v, want %d in service and %d waiting", st, c, n-c)
	}

	limit.Store(c / 2)
	b.setWorkers(c / 2)
	for range n / 2 {
		release <- struct{}{}
	}
	if over.Load() > 0 {
		t.Fatalf("after halving the workers to %d, %d calls started with more than %d in service (the step waited behind the queue)",
			c/2, over.Load(), c/2)
	}
	if st := b.stats(); st.peak > c/2 {
		t.Fatalf("after halving the workers to %d, the backend counted %d in service as a call started", c/2, st.peak)
	}

	limit.Store(c)
	b.setWorkers(c)
	// No call finishes until the next release: only the raise can start
	// the calls that fill the workers.
	waitFor(func() bool { return inService.Load() == c })
	for range n - n/2 {
		release <- struct{}{}
	}
	wg.Wait()

	if over.Load() > 0 {
		t.Errorf("%d calls started with more in service than the workers", over.Load())
	}
	if st := b.stats(); st.started != n || st.busy != 0 || st.waiting != 0 {
		t.Errorf("at the end: %+v, want %d started, none in service or waiting", st, n)
	}
	if early.Load() > 0 {
		t.Errorf("%d calls started before a call that arrived earlier", early.Load())
	}
	for i, code := range codes {
		if code != http.StatusOK {
			t.Errorf("call %d: status %d, want 200 (the backend serves a call whose caller gave up)", i, code)
		}
	}
}

// TestBackendCloseDropsWaiting checks that closing the backend answers the
// calls still waiting with 503 and lets those in service finish.
func TestBackendCloseDropsWaiting(t *testing.T) {
	const c, n = 2, 5
	b := newBackend(c)
	release := make(chan struct{})
	b.work = func(*http.Request) { <-release }
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		wg.Go(func() {
			rec := httptest.NewRecorder()
			b.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			codes[i] = rec.Code
		})
	}
	for st := b.stats(); st.busy+st.waiting < n; st = b.stats() {
		time.Sleep(50 * time.Microsecond)
	}
	b.close()
	close(release)
	wg.Wait()
	var ok, dropped int
	for _, code := range codes {
		switch code {
		case http.StatusOK:
			ok++
		case http.StatusServiceUnavailable:
			dropped++
		}
	}
	if ok != c || dropped != n-c {
		t.Errorf("after close: %d served and %d dropped, want %d and %d", ok, dropped, c, n-c)
	}
	rec := httptest.NewRecorder()
	b.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("a call after close: status %d, want 503", rec.Code)
	}
}
