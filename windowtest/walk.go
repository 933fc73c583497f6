package windowtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
)

// Model is a reference for one counting limiter (fixedwindow, slidinglog,
// slidingwindow), written from its package doc rather than its code.
// Entries are every admission and every reservation still held (a forfeited
// one included), at its instant in elapsed nanoseconds since New; none is
// later than from.
type Model interface {
	// Earliest returns the smallest elapsed time t >= from at which the
	// algorithm admits n on top of entries.
	Earliest(limit, window int64, entries []Entry, from, n int64) int64
	// Tokens returns what Tokens reports at now with no entry after now.
	Tokens(limit, window int64, entries []Entry, now int64) float64
}

// Entry is one admission or reservation of a Model.
type Entry struct{ At, N int64 }

// FixedModel is fixedwindow's reference: at most limit in each aligned
// window [k·window, (k+1)·window).
type FixedModel struct{}

func count(entries []Entry, lo, hi int64) int64 { // entries in [lo, hi]
	var c int64
	for _, e := range entries {
		if e.At >= lo && e.At <= hi {
			c += e.N
		}
	}
	return c
}

func (FixedModel) Earliest(limit, w int64, entries []Entry, from, n int64) int64 {
	k := from / w
	if count(entries, k*w, k*w+w-1)+n <= limit {
		return from
	}
	return (k + 1) * w // nothing is held there yet, and n <= limit
}

func (FixedModel) Tokens(limit, w int64, entries []Entry, now int64) float64 {
	k := now / w
	return float64(limit - count(entries, k*w, k*w+w-1))
}

// LogModel is slidinglog's reference: at most limit in every (t − window, t].
type LogModel struct{}

func (LogModel) Earliest(limit, w int64, entries []Entry, from, n int64) int64 {
	cands := []int64{from}
	for _, e := range entries {
		if e.At+w > from {
			cands = append(cands, e.At+w)
		}
	}
	slices.Sort(cands)
	for _, c := range cands {
		if count(entries, c-w+1, c)+n <= limit {
			return c
		}
	}
	panic("unreachable: once every entry has expired, n <= limit fits")
}

func (LogModel) Tokens(limit, w int64, entries []Entry, now int64) float64 {
	return float64(limit - count(entries, now-w+1, now))
}

// CounterModel is slidingwindow's reference: n is admitted at t, offset off
// into aligned window k, if prev × (window − off) / window + cur + n <=
// limit, prev and cur the counts of windows k−1 and k, compared exactly.
type CounterModel struct{}

func (CounterModel) fits(limit, w int64, entries []Entry, t, n int64) bool {
	k := t / w
	prev := count(entries, (k-1)*w, k*w-1)
	cur := count(entries, k*w, k*w+w-1)
	off := t - k*w
	lhs := new(big.Int).Mul(big.NewInt(prev), big.NewInt(w-off))
	rhs := new(big.Int).Mul(big.NewInt(limit-cur-n), big.NewInt(w))
	return limit-cur-n >= 0 && lhs.Cmp(rhs) <= 0
}

func (m CounterModel) Earliest(limit, w int64, entries []Entry, from, n int64) int64 {
	for k := from / w; ; k++ {
		lo, hi := max(from, k*w), k*w+w-1
		if !m.fits(limit, w, entries, hi, n) {
			continue // the estimate only falls through a window
		}
		for lo < hi { // the smallest t in [lo, hi] that fits
			mid := lo + (hi-lo)/2
			if m.fits(limit, w, entries, mid, n) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		return lo
	}
}

func (CounterModel) Tokens(limit, w int64, entries []Entry, now int64) float64 {
	k := now / w
	prev := count(entries, (k-1)*w, k*w-1)
	cur := count(entries, k*w, k*w+w-1)
	off := now - k*w
	est := float64(prev)*float64(w-off)/float64(w) + float64(cur)
	return max(0, float64(limit)-est)
}

// horizon is refill.Horizon: elapsed time stops there.
const horizon = int64(1) << 62

// WalkConfig is one walk's shape.
type WalkConfig struct {
	Limit  int64
	Window time.Duration
	Start  int64 // the fake clock's reading at New
	Steps  int
}

// Walk runs seeds random walks of a model-based test: each interleaves
// TryAcquireN (odd sizes included), Tokens, blocking AcquireN (admitted at
// once, reserved, or refused for a deadline), cancellations (the tail rule:
// a cancelled reservation on top is undone, one below a later reservation
// or admission is forfeited, and one already due on the limiter's clock is
// admitted), clock steps forward (a nanosecond, to a boundary, to a wake,
// years, past the horizon) and backward (behind the limiter's latest
// reading, before its creation), on windows from 1 ns to 2^60 ns. Every
// decision, every Tokens and every reservation's wake must equal the
// model's exactly; at the end the declared bound (and, for Aligned, the
// per-window limit) is checked on every admission's instant.
func Walk(t *testing.T, a Algorithm, m Model, seeds int) {
	windows := []time.Duration{1, 2, 3, 7, 1000, time.Millisecond, time.Second, 1 << 59, 1 << 60}
	limits := []int64{1, 2, 3, 5, 8, 13, 100}
	starts := []int64{0, 1 << 40, -(1 << 62), 1 << 61}
	st := &walkStats{}
	defer func() { t.Logf("%d walks: %+v", seeds, *st) }()
	for seed := range seeds {
		r := rand.New(rand.NewPCG(uint64(seed), 0x77616c6b))
		cfg := WalkConfig{
			Limit:  limits[r.IntN(len(limits))],
			Window: windows[r.IntN(len(windows))],
			Start:  starts[r.IntN(len(starts))],
			Steps:  150,
		}
		if !t.Run(fmt.Sprintf("seed=%d/limit=%d/window=%d", seed, cfg.Limit, cfg.Window), func(t *testing.T) {
			walk(t, a, m, cfg, r, st)
		}) {
			return // the first failing walk is enough to read
		}
	}
}

// walker is one walk's state: the model's entries, the tail stack and the
// limiter's clock as the limiter has applied it.
type walker struct {
	t       *testing.T
	a       Algorithm
	m       Model
	cfg     WalkConfig
	limit   int64
	w       int64
	clk     *buckettest.FakeClock
	l       admit.Limiter
	ws      *buckettest.Waiters
	origin  int64
	last    int64         // the latest elapsed reading the limiter applied
	entries []Entry       // held: admissions and reservations, by instant
	owner   []int         // per entry: waiter index, or -1 for an admission
	stack   []int         // tail: waiter indices of undoable reservations, -1 an admission
	pending map[int]int64 // waiter index -> instant, still asleep
	adm     []admission   // admissions at their instants
	trace   []string      // the walk so far, for failure messages
	reserve map[int]int64 // waiter index -> n
	stats   *walkStats
}

// walkStats counts what the walks exercised, so that a walk that stops
// reaching a case shows in the log.
type walkStats struct {
	tries, admitted, tokens, atOnce, reserved, deadline, never    int
	undone, forfeited, dueOnCancel, woken, backward, beforeOrigin int
	horizon                                                       int
}

func walk(t *testing.T, a Algorithm, m Model, cfg WalkConfig, r *rand.Rand, st *walkStats) {
	clk := buckettest.NewFakeClock(cfg.Start)
	l, err := a.New(cfg.Limit, cfg.Window, admit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	k := &walker{t: t, a: a, m: m, cfg: cfg, limit: cfg.Limit, w: int64(cfg.Window), clk: clk, l: l,
		ws: buckettest.NewWaiters(l, clk), origin: cfg.Start, pending: map[int]int64{}, reserve: map[int]int64{}, stats: st}
	defer k.ws.Close()
	for range cfg.Steps {
		k.step(r)
		if t.Failed() {
			return
		}
	}
	for i := range k.pending { // cancel the rest, newest first or not: the model follows
		k.cancel(i)
		if t.Failed() {
			return
		}
	}
	k.checkBound()
}

func (k *walker) fail(format string, args ...any) {
	k.t.Helper()
	tail := k.trace[max(0, len(k.trace)-40):]
	k.t.Fatalf("%s\nlimit=%d window=%d start=%d; last steps:\n  %s", fmt.Sprintf(format, args...),
		k.limit, k.w, k.origin, strings.Join(tail, "\n  "))
}

func (k *walker) log(format string, args ...any) {
	k.trace = append(k.trace, fmt.Sprintf("[L=%d raw-origin=%d] ", k.last, k.clk.Now()-k.origin)+fmt.Sprintf(format, args...))
}

// read is the limiter's reading of its clock: elapsed since New, clamped to
// [0, horizon], and never behind the latest it applied.
func (k *walker) read() int64 {
	k.last = k.peek()
	return k.last
}

// peek is read without applying the reading.
func (k *walker) peek() int64 {
	raw := k.clk.Now()
	var e int64
	switch {
	case raw <= k.origin:
		e = 0
	case uint64(raw)-uint64(k.origin) >= uint64(horizon):
		e = horizon
	default:
		e = int64(uint64(raw) - uint64(k.origin))
	}
	return max(k.last, e)
}

func (k *walker) tail() int64 {
	if len(k.entries) == 0 {
		return math.MinInt64
	}
	return k.entries[len(k.entries)-1].At
}

func (k *walker) size(r *rand.Rand) int64 {
	switch r.IntN(12) {
	case 0:
		return 0
	case 1:
		return -1 - r.Int64N(3)
	case 2:
		return k.limit + 1
	case 3:
		return k.limit
	}
	return 1 + r.Int64N(min(k.limit, 4))
}

func (k *walker) step(r *rand.Rand) {
	switch op := r.IntN(20); {
	case op < 6:
		k.try(k.size(r))
	case op < 7:
		k.tokens()
	case op < 10:
		if len(k.pending) < 6 {
			k.acquire(k.size(r))
		}
	case op < 11:
		k.deadline(k.size(r))
	case op < 13:
		if len(k.pending) > 0 {
			ids := make([]int, 0, len(k.pending))
			for i := range k.pending {
				ids = append(ids, i)
			}
			slices.Sort(ids)
			k.cancel(ids[r.IntN(len(ids))])
		}
	default:
		k.move(r)
	}
}

func (k *walker) try(n int64) {
	want := false
	if n > 0 && n <= k.limit {
		now := k.read()
		want = k.tail() <= now && k.m.Earliest(k.limit, k.w, k.entries, now, n) == now
		if want {
			k.admitNow(now, n)
		}
	} else {
		want = n == 0
	}
	got := k.l.TryAcquireN(n)
	k.stats.tries++
	if got {
		k.stats.admitted++
	}
	k.log("TryAcquireN(%d) = %v", n, got)
	if got != want {
		k.fail("TryAcquireN(%d) = %v, the model says %v", n, got, want)
	}
}

func (k *walker) admitNow(now, n int64) {
	k.entries = append(k.entries, Entry{now, n})
	k.owner = append(k.owner, -1)
	k.stack = append(k.stack, -1)
	k.adm = append(k.adm, admission{now, n})
}

func (k *walker) tokens() {
	now := k.read()
	want := 0.0
	if k.tail() <= now {
		want = k.m.Tokens(k.limit, k.w, k.entries, now)
	}
	got := k.l.Tokens()
	k.stats.tokens++
	k.log("Tokens() = %v", got)
	if math.Abs(got-want) > 1e-9*max(1, math.Abs(want)) {
		k.fail("Tokens() = %v, the model says %v", got, want)
	}
}

// plan is the model's answer to AcquireN(n) at the limiter's reading now:
// admitted at once (at == now), a reservation at at, or Never.
func (k *walker) plan(now, n int64) (at int64, never bool) {
	at = k.m.Earliest(k.limit, k.w, k.entries, max(now, k.tail()), n)
	return at, at > horizon
}

func (k *walker) acquire(n int64) {
	if n <= 0 || n > k.limit {
		err := k.l.AcquireN(context.Background(), n)
		k.log("AcquireN(%d) = %v", n, err)
		if (n == 0) != (err == nil) || n != 0 && !errors.Is(err, admit.ErrUnsatisfiable) {
			k.fail("AcquireN(%d) = %v", n, err)
		}
		return
	}
	now := k.read()
	at, never := k.plan(now, n)
	i := k.ws.Start(n)
	err, returned := k.ws.Result(i)
	k.log("AcquireN(%d): returned=%v err=%v (model: at %d, never %v)", n, returned, err, at, never)
	switch {
	case never:
		k.stats.never++
		if !returned || !errors.Is(err, admit.ErrUnsatisfiable) {
			k.fail("AcquireN(%d) past the horizon: returned=%v err=%v, want ErrUnsatisfiable", n, returned, err)
		}
	case at == now:
		if !returned || err != nil {
			k.fail("AcquireN(%d): returned=%v err=%v, the model admits at once", n, returned, err)
		}
		k.stats.atOnce++
		k.admitNow(now, n)
	default:
		if returned {
			k.fail("AcquireN(%d) returned %v at once, the model reserves at %d", n, err, at)
		}
		wake, _ := k.ws.WakeTime(i)
		if wake-k.origin != at {
			k.fail("AcquireN(%d) sleeps until %d, the model's instant is %d", n, wake-k.origin, at)
		}
		k.entries = append(k.entries, Entry{at, n})
		k.owner = append(k.owner, i)
		k.stack = append(k.stack, i)
		k.pending[i] = at
		k.reserve[i] = n
		k.stats.reserved++
	}
}

// deadline calls AcquireN(n) under a real-time deadline an hour away, only
// where the outcome is immediate: admitted at once, too far (ErrDeadline,
// nothing reserved) or never.
func (k *walker) deadline(n int64) {
	if n <= 0 || n > k.limit {
		return
	}
	now := k.peek()
	at, never := k.plan(now, n)
	if !never && at != now && at-now <= int64(time.Hour+time.Minute) {
		return // it would sleep (or nearly): the waiters cover that
	}
	k.read()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- k.l.AcquireN(ctx, n) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		k.log("AcquireN(deadline 1h, %d) did not return (model: at %d, never %v)", n, at, never)
		cancel()
		<-done
		k.fail("AcquireN(%d) with an hour's deadline slept; the model says at %d from %d, never %v", n, at, now, never)
	}
	k.log("AcquireN(deadline 1h, %d) = %v (model: at %d)", n, err, at)
	switch {
	case never:
		if !errors.Is(err, admit.ErrUnsatisfiable) {
			k.fail("AcquireN(%d) past the horizon = %v", n, err)
		}
	case at == now:
		if err != nil {
			k.fail("AcquireN(%d) = %v, the model admits at once", n, err)
		}
		k.admitNow(now, n)
	default:
		k.stats.deadline++
		if !errors.Is(err, admit.ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
			k.fail("AcquireN(%d) %v away with an hour's deadline = %v", n, time.Duration(at-now), err)
		}
	}
}

func (k *walker) cancel(i int) {
	at := k.pending[i]
	delete(k.pending, i)
	now := k.read() // the undo reads the clock
	k.ws.Cancel(i)
	err := k.ws.Wait(i)
	k.log("cancel waiter %d (instant %d) = %v", i, at, err)
	if at <= now {
		if err != nil {
			k.fail("waiter %d due at %d on the limiter's clock (%d) returned %v on cancel, want nil", i, at, now, err)
		}
		k.stats.dueOnCancel++
		k.adm = append(k.adm, admission{at, k.reserve[i]})
		return
	}
	if err != context.Canceled {
		k.fail("cancelled waiter %d (instant %d, limiter at %d) returned %v", i, at, now, err)
	}
	if len(k.stack) > 0 && k.stack[len(k.stack)-1] == i {
		k.stats.undone++
		k.stack = k.stack[:len(k.stack)-1]
		j := slices.Index(k.owner, i)
		k.entries = slices.Delete(k.entries, j, j+1)
		k.owner = slices.Delete(k.owner, j, j+1)
	} else {
		k.stats.forfeited++
	}
}

// move steps the raw clock and collects the waiters it wakes, each
// admitted at its instant.
func (k *walker) move(r *rand.Rand) {
	raw := k.clk.Now()
	el := raw - k.origin
	var to int64
	switch r.IntN(10) {
	case 0:
		to = raw + 1
		if r.IntN(8) == 0 { // a long way, toward the horizon
			to = raw + 1<<60 + r.Int64N(1<<60)
		}
	case 1: // one before, at, or one after the next aligned boundary
		b := (max(el, 0)/k.w + 1) * k.w
		to = k.origin + b - 1 + r.Int64N(3)
	case 2, 3:
		if wake, ok := k.clk.NextWake(); ok {
			to = wake + r.Int64N(2) - 1 + r.Int64N(2)
		} else {
			to = raw + r.Int64N(k.w) + 1
		}
	case 4:
		to = raw + r.Int64N(2*k.w) + 1
	case 5: // years
		to = raw + r.Int64N(1<<58)
	case 6: // back behind the latest reading
		to = raw - 1 - r.Int64N(2*k.w)
	case 7: // before creation
		to = k.origin - r.Int64N(k.w) - 1
	default:
		to = raw + r.Int64N(k.w/3+1)
	}
	// Keep the raw clock where origin + horizon still fits an int64.
	to = min(max(to, math.MinInt64/2), k.origin+horizon+1<<40)
	switch {
	case to <= k.origin:
		k.stats.beforeOrigin++
	case to < raw:
		k.stats.backward++
	case to-k.origin >= horizon:
		k.stats.horizon++
	}
	k.clk.Set(to)
	k.ws.Advance(0)
	k.log("clock to %d", to-k.origin)
	for i, at := range k.pending {
		err, returned := k.ws.Result(i)
		if !returned {
			if k.origin+at <= to {
				k.fail("waiter %d with instant %d is still asleep at %d", i, at, to-k.origin)
			}
			continue
		}
		if err != nil {
			k.fail("waiter %d woke with %v", i, err)
		}
		if k.origin+at > to {
			k.fail("waiter %d returned at %d, before its instant %d", i, to-k.origin, at)
		}
		delete(k.pending, i)
		k.stats.woken++
		k.adm = append(k.adm, admission{at, k.reserve[i]})
	}
}

func (k *walker) checkBound() {
	log := slices.Clone(k.adm)
	slices.SortStableFunc(log, func(x, y admission) int { return cmp.Compare(x.at, y.at) })
	maxN := int64(1)
	for _, x := range log {
		maxN = max(maxN, x.n)
	}
	if err := checkLog(k.a, k.limit, time.Duration(k.w), maxN, 0, log); err != nil {
		k.fail("%v", err)
	}
}

// WalkConcurrent is Walk's concurrent variant: in each phase the fake clock
// stands still while goroutines interleave TryAcquireN, Tokens and AcquireN
// (admitted at once, or reserved and cancelled at the phase's end, so that
// reservations are undone or forfeited under contention); between phases
// the clock moves forward by a random step. Every admission is at its
// phase's time, and the declared bound is checked on every span.
func WalkConcurrent(t *testing.T, a Algorithm, seeds int) {
	const goroutines, phases, calls = 4, 40, 12
	for seed := range seeds {
		r := rand.New(rand.NewPCG(uint64(seed), 0x636f6e63))
		limit := []int64{1, 3, 8, 100}[r.IntN(4)]
		w := []time.Duration{1000, time.Millisecond, time.Second}[r.IntN(3)]
		clk := buckettest.NewFakeClock(1 << 40)
		l, err := a.New(limit, w, admit.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		var (
			mu  sync.Mutex
			log []admission
		)
		for range phases {
			now := clk.Now() - 1<<40
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for g := range goroutines {
				gr := rand.New(rand.NewPCG(r.Uint64(), uint64(g)))
				wg.Go(func() {
					for range calls {
						n := 1 + gr.Int64N(min(limit, 3))
						ok := false
						switch gr.IntN(4) {
						case 0:
							ok = l.AcquireN(ctx, n) == nil
						case 1:
							l.Tokens()
						default:
							ok = l.TryAcquireN(n)
						}
						if ok {
							mu.Lock()
							log = append(log, admission{now, n})
							mu.Unlock()
						}
					}
				})
			}
			// The goroutines finish their TryAcquireNs; those asleep in
			// AcquireN are cancelled before the clock moves.
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			for stop := false; !stop; {
				select {
				case <-done:
					stop = true
				case <-time.After(time.Millisecond):
					cancel()
				}
			}
			cancel()
			clk.Advance(time.Duration(r.Int64N(int64(w)) + 1))
		}
		maxN := min(limit, 3)
		if err := checkLog(a, limit, w, maxN, 0, log); err != nil {
			t.Fatalf("seed %d, limit %d, window %v: %v", seed, limit, w, err)
		}
	}
}
