package windowtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
)

// fuzzWindow is the window of every fuzzed limiter.
const fuzzWindow = time.Second

// Fuzz is the model-based fuzz target: ops is a program over one limiter
// on a fake clock. Its first byte picks the limit (1 to 8) and, with bit 3
// set, enables stale readings; each further byte is one step:
//
//	0-2  TryAcquireN(n)              n = 1 + (b>>3) % limit
//	3    AcquireN(ctx, n) in a goroutine, admitted at once or left waiting
//	4    cancel one waiting AcquireN (the (b>>3)-th oldest)
//	5    move the clock to the next waiter's wake
//	6    advance by (b>>3) × window/16 (0 to about 2 windows)
//	7    advance by 1 ns, or to one ns before the next aligned window;
//	     with stale readings and bit 4 of b set instead: a stale AcquireN
//
// A stale AcquireN(n), n = 1 + (b>>5) % limit, is what a goroutine that
// read the clock and then lost the race does: if TryAcquireN(n) refuses at
// the latest reading, the clock is set back by (1 + b>>5) × window/4 (before
// the limiter's creation, early on), AcquireN(n) starts there and must wait
// or find the queue full, and the clock is set forward to the latest reading
// again.
//
// Every admission is recorded at the time it happened on the limiter's
// clock, the latest reading so far: a TryAcquireN at the current reading, a
// waiter when it returns nil, which it may do only once the clock has
// reached its reservation's instant (a step that passes wakes stops at each
// of them on the way). At the end every waiter is cancelled, and the bound
// is checked on every span starting at an admission, for spans of
// window/(2·limit), window/2, window, 3·window/2 and 2·window, and, for an
// algorithm with Aligned set, on every aligned window.
func Fuzz(f *testing.F, a Algorithm) {
	for _, seed := range [][]byte{
		{3, 0, 0, 0, 0, 5, 0, 6 << 3, 0, 0, 0},
		{2, 3, 3, 3, 4, 5, 5, 0},
		{4, 0, 3, 3, 3, 3, 4 | 1<<3, 5, 4, 5, 0, 0},
		{1, 0, 7, 0, 7 | 1<<3, 0, 7, 0, 3, 3, 4 | 1<<3, 5, 5},
		{8, 0 | 7<<3, 6 | 15<<3, 0 | 7<<3, 7 | 1<<3, 0 | 7<<3, 7, 0 | 7<<3},
		{5, 2 | 4<<3, 3 | 4<<3, 3, 3 | 2<<3, 4, 5, 6 | 3<<3, 3 | 4<<3, 4 | 2<<3, 5, 5, 5},
		{6, 0 | 5<<3, 6 | 16<<3, 0 | 5<<3, 3 | 5<<3, 3, 4 | 1<<3, 5, 6 | 1<<3, 0, 0, 0, 3, 5},
		// Stale readings: behind the latest, then before creation.
		{1 | 8, 0, 0, 6 | 14<<3, 7 | 2<<3, 5, 0, 3, 5},
		{1 | 8, 0, 0, 6 | 4<<3, 7 | 18<<3, 5, 5, 0},
		{3 | 8, 0, 3, 3, 7 | 6<<3, 4 | 1<<3, 6 | 9<<3, 7 | 2<<3, 5, 5, 5},
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
	clk := newRecordingClock()
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
		hi             = clk.Now() // the latest reading: the limiter's clock
		stale          = ops[0]&8 != 0
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
				log = append(log, admission{max(clk.Now(), hi), w.n})
			}
		}
	}
	// acquire starts AcquireN(n) in a goroutine and reports whether it was
	// admitted at once; otherwise the caller is waiting, or the queue was
	// full.
	acquire := func(n int64) bool {
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
				return true
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
		return false
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
			if acquire(n) {
				log = append(log, admission{clk.Now(), n})
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
			if stale && arg&2 != 0 {
				if len(waiting) >= 8 {
					continue
				}
				n := 1 + (arg>>2)%limit
				maxN = max(maxN, n)
				if l.TryAcquireN(n) {
					log = append(log, admission{clk.Now(), n})
					continue
				}
				clk.Set(hi - (1+(arg>>2))*int64(fuzzWindow)/4)
				if acquire(n) {
					t.Fatalf("AcquireN(%d) at a stale reading admitted at once, where TryAcquireN(%d) at the latest refused", n, n)
				}
				// Back to the latest reading: a waiter whose sleep ends on
				// the way returned before its instant, and is recorded at
				// the limiter's time, the latest reading.
				advance(t, clk.FakeClock, hi, len(waiting), collect)
				continue
			}
			to := clk.Now() + 1
			if arg%2 == 1 {
				w := int64(fuzzWindow)
				to = start + ((clk.Now()-start)/w+1)*w - 1
			}
			advance(t, clk.FakeClock, to, len(waiting), collect)
		}
		hi = max(hi, clk.Now())
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
	if err := checkLog(a, limit, fuzzWindow, maxN, start, log); err != nil {
		t.Fatal(err)
	}
}

// checkLog is check for a window and an origin (the elapsed time 0 of the
// aligned windows); log is in time order.
func checkLog(a Algorithm, limit int64, window time.Duration, maxN, origin int64, log []admission) error {
	if !slices.IsSortedFunc(log, func(x, y admission) int { return cmp.Compare(x.at, y.at) }) {
		return fmt.Errorf("admissions out of time order: %v", log)
	}
	if a.Aligned {
		counts := map[int64]int64{}
		for _, x := range log {
			k := (x.at - origin) / int64(window)
			if counts[k] += x.n; counts[k] > limit {
				return fmt.Errorf("limit %d: %d admitted in aligned window %d; admissions %v", limit, counts[k], k, log)
			}
		}
	}
	for _, span := range []time.Duration{window / time.Duration(2*limit), window / 2, window, 3 * window / 2, 2 * window} {
		if span <= 0 {
			continue
		}
		bound := a.Bound(limit, window, span, maxN)
		var sum int64
		j := 0
		for i := range log {
			for j < len(log) && log[j].at-log[i].at < int64(span) {
				sum += log[j].n
				j++
			}
			if sum > bound {
				return fmt.Errorf("limit %d: %d admitted in [%v, %v + %v), bound %d; admissions %v",
					limit, sum, time.Duration(log[i].at-origin), time.Duration(log[i].at-origin), span, bound, log)
			}
			sum -= log[i].n
		}
	}
	return nil
}
