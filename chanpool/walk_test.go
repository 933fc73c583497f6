package chanpool_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/chanpool"
)

// behaviour tells the create and validate hooks, through the acquiring
// caller's context, what to do for this call.
type behaviour struct {
	create, validate int
	cancel           context.CancelFunc
}

type behaviourKey struct{}

const (
	hookOK = iota
	hookFail
	hookPanic
	hookBlock        // wait for ctx to end, return ctx.Err()
	hookCancelThenOK // end the caller's ctx, then succeed
	numHookModes
)

var errBad = errors.New("validate: bad")

type panicValue struct{ what string }

// walkCounts is what the walk expects the pool's statistics to say.
type walkCounts struct {
	acquires, cancelled, saturated, createErrors, destroyedValidation, destroyedCaller atomic.Uint64
}

// TestConcurrentWalk drives a pool from several goroutines through
// every state-changing operation, including the hooks' failures, panics and
// context endings at checkout, on a fake clock that goroutines advance, and
// checks every result against the documented contract and the final
// statistics against counts kept by the walk.
func TestConcurrentWalk(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			concurrentWalk(t, seed, false)
		})
	}
}

// TestConcurrentWalkPanickingDestroy is the walk with a destroy hook
// that panics for every seventh resource, after destroying it: the pool
// documents the hook must not panic, but promises to lose no slot if it does.
func TestConcurrentWalkPanickingDestroy(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			concurrentWalk(t, seed, true)
		})
	}
}

// ignoreDestroyPanic runs f, swallowing the destroy hook's panic.
func ignoreDestroyPanic(f func()) {
	defer func() {
		if r := recover(); r != nil {
			if pv, ok := r.(panicValue); !ok || pv.what != "destroy" {
				panic(r)
			}
		}
	}()
	f()
}

func concurrentWalk(t *testing.T, seed uint64, destroyPanics bool) {
	rng0 := rand.New(rand.NewPCG(seed, 7))
	capacity := 1 + rng0.IntN(4)
	maxWaiters := rng0.IntN(5) - 1 // -1: unbounded
	closeMid := rng0.IntN(2) == 0
	const goroutines, ops = 8, 1000

	clk := buckettest.NewFakeClock(0)
	f := &factory{}
	var want walkCounts
	var created atomic.Uint64
	create := func(ctx context.Context) (*res, error) {
		b, _ := ctx.Value(behaviourKey{}).(*behaviour)
		mode := hookOK
		if b != nil {
			mode = b.create
		}
		switch mode {
		case hookFail:
			want.createErrors.Add(1)
			return &res{id: -1}, errCreate
		case hookPanic:
			want.createErrors.Add(1)
			panic(panicValue{"create"})
		case hookBlock:
			<-ctx.Done()
			want.createErrors.Add(1)
			return nil, ctx.Err()
		case hookCancelThenOK:
			b.cancel()
		}
		created.Add(1)
		return f.create(ctx)
	}
	validate := func(ctx context.Context, r *res) error {
		b, _ := ctx.Value(behaviourKey{}).(*behaviour)
		mode := hookOK
		if b != nil {
			mode = b.validate
		}
		switch mode {
		case hookFail:
			want.destroyedValidation.Add(1)
			return errBad
		case hookPanic:
			panic(panicValue{"validate"})
		case hookBlock:
			<-ctx.Done()
			return fmt.Errorf("validate: %w", ctx.Err())
		case hookCancelThenOK:
			b.cancel()
		}
		return nil
	}
	destroy := f.destroy
	if destroyPanics {
		destroy = func(r *res) {
			f.destroy(r)
			if r.id%7 == 0 {
				panic(panicValue{"destroy"})
			}
		}
	}
	opts := []chanpool.Option[*res]{
		chanpool.WithDestroy(destroy),
		chanpool.WithClock[*res](clk),
		chanpool.WithValidate(validate),
	}
	if rng0.IntN(2) == 0 {
		opts = append(opts, chanpool.WithMaxIdleTime[*res](20))
	}
	if rng0.IntN(2) == 0 {
		opts = append(opts, chanpool.WithMaxLifetime[*res](50))
	}
	if rng0.IntN(2) == 0 {
		opts = append(opts, chanpool.WithValidateAfter[*res](5))
	}
	if maxWaiters >= 0 {
		opts = append(opts, chanpool.WithMaxWaiters[*res](maxWaiters))
	}
	p, err := chanpool.New(capacity, create, opts...)
	require.NoError(t, err)

	var (
		closeStarted atomic.Bool
		violations   atomic.Int64
		unexpected   = make(chan string, goroutines*ops)
	)
	bad := func(format string, args ...any) {
		select {
		case unexpected <- fmt.Sprintf(format, args...):
		default:
		}
	}
	use := func(l chanpool.Lease[*res]) {
		r := l.Value()
		if r.id <= 0 || r.destroyed.Load() != 0 {
			bad("handed out a failed or destroyed resource %d", r.id)
		}
		if !r.held.CompareAndSwap(0, 1) {
			violations.Add(1)
			return
		}
		runtime.Gosched()
		r.held.Store(0)
	}
	// end ends a lease by Release or Destroy.
	end := func(rng *rand.Rand, l chanpool.Lease[*res]) {
		if rng.IntN(4) == 0 {
			want.destroyedCaller.Add(1)
			ignoreDestroyPanic(l.Destroy)
		} else {
			ignoreDestroyPanic(l.Release)
		}
	}
	// acquire runs one Acquire (or TryAcquire) with the hooks' behaviour
	// chosen by rng and checks its outcome; it returns a lease or false.
	acquire := func(rng *rand.Rand, mayBlockForever bool) (l chanpool.Lease[*res], ok bool) {
		b := &behaviour{}
		// Mostly well-behaved hooks, so that the pool does real work.
		if rng.IntN(3) == 0 {
			b.create = rng.IntN(numHookModes)
		}
		if rng.IntN(3) == 0 {
			b.validate = rng.IntN(numHookModes)
		}
		base, cancel := context.WithCancel(context.Background())
		defer cancel()
		var ctx context.Context = base
		kind := rng.IntN(5)
		if !mayBlockForever && kind == 0 {
			kind = 1
		}
		switch kind {
		case 0: // never ends, unless a hook ends it
		case 1:
			var c2 context.CancelFunc
			ctx, c2 = context.WithTimeout(base, time.Duration(rng.IntN(50))*time.Microsecond)
			defer c2()
		case 2:
			cancel()
		case 3:
			go cancel()
		case 4: // TryAcquire
		}
		if kind == 0 && (b.create == hookBlock || b.validate == hookBlock) {
			b.create, b.validate = hookOK, hookOK
		}
		b.cancel = cancel
		ctx = context.WithValue(ctx, behaviourKey{}, b)

		var err error
		panicked := func() (rec any) {
			defer func() { rec = recover() }()
			if kind == 4 {
				l, ok = p.TryAcquire()
				if !ok {
					err = errors.New("TryAcquire: false")
				}
				return nil
			}
			l, err = p.Acquire(ctx)
			return nil
		}()
		if panicked != nil {
			pv, isOurs := panicked.(panicValue)
			switch {
			case !isOurs:
				bad("unexpected panic %v", panicked)
			case pv.what == "destroy":
			case pv.what == "create" && b.create != hookPanic,
				pv.what == "validate" && b.validate != hookPanic:
				bad("panic %v without the hook panicking", pv)
			}
			return l, false
		}
		if kind == 4 {
			if err != nil {
				return l, false
			}
		} else {
			switch {
			case err == nil:
			case ctx.Err() != nil && err == ctx.Err():
				want.cancelled.Add(1)
			case err == chanpool.ErrClosed:
				if !closeStarted.Load() {
					bad("ErrClosed before Close")
				}
			case errors.Is(err, chanpool.ErrSaturated):
				want.saturated.Add(1)
				if maxWaiters < 0 {
					bad("ErrSaturated without WithMaxWaiters")
				}
			case errors.Is(err, errCreate):
				if b.create != hookFail {
					bad("create error %v without create failing", err)
				}
			default:
				bad("unexpected error %v (ctx.Err() %v, create mode %d, validate mode %d)", err, ctx.Err(), b.create, b.validate)
			}
			if err != nil {
				return l, false
			}
		}
		want.acquires.Add(1)
		return l, true
	}

	var wg sync.WaitGroup
	var closeErr error
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			var held []chanpool.Lease[*res]
			for i := range ops {
				if closeMid && g == 0 && i == ops/2 {
					closeStarted.Store(true)
					ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
					ignoreDestroyPanic(func() { closeErr = p.Close(ctx) })
					cancel()
				}
				switch r := rng.IntN(12); {
				case r < 6:
					l, ok := acquire(rng, len(held) == 0)
					if ok {
						use(l)
						if len(held) < 2 && rng.IntN(3) == 0 {
							held = append(held, l)
						} else {
							end(rng, l)
						}
					}
				case r < 8:
					if len(held) > 0 {
						k := rng.IntN(len(held))
						end(rng, held[k])
						held = append(held[:k], held[k+1:]...)
					}
				case r < 10:
					clk.Advance(time.Duration(rng.IntN(12)))
				default:
					st := p.Stats()
					if st.InUse > capacity || st.Idle+st.InUse > capacity || st.Creating > capacity ||
						st.Waiting > goroutines || int64(st.Created)-int64(st.Destroyed()) > int64(capacity) {
						bad("stats out of bounds: %+v", st)
					}
				}
			}
			for _, l := range held {
				end(rng, l)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Fatalf("walk stuck:\n%s", buf[:n])
	}
	close(unexpected)
	for s := range unexpected {
		t.Error(s)
	}
	assert.Zero(t, violations.Load(), "a resource under two leases")
	assert.LessOrEqual(t, f.peak.Load(), int64(capacity), "more than capacity resources alive")
	if closeErr != nil {
		assert.ErrorIs(t, closeErr, context.DeadlineExceeded)
	}

	if !closeMid {
		// No slot lost, no waiter counted: capacity TryAcquires succeed.
		st := p.Stats()
		assert.Zero(t, st.Waiting, "waiters counted with nobody waiting: %+v", st)
		assert.Zero(t, st.InUse)
		assert.Zero(t, st.Creating)
		ls := make([]chanpool.Lease[*res], 0, capacity)
		for range capacity {
			var l chanpool.Lease[*res]
			ok := false
			// An expired resource's destroy hook may panic; the slot stays.
			for try := 0; try < 3 && !ok; try++ {
				ignoreDestroyPanic(func() { l, ok = p.TryAcquire() })
			}
			require.True(t, ok, "slot lost: %+v", p.Stats())
			want.acquires.Add(1)
			ls = append(ls, l)
		}
		// Every slot has been taken since the walk: no slot handed to a
		// waiter is in transit, so the raw count is exact.
		assert.Zero(t, chanpool.WaitingCount(p), "raw waiter count with nobody waiting")
		for _, l := range ls {
			l.Release()
		}
	}
	for range capacity + 1 { // each panic in Close leaves the rest for the next
		ignoreDestroyPanic(func() { _ = p.Close(context.Background()) })
	}
	closeNow(t, p)
	st := p.Stats()
	t.Logf("cap %d waiters %d close %v: %+v", capacity, maxWaiters, closeMid, st)
	assert.Equal(t, want.acquires.Load(), st.Acquires, "Acquires")
	assert.Equal(t, want.cancelled.Load(), st.CancelledAcquires, "CancelledAcquires")
	assert.Equal(t, want.saturated.Load(), st.SaturatedAcquires, "SaturatedAcquires")
	assert.Equal(t, want.createErrors.Load(), st.CreateErrors, "CreateErrors")
	assert.Equal(t, created.Load(), st.Created, "Created")
	assert.Equal(t, want.destroyedValidation.Load(), st.DestroyedValidation, "DestroyedValidation")
	assert.Equal(t, want.destroyedCaller.Load(), st.DestroyedCaller, "DestroyedCaller")
	assert.Equal(t, st.Created, st.Destroyed(), "created vs destroyed: %+v", st)
	assert.Zero(t, st.InUse)
	assert.Zero(t, st.Idle)
	assert.Zero(t, st.Waiting)
	assert.Zero(t, st.Creating)
	assert.Zero(t, chanpool.WaitingCount(p), "raw waiter count after Close")
	f.checkAllDestroyedOnce(t)
	_, err = p.Acquire(context.Background())
	assert.Same(t, chanpool.ErrClosed, err)
}

// TestContextEndsAtHandOff ends a waiter's context at the instant a
// Release or Destroy hands it the slot (after the receive, before the
// checkout): with a ctx-aware validate or create, the waiter returns
// ctx.Err() unchanged and gives the slot back, resource kept, and the next
// waiter in line is served rather than left waiting.
func TestContextEndsAtHandOff(t *testing.T) {
	for _, destroy := range []bool{false, true} {
		t.Run(fmt.Sprintf("destroy=%v", destroy), func(t *testing.T) {
			f := &factory{}
			f.hook = func(ctx context.Context) {
				if ctx.Err() != nil {
					f.setFail(ctx.Err())
				} else {
					f.setFail(nil)
				}
			}
			p := newPool(t, 1, f, chanpool.WithValidate(func(ctx context.Context, _ *res) error {
				return ctx.Err()
			}))
			held, err := p.Acquire(context.Background())
			require.NoError(t, err)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var once atomic.Bool
			chanpool.SetTestHookReceived(func() {
				if once.CompareAndSwap(false, true) {
					cancel()
				}
			})
			defer chanpool.SetTestHookReceived(nil)
			first := make(chan error, 1)
			go func() {
				_, err := p.Acquire(ctx)
				first <- err
			}()
			waitBlocked(t, waitFrame, 1)
			second := acquireAsync(context.Background(), p)
			waitBlocked(t, waitFrame, 2)
			if destroy {
				held.Destroy()
			} else {
				held.Release()
			}
			require.Same(t, context.Canceled, <-first)
			l, ok := <-second
			require.True(t, ok, "the second waiter failed")
			if destroy {
				assert.Equal(t, 2, l.Value().id, "created afresh after the first waiter's create failed")
			} else {
				assert.Equal(t, 1, l.Value().id, "the first waiter kept the resource idle")
			}
			l.Release()
			st := p.Stats()
			assert.Equal(t, uint64(1), st.CancelledAcquires)
			assert.Zero(t, st.DestroyedValidation)
			assert.Zero(t, st.Waiting)
			assert.Equal(t, uint64(2), st.Acquires)
			closeNow(t, p)
			f.checkAllDestroyedOnce(t)
		})
	}
}
