package chanpool_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/chanpool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// res is a pooled resource that detects being held by two leases at once
// and being destroyed more than once.
type res struct {
	id        int
	held      atomic.Int32
	destroyed atomic.Int32
}

// factory creates and destroys res values and records everything it sees.
type factory struct {
	mu      sync.Mutex
	made    []*res
	killed  []int // ids in destruction order
	nextID  int
	alive   atomic.Int64
	peak    atomic.Int64              // most resources alive at once
	failErr error                     // create fails with it while set; requires mu
	hook    func(ctx context.Context) // called inside create, before it returns
}

var errCreate = errors.New("create failed")

func (f *factory) create(ctx context.Context) (*res, error) {
	if f.hook != nil {
		f.hook(ctx)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failErr != nil {
		return nil, f.failErr
	}
	f.nextID++
	r := &res{id: f.nextID}
	f.made = append(f.made, r)
	n := f.alive.Add(1)
	for p := f.peak.Load(); n > p && !f.peak.CompareAndSwap(p, n); p = f.peak.Load() {
	}
	return r, nil
}

func (f *factory) destroy(r *res) {
	r.destroyed.Add(1)
	f.alive.Add(-1)
	f.mu.Lock()
	f.killed = append(f.killed, r.id)
	f.mu.Unlock()
}

func (f *factory) setFail(err error) {
	f.mu.Lock()
	f.failErr = err
	f.mu.Unlock()
}

func (f *factory) killedIDs() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.killed...)
}

// checkAllDestroyedOnce asserts that every resource f created was destroyed
// exactly once.
func (f *factory) checkAllDestroyedOnce(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.made {
		assert.Equal(t, int32(1), r.destroyed.Load(), "resource %d destroyed count", r.id)
	}
	assert.Zero(t, f.alive.Load(), "resources alive after Close")
}

func newPool(t *testing.T, capacity int, f *factory, opts ...chanpool.Option[*res]) *chanpool.Pool[*res] {
	t.Helper()
	opts = append([]chanpool.Option[*res]{chanpool.WithDestroy(f.destroy)}, opts...)
	p, err := chanpool.New(capacity, f.create, opts...)
	require.NoError(t, err)
	return p
}

// closeNow closes p, which must have no lease out: with a context that has
// already ended, Close succeeds only if it has nothing to wait for.
func closeNow(t *testing.T, p *chanpool.Pool[*res]) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, p.Close(ctx), "a lease is still out")
}

// acquireAsync runs p.Acquire(ctx) in a goroutine and returns the channel
// its lease arrives on, closed after it, or without one if Acquire fails.
func acquireAsync(ctx context.Context, p *chanpool.Pool[*res]) <-chan chanpool.Lease[*res] {
	ch := make(chan chanpool.Lease[*res], 1)
	go func() {
		if l, err := p.Acquire(ctx); err == nil {
			ch <- l
		}
		close(ch)
	}()
	return ch
}

// waitBlocked returns once exactly n goroutines are parked in a select
// inside a function whose stack frame contains frame. Parked means the
// goroutine has enqueued itself on the channels of the select, which is
// what makes the order of waiters deterministic. It yields between looks;
// it never sleeps.
func waitBlocked(t *testing.T, frame string, n int) {
	t.Helper()
	buf := make([]byte, 1<<16)
	for {
		k := runtime.Stack(buf, true)
		if k == len(buf) {
			buf = make([]byte, 2*len(buf))
			continue
		}
		count := 0
		for _, g := range strings.Split(string(buf[:k]), "\n\n") {
			header, body, _ := strings.Cut(g, "\n")
			if strings.Contains(header, "[select") && strings.Contains(body, frame) {
				count++
			}
		}
		if count == n {
			return
		}
		require.Less(t, count, n, "more goroutines blocked in %s than expected", frame)
		runtime.Gosched()
	}
}

const (
	waitFrame  = "chanpool.(*Pool[...]).wait("
	closeFrame = "chanpool.(*Pool[...]).Close("
)

func TestNewRejectsInvalidConfig(t *testing.T) {
	create := func(context.Context) (int, error) { return 0, nil }
	cases := []struct {
		name     string
		capacity int
		create   func(context.Context) (int, error)
		opts     []chanpool.Option[int]
	}{
		{"capacity=0", 0, create, nil},
		{"capacity=-1", -1, create, nil},
		{"create=nil", 1, nil, nil},
		{"option=nil", 1, create, []chanpool.Option[int]{nil}},
		{"destroy=nil", 1, create, []chanpool.Option[int]{chanpool.WithDestroy[int](nil)}},
		{"validate=nil", 1, create, []chanpool.Option[int]{chanpool.WithValidate[int](nil)}},
		{"validateAfter<0", 1, create, []chanpool.Option[int]{chanpool.WithValidateAfter[int](-1)}},
		{"maxIdle=0", 1, create, []chanpool.Option[int]{chanpool.WithMaxIdleTime[int](0)}},
		{"maxLifetime<0", 1, create, []chanpool.Option[int]{chanpool.WithMaxLifetime[int](-time.Second)}},
		{"maxWaiters<0", 1, create, []chanpool.Option[int]{chanpool.WithMaxWaiters[int](-1)}},
		{"clock=nil", 1, create, []chanpool.Option[int]{chanpool.WithClock[int](nil)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := chanpool.New(c.capacity, c.create, c.opts...)
			require.ErrorIs(t, err, admit.ErrInvalidConfig)
			assert.Contains(t, err.Error(), "chanpool:")
			assert.Nil(t, p)
		})
	}
}

func TestCreatesLazilyUpToCapacity(t *testing.T) {
	f := &factory{}
	p := newPool(t, 3, f)
	assert.Zero(t, p.Stats().Created, "New creates nothing")

	for range 10 {
		l, err := p.Acquire(context.Background())
		require.NoError(t, err)
		assert.Equal(t, 1, l.Value().id, "an idle resource is reused before a new one is made")
		l.Release()
	}
	require.Equal(t, uint64(1), p.Stats().Created)

	var ls []chanpool.Lease[*res]
	for range 3 {
		l, ok := p.TryAcquire()
		require.True(t, ok)
		ls = append(ls, l)
	}
	_, ok := p.TryAcquire()
	assert.False(t, ok, "TryAcquire beyond capacity")
	st := p.Stats()
	assert.Equal(t, uint64(3), st.Created)
	assert.Equal(t, 3, st.InUse)
	assert.Zero(t, st.Idle)
	for _, l := range ls {
		l.Release()
	}
	st = p.Stats()
	assert.Equal(t, 3, st.Idle)
	assert.Zero(t, st.InUse)
	assert.Equal(t, uint64(13), st.Acquires)
	closeNow(t, p)
	f.checkAllDestroyedOnce(t)
}

// TestWaitersServedInArrivalOrder parks waiters one at a time and checks
// that released resources reach them first in, first out, and that the
// resource goes from one waiter to the next without a new one being made.
func TestWaitersServedInArrivalOrder(t *testing.T) {
	const waiters = 8
	f := &factory{}
	p := newPool(t, 1, f)
	held, err := p.Acquire(context.Background())
	require.NoError(t, err)

	order := make(chan int, waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Go(func() {
			l, err := p.Acquire(context.Background())
			if err != nil {
				order <- -1
				return
			}
			order <- i*100 + l.Value().id
			l.Release()
		})
		waitBlocked(t, waitFrame, i+1)
	}
	assert.Equal(t, waiters, p.Stats().Waiting)
	held.Release()
	wg.Wait()
	close(order)
	var got []int
	for v := range order {
		got = append(got, v)
	}
	want := make([]int, waiters)
	for i := range want {
		want[i] = i*100 + 1 // waiter i, resource 1
	}
	assert.Equal(t, want, got)
	st := p.Stats()
	assert.Equal(t, uint64(1), st.Created)
	assert.Equal(t, uint64(waiters), st.Waits)
	closeNow(t, p)
	f.checkAllDestroyedOnce(t)
}

// TestReleaseGoesToWaiterNotNewcomer checks that a release with a caller
// queued hands the resource to that caller inside the Release itself, so
// that a newcomer asking right after finds nothing, even before the waiter
// has run.
func TestReleaseGoesToWaiterNotNewcomer(t *testing.T) {
	f := &factory{}
	p := newPool(t, 1, f)
	held, err := p.Acquire(context.Background())
	require.NoError(t, err)
	proceed := make(chan struct{})
	got := make(chan int, 1)
	go func() {
		l, err := p.Acquire(context.Background())
		if err != nil {
			close(got)
			return
		}
		got <- l.Value().id
		<-proceed
		l.Release()
	}()
	waitBlocked(t, waitFrame, 1)
	held.Release()
	_, ok := p.TryAcquire()
	assert.False(t, ok, "a newcomer took the resource released to a waiter")
	assert.Equal(t, 1, <-got)
	close(proceed)
	l, err := p.Acquire(context.Background()) // after the waiter's release
	require.NoError(t, err)
	l.Release()
	closeNow(t, p)
	f.checkAllDestroyedOnce(t)
}

func TestLeaseMisusePanicsWithoutCorruptingPool(t *testing.T) {
	f := &factory{}
	p := newPool(t, 1, f)
	ctx := context.Background()

	l, err := p.Acquire(ctx)
	require.NoError(t, err)
	l.Release()
	assert.PanicsWithValue(t, "chanpool: Release called on a Lease that was already released or destroyed", l.Release)
	assert.PanicsWithValue(t, "chanpool: Destroy called on a Lease that was already released or destroyed", l.Destroy)
	assert.PanicsWithValue(t, "chanpool: Value called on a Lease that was already released or destroyed", func() { l.Value() })

	// The slot goes to a new lease; the stale one must not touch it.
	l2, err := p.Acquire(ctx)
	require.NoError(t, err)
	assert.PanicsWithValue(t, "chanpool: Release called on a stale Lease: it was released and its slot has since been leased again", l.Release)
	assert.PanicsWithValue(t, "chanpool: Destroy called on a stale Lease: it was released and its slot has since been leased again", l.Destroy)
	assert.Equal(t, 1, l2.Value().id, "the current lease still works")
	assert.Equal(t, 1, p.Stats().InUse)
	_, ok := p.TryAcquire()
	assert.False(t, ok, "the stale Release did not free the slot")
	l2.Destroy()
	assert.Panics(t, l2.Release)
	assert.Equal(t, []int{1}, f.killedIDs(), "destroyed once")

	var zero chanpool.Lease[*res]
	assert.PanicsWithValue(t, "chanpool: Release called on the zero Lease", zero.Release)
	assert.PanicsWithValue(t, "chanpool: Destroy called on the zero Lease", zero.Destroy)
	assert.PanicsWithValue(t, "chanpool: Value called on the zero Lease", func() { zero.Value() })

	// After all that the pool still has exactly its one slot.
	l3, ok := p.TryAcquire()
	require.True(t, ok)
	assert.Equal(t, 2, l3.Value().id)
	_, ok = p.TryAcquire()
	assert.False(t, ok)
	l3.Release()
	st := p.Stats()
	assert.Equal(t, 1, st.Idle)
	assert.Equal(t, uint64(1), st.DestroyedCaller)
	closeNow(t, p)
	f.checkAllDestroyedOnce(t)
}

func TestCreateErrorIsWrappedAndFreesSlot(t *testing.T) {
	f := &factory{}
	p := newPool(t, 1, f)
	f.setFail(errCreate)
	_, err := p.Acquire(context.Background())
	require.ErrorIs(t, err, errCreate)
	assert.True(t, strings.HasPrefix(err.Error(), "chanpool: create: "), err.Error())
	_, ok := p.TryAcquire()
	assert.False(t, ok)
	assert.Equal(t, uint64(2), p.Stats().CreateErrors)

	f.setFail(nil)
	l, ok := p.TryAcquire()
	require.True(t, ok, "the failed creations gave the slot back")
	l.Release()
	closeNow(t, p)
	f.checkAllDestroyedOnce(t)
}

// TestCreateErrorDiscardsValue pins the documented rule for a create that
// returns a value together with an error: the value is neither handed out
// nor passed to the destroy hook, and the slot is free again.
func TestCreateErrorDiscardsValue(t *testing.T) {
	fail := true
	var destroyed atomic.Int64
	p, err := chanpool.New(1, func(context.Context) (*int, error) {
		v := 7
		if fail {
			return &v, errors.New("half-built")
		}
		return &v, nil
	}, chanpool.WithDestroy(func(*int) { destroyed.Add(1) }))
	require.NoError(t, err)
	_, err = p.Acquire(context.Background())
	require.ErrorContains(t, err, "half-built")
	_, ok := p.TryAcquire()
	assert.False(t, ok)
	assert.Zero(t, destroyed.Load(), "a value returned with an error is not destroyed")
	assert.Equal(t, uint64(2), p.Stats().CreateErrors)
	fail = false
	l, ok := p.TryAcquire()
	require.True(t, ok, "the failed creations freed the slot")
	assert.Equal(t, 7, *l.Value())
	l.Release()
	require.NoError(t, p.Close(context.Background()))
	assert.Equal(t, int64(1), destroyed.Load(), "Close destroys the one good value")
}

func TestCreatePanicFreesSlot(t *testing.T) {
	boom := true
	p, err := chanpool.New(1, func(context.Context) (int, error) {
		if boom {
			panic("boom")
		}
		return 7, nil
	})
	require.NoError(t, err)
	assert.PanicsWithValue(t, "boom", func() { p.TryAcquire() })
	assert.Zero(t, p.Stats().Creating)
	assert.Equal(t, uint64(1), p.Stats().CreateErrors, "a panicking create is a failed create")
	assert.PanicsWithValue(t, "boom", func() { _, _ = p.Acquire(context.Background()) })
	assert.Equal(t, uint64(2), p.Stats().CreateErrors)
	assert.Zero(t, p.Stats().Created)
	boom = false
	l, ok := p.TryAcquire()
	require.True(t, ok)
	assert.Equal(t, 7, l.Value())
	l.Release()
	require.NoError(t, p.Close(context.Background()))
}

func TestAcquireWithEndedContext(t *testing.T) {
	f := &factory{}
	p := newPool(t, 1, f)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.Acquire(ctx)
	assert.Same(t, context.Canceled, err, "ctx.Err() unchanged")
	assert.Zero(t, p.Stats().Created)
	assert.Equal(t, uint64(1), p.Stats().CancelledAcquires)
	closeNow(t, p)
}

func TestContextEndsWhileWaiting(t *testing.T) {
	f := &factory{}
	p := newPool(t, 1, f)
	held, err := p.Acquire(context.Background())
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := p.Acquire(ctx)
		errc <- err
	}()
	waitBlocked(t, waitFrame, 1)
	cancel()
	assert.Same(t, context.Canceled, <-errc)

	held.Release()
	l, ok := p.TryAcquire()
	require.True(t, ok, "the cancelled waiter did not keep the slot")
	assert.Equal(t, 1, l.Value().id)
	l.Release()
	st := p.Stats()
	assert.Equal(t, uint64(1), st.CancelledAcquires)
	assert.Zero(t, st.Waiting)
	closeNow(t, p)
	f.checkAllDestroyedOnce(t)
}

func TestContextEndsWhileCreatingKeepsResource(t *testing.T) {
	f := &factory{}
	ctx, cancel := context.WithCancel(context.Background())
	f.hook = func(context.Context) { cancel() }
	p := newPool(t, 1, f)
	_, err := p.Acquire(ctx)
	assert.Same(t, context.Canceled, err)
	st := p.Stats()
	assert.Equal(t, 1, st.Idle, "the resource made joined the idle inventory")
	assert.Equal(t, uint64(1), st.Created)

	f.hook = nil
	l, err := p.Acquire(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, l.Value().id)
	assert.Equal(t, uint64(1), p.Stats().Created, "reused, not recreated")
	l.Release()
	closeNow(t, p)
	f.checkAllDestroyedOnce(t)
}

func TestContextEndsAndCreateFails(t *testing.T) {
	f := &factory{}
	ctx, cancel := context.WithCancel(context.Background())
	f.hook = func(context.Context) { cancel() }
	f.setFail(errCreate)
	p := newPool(t, 1, f)
	_, err := p.Acquire(ctx)
	assert.Same(t, context.Canceled, err, "ctx.Err() wins over the create error it probably caused")
	f.hook = nil
	f.setFail(nil)
	l, ok := p.TryAcquire()
	require.True(t, ok)
	l.Release()
	closeNow(t, p)
	f.checkAllDestroyedOnce(t)
}

func TestMaxIdleTime(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	f := &factory{}
	p := newPool(t, 2, f, chanpool.WithMaxIdleTime[*res](time.Minute), chanpool.WithClock[*res](clk))

	l, err := p.Acquire(context.Background())
	require.NoError(t, err)
	clk.Advance(time.Hour) // time leased does not count as idle
	l.Release()
	clk.Advance(time.Minute - 1)
	l, err = p.Acquire(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, l.Value().id, "idle just under the limit")
	l.Release()
	clk.Advance(time.Minute)
	l, err = p.Acquire(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 2, l.Value().id, "idle for the limit: replaced")
	assert.Equal(t, []int{1}, f.killedIDs())
	assert.Equal(t, uint64(1), p.Stats().DestroyedIdle)
	l.Release()
	closeNow(t, p)
	f.checkAllDestroyedOnce(t)
}

func TestMaxLifetime(t *testing.T) {
	const lifetime = 10 * time.Second
	clk := buckettest.NewFakeClock(0)
	f := &factory{}
	p := newPool(t, 1, f, chanpool.WithMaxLifetime[*res](lifetime), chanpool.WithClock[*res](clk))

	l, err := p.Acquire(context.Background())
	require.NoError(t, err)
	l.Release()
	clk.Set(int64(lifetime)*9/10 - 1) // no jitter makes a resource this young expire
	l, err = p.Acquire(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, l.Value().id)
	clk.Set(int64(lifetime)) // still leased: not taken back
	assert.Equal(t, 1, l.Value().id)
	l.Release()
	l, err = p.Acquire(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 2, l.Value().id, "at the lifetime it is replaced at checkout")
	assert.Equal(t, uint64(1), p.Stats().DestroyedLifetime)
	l.Release()
	closeNow(t, p)
	f.checkAllDestroyedOnce(t)
}

// TestLifetimeJitterSpreadsExpiry creates resources together and checks
// that they expire within [0.9, 1] of the lifetime, not all at once.
func TestLifetimeJitterSpreadsExpiry(t *testing.T) {
	const (
		n        = 32
		lifetime = time.Hour
	)
	for seq := uint64(1); seq <= 1000; seq++ {
		j := chanpool.LifetimeJitter(seq, int64(lifetime))
		require.GreaterOrEqual(t, j, int64(0))
		require.Less(t, j, int64(lifetime)/10)
	}
	assert.Zero(t, chanpool.LifetimeJitter(1, 9), "no jitter for a lifetime under 10ns")

	clk := buckettest.NewFakeClock(0)
	f := &factory{}
	p := newPool(t, n, f, chanpool.WithMaxLifetime[*res](lifetime), chanpool.WithClock[*res](clk))
	cycle := func() { // check out every slot, then return them all
		ls := make([]chanpool.Lease[*res], n)
		for i := range ls {
			var ok bool
			ls[i], ok = p.TryAcquire()
			require.True(t, ok)
		}
		for _, l := range ls {
			l.Release()
		}
	}
	cycle()
	require.Equal(t, uint64(n), p.Stats().Created)

	const steps = 10
	expiredAt := map[int]bool{} // which of the steps saw expiries
	for i := 0; i <= steps; i++ {
		clk.Set(int64(lifetime)*9/10 + int64(lifetime)/10*int64(i)/steps - 1)
		before := p.Stats().DestroyedLifetime
		cycle()
		if p.Stats().DestroyedLifetime > before {
			expiredAt[i] = true
		}
		if i == 0 {
			assert.Zero(t, p.Stats().DestroyedLifetime, "none expires before 0.9 of its lifetime")
		}
	}
	clk.Set(int64(lifetime))
	cycle()
	assert.Equal(t, uint64(n), p.Stats().DestroyedLifetime, "all expired by the lifetime, their replacements not yet")
	assert.Greater(t, len(expiredAt), 3, "expiries spread over the jitter window, not all at once")
	closeNow(t, p)
	f.checkAllDestroyedOnce(t)
}

func TestValidateReplacesBadResource(t *testing.T) {
	f := &factory{}
	var calls atomic.Int32
	bad := map[int]bool{1: true}
	var mu sync.Mutex
	p := newPool(t, 1, f, chanpool.WithValidate(func(_ context.Context, r *res) error {
		calls.Add(1)
		mu.Lock()
		defer mu.Unlock()
		if bad[r.id] {
			return errors.New("bad")
		}
		return nil
	}))
	l, err := p.Acquire(context.Background())
	require.NoError(t, err)
	assert.Zero(t, calls.Load(), "a new resource is not validated")
	l.Release()
	l, err = p.Acquire(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 2, l.Value().id, "the caller never sees the bad resource")
	assert.Equal(t, int32(1), calls.Load())
	assert.Equal(t, []int{1}, f.killedIDs())
	l.Release()
	l, err = p.Acquire(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 2, l.Value().id, "a good resource is kept")
	assert.Equal(t, int32(2), calls.Load())
	l.Release()
	assert.Equal(t, uint64(1), p.Stats().DestroyedValidation)
	closeNow(t, p)
	f.checkAllDestroyedOnce(t)
}

func TestValidateAfterSkipsRecentlyUsed(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	f := &factory{}
	var calls atomic.Int32
	p := newPool(t, 1, f,
		chanpool.WithValidate(func(context.Context, *res) error { calls.Add(1); return nil }),
		chanpool.WithValidateAfter[*res](500*time.Millisecond),
		chanpool.WithClock[*res](clk))
	l, err := p.Acquire(context.Background())
	require.NoError(t, err)
	clk.Advance(time.Hour)
	l.Release() // last used now
	clk.Advance(500*time.Millisecond - 1)
	l, err = p.Acquire(context.Background())
	require.NoError(t, err)
	assert.Zero(t, calls.Load(), "used within 500ms: not validated")
	l.Release()
	clk.Advance(500 * time.Millisecond)
	l, err = p.Acquire(context.Background())
	require.NoError(t, err)
	assert.Equal(t, int32(1), calls.Load(), "idle for 500ms: validated")
	l.Release()
	closeNow(t, p)
	f.checkAllDestroyedOnce(t)
}

func TestValidateEndedByContextKeepsResource(t *testing.T) {
	f := &factory{}
	ctx, cancel := context.WithCancel(context.Background())
	p := newPool(t, 1, f, chanpool.WithValidate(func(ctx context.Context, _ *res) error {
		cancel()
		return ctx.Err()
	}))
	l, ok := p.TryAcquire()
	require.True(t, ok)
	l.Release()
	_, err := p.Acquire(ctx)
	assert.Same(t, context.Canceled, err)
	st := p.Stats()
	assert.Equal(t, 1, st.Idle, "kept, not destroyed")
	assert.Zero(t, st.DestroyedValidation)
	closeNow(t, p)
	f.checkAllDestroyedOnce(t)
}

func TestMaxWaitersFailsFast(t *testing.T) {
	f := &factory{}
	p := newPool(t, 1, f, chanpool.WithMaxWaiters[*res](1))
	held, err := p.Acquire(context.Background())
	require.NoError(t, err)

	got := make(chan error, 1)
	go func() {
		l, err := p.Acquire(context.Background())
		if err == nil {
			l.Release()
		}
		got <- err
	}()
	waitBlocked(t, waitFrame, 1)
	_, err = p.Acquire(context.Background())
	require.ErrorIs(t, err, chanpool.ErrSaturated)
	assert.Equal(t, uint64(1), p.Stats().SaturatedAcquires)
	held.Release()
	require.NoError(t, <-got, "the admitted waiter still gets the resource")
	closeNow(t, p)
	f.checkAllDestroyedOnce(t)

	p0 := newPool(t, 1, &factory{}, chanpool.WithMaxWaiters[*res](0))
	l, err := p0.Acquire(context.Background())
	require.NoError(t, err)
	_, err = p0.Acquire(context.Background())
	require.ErrorIs(t, err, chanpool.ErrSaturated, "WithMaxWaiters(0) never waits")
	l.Release()
	closeNow(t, p0)
}

// TestRefusedCallerIsNotAWaiter checks that a caller refused with
// ErrSaturated never counts against the waiters' bound, not even while it
// is being refused: a caller arriving then, with nobody waiting any more,
// waits instead of being refused too.
func TestRefusedCallerIsNotAWaiter(t *testing.T) {
	f := &factory{}
	p := newPool(t, 1, f, chanpool.WithMaxWaiters[*res](1))
	held, err := p.Acquire(context.Background())
	require.NoError(t, err)
	first := acquireAsync(context.Background(), p)
	waitBlocked(t, waitFrame, 1)

	// While the second caller is being refused (the first waits), the
	// first gets the resource and leaves the queue, and a third caller
	// comes: nobody waits, so it may. Its context ends its wait.
	var third error
	hooked := false // the hook runs on this goroutine alone
	chanpool.SetTestHookSaturated(func() {
		if hooked {
			return // the third caller refused
		}
		hooked = true
		held.Release()
		held = <-first
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		_, third = p.Acquire(ctx)
	})
	defer chanpool.SetTestHookSaturated(nil)
	_, err = p.Acquire(context.Background())
	require.ErrorIs(t, err, chanpool.ErrSaturated, "the first caller waited when the second came")
	require.ErrorIs(t, third, context.DeadlineExceeded, "the third caller found nobody waiting and waited")
	require.NotErrorIs(t, third, chanpool.ErrSaturated)
	assert.Equal(t, uint64(1), p.Stats().SaturatedAcquires)
	held.Release()
	closeNow(t, p)
	f.checkAllDestroyedOnce(t)
}

// TestServedWaiterIsNotAWaiter: a waiter handed the resource by a Release
// stops counting at the hand-off, not when it runs again (on another
// processor, microseconds later; the hook holds it there). Counted until
// then, it made a caller arriving in between find the bound reached and be
// refused with nobody left waiting: a pool of one with WithMaxWaiters(1),
// used by two goroutines, refused thousands of times a second.
func TestServedWaiterIsNotAWaiter(t *testing.T) {
	f := &factory{}
	p := newPool(t, 1, f, chanpool.WithMaxWaiters[*res](1))
	held, err := p.Acquire(context.Background())
	require.NoError(t, err)
	gate := make(chan struct{})
	chanpool.SetTestHookReceived(func() { <-gate })
	defer chanpool.SetTestHookReceived(nil)
	served := make(chan chanpool.Lease[*res], 1)
	go func() {
		l, err := p.Acquire(context.Background())
		if err != nil {
			close(served)
			return
		}
		served <- l
	}()
	waitBlocked(t, waitFrame, 1)
	held.Release() // handed to the waiter, which is held in the hook

	assert.Zero(t, p.Stats().Waiting, "the served waiter still counts")
	// A caller arriving now is the only one waiting: it waits (until its
	// context ends), and is not refused.
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for p.Stats().Waiting == 0 {
			runtime.Gosched()
		}
		cancel()
	}()
	_, err = p.Acquire(ctx)
	require.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, p.Stats().SaturatedAcquires)

	close(gate)
	l, ok := <-served
	require.True(t, ok, "the waiter was refused the resource handed to it")
	assert.Zero(t, p.Stats().Waiting)
	l.Release()
	closeNow(t, p)
	f.checkAllDestroyedOnce(t)
}

func TestCloseDestroysIdleAtOnceAndLeasedOnRelease(t *testing.T) {
	f := &factory{}
	p := newPool(t, 3, f)
	a, _ := p.TryAcquire()
	b, _ := p.TryAcquire()
	c, _ := p.TryAcquire()
	a.Release()
	b.Release()

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := p.Close(ctx)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, "chanpool: close: 1 slot(s) still in use (leased or being checked out): context canceled", err.Error())
	assert.ElementsMatch(t, []int{1, 2}, f.killedIDs(), "idle ones destroyed at once")

	_, err = p.Acquire(context.Background())
	assert.Same(t, chanpool.ErrClosed, err)
	_, ok := p.TryAcquire()
	assert.False(t, ok)

	c.Release()
	assert.ElementsMatch(t, []int{1, 2, 3}, f.killedIDs(), "a lease released after Close is destroyed")
	assert.NoError(t, p.Close(ctx), "idempotent; nothing left out")
	assert.NoError(t, p.Close(context.Background()))
	st := p.Stats()
	assert.Equal(t, uint64(3), st.DestroyedClosed)
	assert.Zero(t, st.Idle)
	assert.Zero(t, st.InUse)
	f.checkAllDestroyedOnce(t)
}

func TestCloseWaitsForLeases(t *testing.T) {
	f := &factory{}
	p := newPool(t, 2, f)
	l, _ := p.TryAcquire()
	d, _ := p.TryAcquire()
	done := make(chan error, 1)
	go func() { done <- p.Close(context.Background()) }()
	waitBlocked(t, closeFrame, 1)
	select {
	case err := <-done:
		t.Fatalf("Close returned %v with leases out", err)
	default:
	}
	d.Destroy()
	l.Release()
	require.NoError(t, <-done)
	st := p.Stats()
	assert.Equal(t, uint64(1), st.DestroyedCaller)
	assert.Equal(t, uint64(1), st.DestroyedClosed)
	f.checkAllDestroyedOnce(t)
}

// TestReleaseRacingCloseIsDestroyed plays the one interleaving the storm
// can hardly hit: a Release reads the pool as open, then Close runs from
// start to finish (it finds the lease out and gives up at once), then the
// Release sends the resource on the channel. The resource must still be
// destroyed, and the pool end with nothing left to wait for.
func TestReleaseRacingCloseIsDestroyed(t *testing.T) {
	f := &factory{}
	p := newPool(t, 1, f)
	l, ok := p.TryAcquire()
	require.True(t, ok)

	var closeErr error
	ran := false
	chanpool.SetTestHookBeforeSend(func() {
		if ran {
			return
		}
		ran = true
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		closeErr = p.Close(ctx)
	})
	defer chanpool.SetTestHookBeforeSend(nil)
	l.Release()
	require.True(t, ran)
	require.ErrorIs(t, closeErr, context.Canceled)
	assert.Contains(t, closeErr.Error(), "1 slot(s) still in use (leased or being checked out)")
	assert.Equal(t, []int{1}, f.killedIDs(), "the late Release destroyed the resource")
	closeNow(t, p)
	f.checkAllDestroyedOnce(t)
}

func TestCloseWakesWaiters(t *testing.T) {
	const waiters = 4
	f := &factory{}
	p := newPool(t, 1, f)
	held, _ := p.TryAcquire()
	errs := make(chan error, waiters)
	for range waiters {
		go func() {
			_, err := p.Acquire(context.Background())
			errs <- err
		}()
	}
	waitBlocked(t, waitFrame, waiters)
	closed := make(chan error, 1)
	go func() { closed <- p.Close(context.Background()) }()
	for range waiters {
		assert.Same(t, chanpool.ErrClosed, <-errs)
	}
	held.Release()
	require.NoError(t, <-closed)
	f.checkAllDestroyedOnce(t)
}

func TestStatsOnFakeClock(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	f := &factory{}
	p := newPool(t, 2, f, chanpool.WithClock[*res](clk))
	a, _ := p.TryAcquire()
	b, _ := p.TryAcquire()
	got := acquireAsync(context.Background(), p)
	waitBlocked(t, waitFrame, 1)
	st := p.Stats()
	assert.Equal(t, 1, st.Waiting)
	assert.Equal(t, 2, st.InUse)
	clk.Advance(3 * time.Second)
	a.Release()
	c := <-got
	b.Destroy()
	st = p.Stats()
	assert.Equal(t, chanpool.Stats{
		Capacity:        2,
		Idle:            0,
		InUse:           1,
		Acquires:        3,
		Waits:           1,
		WaitTime:        3 * time.Second,
		Created:         2,
		DestroyedCaller: 1,
	}, st)
	c.Release()
	closeNow(t, p)
	st = p.Stats()
	assert.Equal(t, uint64(1), st.DestroyedClosed)
	assert.Equal(t, st.Created, st.Destroyed())
	f.checkAllDestroyedOnce(t)
}

func TestAcquireReleaseAllocatesNothing(t *testing.T) {
	// create itself allocates nothing, so any allocation is the pool's.
	p, err := chanpool.New(2, func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		l, err := p.Acquire(ctx)
		if err != nil {
			panic(err)
		}
		l.Release()
		l, _ = p.TryAcquire()
		l.Destroy()
	})
	assert.Zero(t, allocs)
	require.NoError(t, p.Close(ctx))
}

// TestStorm runs goroutines that mix every operation against a small pool,
// with failing creates and validations, cancelled contexts and misuse, and
// checks the pool's invariants: never more than capacity resources alive,
// never one resource under two leases, no slot lost, every resource
// destroyed exactly once after Close. With close=wait, one goroutine closes
// the pool halfway through and waits for the others' leases; with
// close=nowait, it closes with a context that has already ended, so that
// leases still out are destroyed by the Release calls racing with Close.
func TestStorm(t *testing.T) {
	for _, mode := range []string{"none", "wait", "nowait"} {
		t.Run("close="+mode, func(t *testing.T) { storm(t, mode) })
	}
}

func storm(t *testing.T, closeMode string) {
	const (
		capacity   = 4
		goroutines = 16
		ops        = 4000
	)
	f := &factory{}
	var creates atomic.Int64
	failing := atomic.Bool{}
	failing.Store(true)
	f.hook = func(context.Context) {
		if failing.Load() && creates.Add(1)%7 == 0 {
			f.setFail(errCreate)
		} else {
			f.setFail(nil)
		}
		runtime.Gosched()
	}
	var validations atomic.Int64
	p := newPool(t, capacity, f,
		chanpool.WithValidate(func(context.Context, *res) error {
			if failing.Load() && validations.Add(1)%5 == 0 {
				return errors.New("bad")
			}
			return nil
		}))

	var (
		violations atomic.Int64 // a resource seen under two leases
		misuse     atomic.Int64 // a stale Release that did not panic
		unexpected = make(chan error, goroutines*ops)
		closeErr   = make(chan error, 1)
		isClosed   atomic.Bool
	)
	use := func(l chanpool.Lease[*res]) {
		r := l.Value()
		if !r.held.CompareAndSwap(0, 1) {
			violations.Add(1)
			return
		}
		runtime.Gosched()
		r.held.Store(0)
	}
	check := func(err error) {
		switch {
		case err == nil, errors.Is(err, errCreate), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		case errors.Is(err, chanpool.ErrClosed) && isClosed.Load():
		default:
			unexpected <- err
		}
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 42))
			for i := range ops {
				if closeMode != "none" && g == 0 && i == ops/2 {
					isClosed.Store(true)
					ctx, cancel := context.WithCancel(context.Background())
					if closeMode == "nowait" {
						cancel()
					}
					closeErr <- p.Close(ctx)
					cancel()
				}
				switch rng.IntN(10) {
				case 0, 1, 2:
					l, err := p.Acquire(context.Background())
					check(err)
					if err == nil {
						use(l)
						l.Release()
					}
				case 3:
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(20))*time.Microsecond)
					l, err := p.Acquire(ctx)
					cancel()
					check(err)
					if err == nil {
						use(l)
						l.Release()
					}
				case 4:
					ctx, cancel := context.WithCancel(context.Background())
					go cancel()
					l, err := p.Acquire(ctx)
					check(err)
					if err == nil {
						use(l)
						l.Release()
					}
				case 5, 6:
					if l, ok := p.TryAcquire(); ok {
						use(l)
						l.Release()
					}
				case 7:
					l, err := p.Acquire(context.Background())
					check(err)
					if err == nil {
						use(l)
						l.Destroy()
					}
				case 8:
					l, err := p.Acquire(context.Background())
					check(err)
					if err == nil {
						l.Release()
						func() {
							defer func() {
								if recover() == nil {
									misuse.Add(1)
								}
							}()
							l.Release()
						}()
					}
				case 9:
					st := p.Stats()
					// Created is read before the destroyed counters, so
					// their difference never exceeds what was alive.
					if st.InUse > capacity || st.Idle+st.InUse > capacity || st.Creating > capacity ||
						int64(st.Created)-int64(st.Destroyed()) > int64(capacity) {
						unexpected <- fmt.Errorf("stats out of bounds: %+v", st)
					}
				}
			}
		})
	}
	wg.Wait()
	close(unexpected)
	for err := range unexpected {
		t.Errorf("unexpected error: %v", err)
	}
	assert.Zero(t, violations.Load(), "a resource was held by two leases")
	assert.Zero(t, misuse.Load(), "a double Release did not panic")
	assert.LessOrEqual(t, f.peak.Load(), int64(capacity), "more than capacity resources alive")
	assert.Positive(t, p.Stats().Created)
	t.Logf("after the storm: %+v", p.Stats())

	switch closeMode {
	case "wait":
		require.NoError(t, <-closeErr)
	case "nowait":
		if err := <-closeErr; err != nil {
			require.ErrorIs(t, err, context.Canceled)
		}
		closeNow(t, p) // every lease has ended since: nothing left to wait for
	default:
		// No slot lost: capacity acquires succeed at once.
		failing.Store(false)
		ls := make([]chanpool.Lease[*res], capacity)
		for i := range ls {
			var ok bool
			ls[i], ok = p.TryAcquire()
			require.True(t, ok, "slot %d lost", i)
		}
		st := p.Stats()
		assert.Equal(t, capacity, st.InUse)
		assert.Zero(t, st.Waiting)
		assert.Zero(t, st.Creating)
		for _, l := range ls {
			l.Release()
		}
		closeNow(t, p)
	}
	st := p.Stats()
	assert.Equal(t, st.Created, st.Destroyed())
	assert.Zero(t, st.InUse)
	assert.Zero(t, st.Idle)
	f.checkAllDestroyedOnce(t)
	_, err := p.Acquire(context.Background())
	assert.Same(t, chanpool.ErrClosed, err)
}

// TestPanickingDestroyLosesNoSlot checks that a destroy hook that panics,
// at checkout, on Destroy or during Close, propagates its panic but leaves
// the slot usable and lets Close complete.
func TestPanickingDestroyLosesNoSlot(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	f := &factory{}
	p, err := chanpool.New(1, f.create,
		chanpool.WithDestroy(func(*res) { panic("destroy failed") }),
		chanpool.WithMaxIdleTime[*res](time.Second), chanpool.WithClock[*res](clk))
	require.NoError(t, err)

	l, err := p.Acquire(context.Background())
	require.NoError(t, err)
	l.Release()
	clk.Advance(time.Hour)
	assert.PanicsWithValue(t, "destroy failed", func() { p.TryAcquire() }, "expiry at checkout")
	l, ok := p.TryAcquire()
	require.True(t, ok, "the slot came back")
	assert.PanicsWithValue(t, "destroy failed", l.Destroy, "Destroy")
	l, ok = p.TryAcquire()
	require.True(t, ok, "the slot came back again")
	l.Release()

	assert.PanicsWithValue(t, "destroy failed", func() { _ = p.Close(context.Background()) }, "Close destroying the idle resource")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.NoError(t, p.Close(ctx), "the slot was retired despite the panic")
	assert.Equal(t, uint64(3), p.Stats().Destroyed())
}
