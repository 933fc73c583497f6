package windowtest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
)

// fuzzWindow is the window of every fuzzed limiter.
const fuzzWindow = time.Second

// Fuzz is the model-based fuzz target: ops is a program over one limiter
// on a fake clock. Its first byte picks the limit (1 to 8); each further
// byte is one step:
//
//	0-2  TryAcquireN(n)              n = 1 + (b>>3) % limit
//	3    AcquireN(ctx, n) in a goroutine, admitted at once or left waiting
//	4    cancel one waiting AcquireN (the (b>>3)-th oldest)
//	5    move the clock to the next waiter's wake
//	6    advance by (b>>3) × window/16 (0 to about 2 windows)
//	7    advance by 1 ns, or to one ns before the next aligned window
//
// Every admission is recorded at the fake time it happened: a TryAcquireN
// at the current reading, a waiter when it returns nil, which it does only
// once the clock has reached its wake (a step that passes wakes stops at
// each of them on the way). At the end every waiter is
// cancelled, and the bound is checked on every span starting at an
// admission, for spans of window/2, window, 3·window/2 and 2·window.
func Fuzz(f *testing.F, a Algorithm) {
	for _, seed := range [][]byte{
		{3, 0, 0, 0, 0, 5, 0, 6 << 3, 0, 0, 0},
		{2, 3, 3, 3, 4, 5, 5, 0},
		{4, 0, 3, 3, 3, 3, 4 | 1<<3, 5, 4, 5, 0, 0},
		{1, 0, 7, 0, 7 | 1<<3, 0, 7, 0, 3, 3, 4 | 1<<3, 5, 5},
		{8, 0 | 7<<3, 6 | 15<<3, 0 | 7<<3, 7 | 1<<3, 0 | 7<<3, 7, 0 | 7<<3},
		{5, 2 | 4<<3, 3 | 4<<3, 3, 3 | 2<<3, 4, 5, 6 | 3<<3, 3 | 4<<3, 4 | 2<<3, 5, 5, 5},
		{6, 0 | 5<<3, 6 | 16<<3, 0 | 5<<3, 3 | 5<<3, 3, 4 | 1<<3, 5, 6 | 1<<3, 0, 0, 0, 3, 5},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) == 0 || len(ops) > 256 {
			return
		}
		run(t, a, ops)
	})
}

type waiter struct {
	id     int
	n      int64
	cancel context.CancelFunc
}

type result struct {
	id  int
	err error
}

type admission struct{ at, n int64 }

func run(t *testing.T, a Algorithm, ops []byte) {
	limit := 1 + int64(ops[0])%8
	clk := &recordingClock{FakeClock: buckettest.NewFakeClock(start)}
	l, err := a.New(limit, fuzzWindow, admit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	var (
		log      []admission
		waiting  []waiter // sleeping, in arrival order
		results  = make(chan result, 64)
		nextID   int
		maxN     int64 = 1
		hang, ok       = context.WithTimeout(context.Background(), 30*time.Second)
	)
	defer ok()
	// collect receives k results of woken or cancelled waiters.
	collect := func(k int, cancelled int) {
		for range k {
			var r result
			select {
			case r = <-results:
			case <-hang.Done():
				t.Fatal("waiter did not return")
			}
			i := slices.IndexFunc(waiting, func(w waiter) bool { return w.id == r.id })
			if i < 0 {
				t.Fatalf("result from unknown waiter %d", r.id)
			}
			w := waiting[i]
			waiting = slices.Delete(waiting, i, i+1)
			switch {
			case r.id == cancelled:
				if r.err != context.Canceled {
					t.Fatalf("cancelled waiter returned %v, want context.Canceled", r.err)
				}
			case r.err != nil:
				t.Fatalf("woken waiter returned %v", r.err)
			default:
				log = append(log, admission{clk.Now(), w.n})
			}
		}
	}
	for _, b := range ops[1:] {
		arg := int64(b >> 3)
		switch b & 7 {
		case 0, 1, 2:
			n := 1 + arg%limit
			maxN = max(maxN, n)
			if l.TryAcquireN(n) {
				log = append(log, admission{clk.Now(), n})
			}
		case 3:
			if len(waiting) >= 8 {
				continue
			}
			n := 1 + arg%limit
			maxN = max(maxN, n)
			ctx, cancel := context.WithCancel(context.Background())
			id := nextID
			nextID++
			done := make(chan error, 1)
			go func() { done <- l.AcquireN(ctx, n) }()
			slept := make(chan error, 1)
			wctx, wcancel := context.WithCancel(hang)
			go func() { slept <- clk.WaitForSleepers(wctx, len(waiting)+1) }()
			select {
			case err := <-done:
				wcancel()
				<-slept
				cancel()
				switch {
				case err == nil:
					log = append(log, admission{clk.Now(), n})
				case errors.Is(err, admit.ErrQueueFull):
				default:
					t.Fatalf("AcquireN(%d) returned at once: %v", n, err)
				}
			case err := <-slept:
				wcancel()
				if err != nil {
					t.Fatal("AcquireN neither returned nor slept")
				}
				waiting = append(waiting, waiter{id, n, cancel})
				go func() { results <- result{id, <-done} }()
			}
		case 4:
			if len(waiting) == 0 {
				continue
			}
			i := int(arg) % len(waiting)
			w := waiting[i]
			clk.mu.Lock()
			sleeps := len(clk.wakes)
			clk.mu.Unlock()
			w.cancel()
			collect(1, w.id)
			if a.MovesUp {
				// The waiters behind it moved up: each sleeps once more,
				// until its earlier wake.
				clk.waitSleeps(t, sleeps+len(waiting)-i)
				waitFor(t, clk.FakeClock, len(waiting))
			}
		case 5:
			wake, ok := clk.NextWake()
			if !ok {
				continue
			}
			advance(t, clk.FakeClock, wake, len(waiting), collect)
		case 6:
			advance(t, clk.FakeClock, clk.Now()+arg*int64(fuzzWindow)/16, len(waiting), collect)
		case 7:
			to := clk.Now() + 1
			if arg%2 == 1 {
				w := int64(fuzzWindow)
				to = start + ((clk.Now()-start)/w+1)*w - 1
			}
			advance(t, clk.FakeClock, to, len(waiting), collect)
		}
	}
	for len(waiting) > 0 {
		w := waiting[0]
		w.cancel()
		collect(1, w.id)
	}
	check(t, a, limit, maxN, log)
}

// advance moves the clock to `to`, stopping at every waiter's wake on the
// way so that each woken waiter is recorded at the time it came due, and
// collects the waiters it woke.
func advance(t *testing.T, clk *buckettest.FakeClock, to int64, sleeping int, collect func(int, int)) {
	t.Helper()
	for {
		wake, ok := clk.NextWake()
		if !ok || wake > to {
			break
		}
		clk.Set(wake)
		left := clk.Sleepers()
		collect(sleeping-left, -1)
		sleeping = left
	}
	clk.Set(to)
}

// check verifies the declared bound on every span that starts at an
// admission (the busiest span of a length always can).
func check(t *testing.T, a Algorithm, limit, maxN int64, log []admission) {
	t.Helper()
	if !slices.IsSortedFunc(log, func(x, y admission) int { return int(x.at - y.at) }) {
		t.Fatalf("admissions out of time order: %v", log)
	}
	for _, span := range []time.Duration{fuzzWindow / 2, fuzzWindow, 3 * fuzzWindow / 2, 2 * fuzzWindow} {
		bound := a.Bound(limit, fuzzWindow, span, maxN)
		var sum int64
		j := 0
		for i := range log {
			for j < len(log) && log[j].at < log[i].at+int64(span) {
				sum += log[j].n
				j++
			}
			if sum > bound {
				t.Fatalf("limit %d: %d admitted in [%v, %v + %v), bound %d; admissions %v",
					limit, sum, time.Duration(log[i].at-start), time.Duration(log[i].at-start), span, bound, log)
			}
			sum -= log[i].n
		}
	}
}
