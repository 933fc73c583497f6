package leakybucket_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/leakybucket"
)

// TestWalk is the leaky bucket's exact model-based walk: random
// interleavings of TryAcquireN, Tokens, blocking AcquireN (admitted at once,
// queued, ErrQueueFull, under a real deadline an hour away that falls before
// or after the slot, with a context already cancelled, and "deaf" waiters
// that sleep through their slot until cancelled), cancellations of queued
// callers (the callers behind move up and sleep again), and clock steps: a
// nanosecond, to the next wake and just before it, a period, long idle gaps
// of days and years, back behind earlier readings and before the bucket's
// creation.
//
// The reference is written from the package doc, not from the code: the
// state is free, a point on the stream V(t) = ⌊t·R/2^64⌋ of internal/refill's
// units; a request of n at v = V(now) is admitted at once if free <= v (free
// becomes v + n units), else queued in the slot starting at free if
// free − v <= capacity (free moves on by n), else ErrQueueFull; a queued
// caller sleeps until the first t with V(t) >= its slot's start; one that
// leaves before that takes its units out and every slot behind it moves up
// by them. Every decision, Tokens reading, sleeping caller's wake instant
// (after every step, including the re-sleeps of the callers that moved up)
// and cancellation outcome is compared with the model. The only detail
// taken from the code rather than the doc is when a deaf caller whose slot
// has passed counts as admitted after the clock steps back (the bucket keeps
// no latest reading; its queue marks a slot admitted at the readings it
// settles at: a blocking call that finds the outlet busy, a waiter's check
// before it sleeps, a leave).
//
// Every admission is recorded at its instant (a queued caller's at its
// slot's), and on the whole record the walk checks the package doc's
// guarantees independently of the model: admissions in time order are at
// least their size apart on the stream (no admission earlier than the
// schedule, no burst), and in every span T at most ⌊rate × (T + 1 ns)⌋ + n
// are admitted, n the largest request.
//
// Waiters are tracked through a clock that wraps buckettest.FakeClock's
// Sleep and records, per AcquireN call, whether it is inside Sleep and until
// when; a step returns only once every queued caller is asleep until the
// model's instant for its slot and the fake clock holds exactly that many
// sleepers, so a caller that moved up and has not yet gone back to sleep is
// waited for, deterministically, without polling.
func TestWalk(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 60
	}
	capacities := []int64{1, 2, 3, 5, 13, 1e9}
	rates := []float64{1.0 / 3600, 1e-3, 1.0 / 3, 1, 7.3, 1000, 1e9, 0.1, 1e-6}
	origins := []int64{0, 1 << 40, -(1 << 50)}
	st := &lbStats{}
	for seed := range seeds {
		r := rand.New(rand.NewPCG(uint64(seed), 0x6c65616b))
		c := capacities[r.IntN(len(capacities))]
		rate := rates[r.IntN(len(rates))]
		origin := origins[r.IntN(len(origins))]
		if !t.Run(fmt.Sprintf("seed=%d/capacity=%d/rate=%v", seed, c, rate), func(t *testing.T) {
			lbWalkOne(t, c, rate, origin, 120, r, st)
		}) {
			return
		}
	}
	t.Logf("%d walks: %+v", seeds, *st)
	if seeds == 300 && !t.Failed() {
		st.reached(t)
	}
}

type lbStats struct {
	Tries, TryAdmitted, Tokens, AtOnce, Queued, Full, DeadlineErr, DeadlineSleep int
	Precancelled, Undone, MovedUp, DueOnCancel, Woken, Backward, BeforeOrigin    int
	Years, DeafSettled, Unsatisfiable                                            int
}

func (s *lbStats) reached(t *testing.T) {
	t.Helper()
	if s.TryAdmitted < 500 || s.Queued < 500 || s.Full < 100 || s.DeadlineErr < 20 || s.DeadlineSleep < 20 ||
		s.Undone < 100 || s.MovedUp < 50 || s.DueOnCancel < 20 || s.Woken < 200 || s.Backward < 50 ||
		s.BeforeOrigin < 10 || s.Years < 20 || s.Precancelled < 20 || s.DeafSettled < 10 {
		t.Errorf("the walks no longer reach every case: %+v", *s)
	}
}

// lbModel is the reference outlet, in internal/refill's units.
type lbModel struct {
	buckettest.Stream
	capTok, cap int64
	free        int64
	q           []*mslot // slots still waiting, in order
}

type mslot struct {
	id          int
	start, need int64
}

func newLBModel(capacity int64, rate float64) *lbModel {
	m := &lbModel{Stream: buckettest.NewStream(capacity, rate), capTok: capacity}
	m.cap = capacity << m.Shift
	return m
}

// settle marks admitted the waiting slots that have come due at v and
// returns them.
func (m *lbModel) settle(v int64) []*mslot {
	k := 0
	for k < len(m.q) && m.q[k].start <= v {
		k++
	}
	due := slices.Clone(m.q[:k])
	m.q = m.q[k:]
	return due
}

// walkClock wraps a FakeClock to see, per AcquireN call, whether it is in
// Sleep and until when.
type walkClock struct {
	*buckettest.FakeClock
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change; requires mu
}

type lbKey struct{}

// lbWaiter is one AcquireN call of the walk.
type lbWaiter struct {
	id     int
	n      int64
	deaf   bool // sleeps until cancelled, whatever the clock says
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	// requires walkClock.mu
	asleep   bool
	deadline int64 // absolute reading its latest Sleep runs until
}

func (c *walkClock) notifyLocked() {
	if c.changed != nil {
		close(c.changed)
	}
	c.changed = make(chan struct{})
}

func (c *walkClock) Sleep(ctx context.Context, d time.Duration) error {
	w, _ := ctx.Value(lbKey{}).(*lbWaiter)
	if w == nil {
		return c.FakeClock.Sleep(ctx, d)
	}
	now := c.Now()
	dl := now + int64(d)
	if dl < now {
		dl = math.MaxInt64
	}
	c.mu.Lock()
	w.asleep, w.deadline = true, dl
	c.notifyLocked()
	c.mu.Unlock()
	if w.deaf {
		d = math.MaxInt64 // the clock saturates: only the context ends it
	}
	err := c.FakeClock.Sleep(ctx, d)
	c.mu.Lock()
	w.asleep = false
	c.notifyLocked()
	c.mu.Unlock()
	return err
}

type lbAdm struct{ at, n int64 }

type lbWalker struct {
	t        *testing.T
	r        *rand.Rand
	st       *lbStats
	rate     float64
	capacity int64
	origin   int64
	clk      *walkClock
	b        *leakybucket.Bucket
	m        *lbModel
	live     map[int]*lbWaiter // AcquireN calls still running
	due      map[int]int64     // live deaf callers admitted, at their slot's instant
	ids      int
	adm      []lbAdm
	maxN     int64
	period   int64
	trace    []string
}

func lbWalkOne(t *testing.T, capacity int64, rate float64, origin int64, steps int, r *rand.Rand, st *lbStats) {
	clk := &walkClock{FakeClock: buckettest.NewFakeClock(origin), changed: make(chan struct{})}
	b, err := leakybucket.New(capacity, rate, admit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	k := &lbWalker{t: t, r: r, st: st, rate: rate, capacity: capacity, origin: origin, clk: clk, b: b,
		m: newLBModel(capacity, rate), live: map[int]*lbWaiter{}, due: map[int]int64{},
		period: max(1, int64(math.Ceil(1e9/rate)))}
	defer func() {
		for _, w := range k.live {
			w.cancel()
		}
		for _, w := range k.live {
			<-w.done
		}
	}()
	for range steps {
		k.step()
		if t.Failed() {
			return
		}
	}
	for len(k.live) > 0 { // cancel the rest, in random order
		ids := k.liveIDs()
		k.cancel(ids[k.r.IntN(len(ids))])
		if t.Failed() {
			return
		}
	}
	k.checkRecord()
}

func (k *lbWalker) fail(format string, args ...any) {
	k.t.Helper()
	tail := k.trace[max(0, len(k.trace)-40):]
	k.t.Fatalf("%s\ncapacity=%d rate=%v origin=%d unit=2^-%d; last steps:\n  %s", fmt.Sprintf(format, args...),
		k.capacity, k.rate, k.origin, k.m.Shift, strings.Join(tail, "\n  "))
}

func (k *lbWalker) log(format string, args ...any) {
	q := ""
	for _, s := range k.m.q {
		q += fmt.Sprintf(" #%d@%d+%d", s.id, s.start, s.need)
	}
	k.trace = append(k.trace, fmt.Sprintf("[e=%d free=%d q=%s] ", k.elapsed(), k.m.free, q)+fmt.Sprintf(format, args...))
}

// elapsed is the bucket's reading: since New, clamped to [0, horizon].
func (k *lbWalker) elapsed() int64 {
	now := k.clk.Now()
	if now <= k.origin {
		return 0
	}
	return min(now-k.origin, buckettest.StreamHorizon)
}

func (k *lbWalker) liveIDs() []int {
	ids := make([]int, 0, len(k.live))
	for id := range k.live {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (k *lbWalker) randN() int64 {
	switch x := k.r.IntN(20); {
	case x == 0:
		return 0
	case x == 1:
		return -1
	case x == 2:
		return k.capacity + 1
	case x < 12:
		return 1
	default:
		return min(k.capacity, int64(2*k.r.IntN(int(k.capacity+1)/2+1)+1)) // odd
	}
}

func (k *lbWalker) step() {
	switch x := k.r.IntN(100); {
	case x < 22:
		k.try(k.randN())
	case x < 28:
		k.tokens()
	case x < 55:
		kind := "plain"
		switch y := k.r.IntN(10); {
		case y < 2:
			kind = "deaf"
		case y < 4:
			kind = "deadline"
		case y < 5:
			kind = "cancelled"
		}
		k.acquire(k.randN(), kind)
	case x < 70:
		if ids := k.liveIDs(); len(ids) > 0 {
			k.cancel(ids[k.r.IntN(len(ids))])
		}
	default:
		k.advance()
	}
}

func (k *lbWalker) try(n int64) {
	e := k.elapsed()
	v := k.m.V(e)
	want := false
	switch {
	case n == 0:
		want = true
	case n < 0 || n > k.capacity:
	case k.m.free <= v:
		want = true
		k.admitAllQueued()
		k.m.free = v + n<<k.m.Shift
		k.record(e, n)
	}
	k.log("TryAcquireN(%d) want %v", n, want)
	k.st.Tries++
	if got := k.b.TryAcquireN(n); got != want {
		k.fail("TryAcquireN(%d) = %v, want %v", n, got, want)
	}
	if want && n > 0 {
		k.st.TryAdmitted++
	}
	k.settled()
}

// admitAllQueued: free moves past a nonempty queue only once every slot has
// come due, so every slot left is admitted (only deaf callers can be left).
func (k *lbWalker) admitAllQueued() {
	for _, s := range k.m.q {
		k.markDue(s)
	}
	k.m.q = nil
}

func (k *lbWalker) markDue(s *mslot) {
	w := k.live[s.id]
	if w == nil || !w.deaf {
		k.fail("slot #%d admitted by a reading but its caller is not a deaf sleeper", s.id)
	}
	k.due[s.id] = k.m.Reach(s.start)
	k.st.DeafSettled++
}

func (k *lbWalker) record(at, n int64) {
	k.adm = append(k.adm, lbAdm{at, n})
	k.maxN = max(k.maxN, n)
}

func (k *lbWalker) tokens() {
	e := k.elapsed()
	backlog := max(0, k.m.free-k.m.V(e))
	want := k.m.Tokens(max(0, k.m.cap-backlog))
	k.st.Tokens++
	if got := k.b.Tokens(); got != want {
		k.fail("Tokens() = %v, want %v (backlog %d units)", got, want, backlog)
	}
}

// acquire starts AcquireN(n) with a context of the given kind and checks
// its outcome: returned at once with the model's result, or asleep until
// the model's instant for its slot.
func (k *lbWalker) acquire(n int64, kind string) {
	e := k.elapsed()
	v := k.m.V(e)
	var want error
	queue := false
	var wake int64
	const hour = int64(time.Hour)
	switch {
	case kind == "cancelled":
		want = context.Canceled
		k.st.Precancelled++
	case n == 0:
	case n < 0 || n > k.capacity:
		want = admit.ErrUnsatisfiable
	case k.m.free <= v:
		k.admitAllQueued()
		k.m.free = v + n<<k.m.Shift
		k.record(e, n)
		k.st.AtOnce++
	default:
		for _, s := range k.m.settle(v) {
			k.markDue(s)
		}
		wake = k.m.Reach(k.m.free)
		switch {
		case k.m.free-v > k.m.cap:
			want = admit.ErrQueueFull
			k.st.Full++
		case wake > buckettest.StreamHorizon:
			want = admit.ErrUnsatisfiable
			k.st.Unsatisfiable++
		case kind == "deadline" && wake-e > hour+int64(time.Minute):
			want = admit.ErrDeadline
			k.st.DeadlineErr++
		default:
			if kind == "deadline" && wake-e > hour-int64(time.Minute) {
				kind = "plain" // too close to the real deadline to call
			}
			if kind == "deadline" {
				k.st.DeadlineSleep++
			}
			queue = true
			k.m.q = append(k.m.q, &mslot{id: k.ids, start: k.m.free, need: n << k.m.Shift})
			k.m.free += n << k.m.Shift
			k.st.Queued++
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	if kind == "deadline" {
		ctx, cancel = context.WithTimeout(context.Background(), time.Hour)
	}
	if kind == "cancelled" {
		cancel()
	}
	w := &lbWaiter{id: k.ids, n: n, deaf: kind == "deaf", cancel: cancel, done: make(chan struct{})}
	k.ids++
	k.log("#%d AcquireN(%d) %s: queue=%v wake=%d want %v", w.id, n, kind, queue, wake, want)
	go func() {
		defer close(w.done)
		w.err = k.b.AcquireN(context.WithValue(ctx, lbKey{}, w), n)
		k.clk.mu.Lock()
		k.clk.notifyLocked()
		k.clk.mu.Unlock()
	}()
	if queue {
		k.live[w.id] = w
		k.settled()
		return
	}
	defer cancel()
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		k.fail("#%d AcquireN(%d) did not return", w.id, n)
	}
	if !errors.Is(w.err, want) || (want == nil) != (w.err == nil) {
		k.fail("#%d AcquireN(%d) = %v, want %v", w.id, n, w.err, want)
	}
	k.settled()
}

// cancel cancels live caller id and checks the outcome: admitted if its
// slot had come due (a deaf caller), else out of the queue, the slots
// behind it moved up.
func (k *lbWalker) cancel(id int) {
	w := k.live[id]
	e := k.elapsed()
	v := k.m.V(e)
	var want error
	at, isDue := k.due[id]
	if !isDue {
		for _, s := range k.m.settle(v) {
			k.markDue(s)
		}
		at, isDue = k.due[id]
	}
	if isDue {
		k.record(at, w.n)
		delete(k.due, id)
		k.st.DueOnCancel++
	} else {
		want = context.Canceled
		i := slices.IndexFunc(k.m.q, func(s *mslot) bool { return s.id == id })
		if i < 0 {
			k.fail("#%d is live but neither queued nor due", id)
		}
		need := k.m.q[i].need
		for _, s := range k.m.q[i+1:] {
			s.start -= need
			k.st.MovedUp++
		}
		k.m.q = slices.Delete(k.m.q, i, i+1)
		k.m.free -= need
		k.st.Undone++
	}
	k.log("cancel #%d: want %v", id, want)
	w.cancel()
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		k.fail("cancelled #%d did not return", id)
	}
	delete(k.live, id)
	if (want == nil) != (w.err == nil) || !errors.Is(w.err, want) {
		k.fail("cancelled #%d returned %v, want %v", id, w.err, want)
	}
	k.settled()
}

// advance moves the clock and checks that exactly the sleepers whose slot
// it reaches return, admitted.
func (k *lbWalker) advance() {
	now := k.clk.Now()
	next := int64(math.MaxInt64)
	for _, s := range k.m.q {
		if !k.live[s.id].deaf {
			next = min(next, k.origin+k.m.Reach(s.start))
		}
	}
	var to int64
	switch x := k.r.IntN(20); {
	case x < 4 && next != math.MaxInt64:
		to = next
	case x < 6 && next != math.MaxInt64:
		to = next - 1
	case x < 8:
		to = now + 1
	case x < 11:
		to = now + k.period
	case x < 13:
		to = now + k.r.Int64N(3*k.period+1)
	case x == 13:
		to = now + int64(24*time.Hour)*(1+k.r.Int64N(400))
		k.st.Years++
	case x == 14:
		to = k.origin - 1 - k.r.Int64N(int64(time.Hour))
		k.st.BeforeOrigin++
	case x < 18:
		to = now - 1 - k.r.Int64N(2*k.period)
		k.st.Backward++
	default:
		to = now + k.r.Int64N(int64(time.Second))
	}
	if to-k.origin > buckettest.StreamHorizon/2 {
		to = k.origin + k.r.Int64N(1<<40)
	}
	k.clk.Set(to)
	e := k.elapsed()
	var woken []*mslot
	for _, s := range k.m.q {
		if !k.live[s.id].deaf && k.origin+k.m.Reach(s.start) <= to {
			woken = append(woken, s)
		}
	}
	k.log("Set(%d): %d woken", to, len(woken))
	if len(woken) > 0 {
		for _, s := range k.m.settle(k.m.V(e)) {
			if k.live[s.id].deaf {
				k.markDue(s)
			}
		}
	}
	for _, s := range woken {
		w := k.live[s.id]
		select {
		case <-w.done:
		case <-time.After(10 * time.Second):
			k.fail("#%d was not woken at its slot %d", s.id, k.origin+k.m.Reach(s.start))
		}
		if w.err != nil {
			k.fail("woken #%d returned %v", s.id, w.err)
		}
		k.record(k.m.Reach(s.start), w.n)
		delete(k.live, s.id)
		k.st.Woken++
	}
	k.settled()
}

// settled waits until every live caller is asleep until its model instant
// (a due deaf caller, asleep at all), no other has returned, and the fake
// clock holds exactly that many sleepers.
func (k *lbWalker) settled() {
	expect := map[int]int64{}
	for _, s := range k.m.q {
		expect[s.id] = k.origin + k.m.Reach(s.start)
	}
	timeout := time.After(10 * time.Second)
	for {
		k.clk.mu.Lock()
		ch := k.clk.changed
		ok, why := true, ""
		for id, w := range k.live {
			select {
			case <-w.done:
				k.clk.mu.Unlock()
				k.fail("#%d returned %v while the model has it waiting", id, w.err)
			default:
			}
			dl, queued := expect[id]
			if !w.asleep || queued && w.deadline != dl {
				ok, why = false, fmt.Sprintf("#%d asleep=%v until %d, want until %d (queued=%v)", id, w.asleep, w.deadline, dl, queued)
				break
			}
		}
		k.clk.mu.Unlock()
		if ok {
			break
		}
		select {
		case <-ch:
		case <-timeout:
			k.fail("callers did not settle: %s", why)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := k.clk.WaitForSleepers(ctx, len(k.live)); err != nil {
		k.fail("%d sleepers on the clock, want %d", k.clk.Sleepers(), len(k.live))
	}
}

// checkRecord checks the package doc's guarantees on the admissions alone.
func (k *lbWalker) checkRecord() {
	a := slices.Clone(k.adm)
	slices.SortStableFunc(a, func(x, y lbAdm) int { return cmp.Compare(x.at, y.at) })
	// No burst, nothing early: in time order, each admission is at least
	// the previous one's size later on the stream.
	for i := 1; i < len(a); i++ {
		if gap := k.m.V(a[i].at) - k.m.V(a[i-1].at); gap < a[i-1].n<<k.m.Shift {
			k.fail("admissions at %d (n=%d) and %d (n=%d) are %d units apart, want >= %d",
				a[i-1].at, a[i-1].n, a[i].at, a[i].n, gap, a[i-1].n<<k.m.Shift)
		}
	}
	// The declared bound on every window: ⌊rate × T'⌋ + n, T' the span
	// plus one unit of the stream in time (2^64/R ns: under 2 ns unless the
	// capacity is too large for the rate), the rate read as its shortest
	// decimal, as internal/refill documents. (Against the float64's exact
	// value the bound fails by one over a year of back-to-back slots of
	// 1e9 tokens at 7.3 per second, the float64 7.3 being a hair less.)
	rat, _ := new(big.Rat).SetString(strconv.FormatFloat(k.rate, 'g', -1, 64))
	unit := new(big.Rat).SetFrac(new(big.Int).Lsh(big.NewInt(1), 64), k.m.R)
	for i := range a {
		sum := int64(0)
		for j := i; j < len(a); j++ {
			sum += a[j].n
			tp := new(big.Rat).Add(new(big.Rat).SetInt64(a[j].at-a[i].at), unit)
			tp.Mul(tp, rat).Quo(tp, big.NewRat(1e9, 1))
			b := new(big.Int).Quo(tp.Num(), tp.Denom())
			if b.Cmp(big.NewInt(1<<40)) > 0 {
				break
			}
			if sum > b.Int64()+k.maxN {
				k.fail("%d admitted in [%d, %d], the bound ⌊rate×T'⌋+n is %d", sum, a[i].at, a[j].at, b.Int64()+k.maxN)
			}
		}
	}
	// No slot opens a whole unit or more before the exact n/rate after the
	// admission before it: the rounding of the reading at that admission is
	// less than a unit. (A unit lasts under 2 ns unless the capacity is too
	// large for the rate: TestEarlyByOneUnit.)
	for i := 1; i < len(a); i++ {
		gap := new(big.Rat).Add(new(big.Rat).SetInt64(a[i].at-a[i-1].at), unit)
		exact := new(big.Rat).Quo(big.NewRat(a[i-1].n*1e9, 1), rat)
		exact.Mul(exact, big.NewRat(1<<50-1, 1<<50)) // 0.3333333333333333 is a hair below 1/3
		if gap.Cmp(exact) <= 0 {
			k.fail("admissions at %d (n=%d) and %d: a unit (%s ns) or more before the exact %s ns", a[i-1].at, a[i-1].n, a[i].at,
				unit.FloatString(3), exact.FloatString(3))
		}
	}
}
