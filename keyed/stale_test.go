package keyed_test

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
)

// TestStaleReadingWaits: a call whose reading is older than the key's
// latest time (its clock was read before another call's) is decided at its
// own reading, which sees less, but its waits are counted from the latest
// time the key has seen: a denial of n never waits more than n/rate, a
// reset never more than capacity/rate, however old the reading. A peek
// (n == 0) is Allowed whatever the reading.
func TestStaleReadingWaits(t *testing.T) {
	ctx := context.Background()
	l, clk := newFake(t, 10, 1)
	require.True(t, l.Allow("k")) // inserted at 0 s
	clk.Advance(10 * time.Second)
	d, err := l.AllowN(ctx, "k", 10) // drained at 10 s
	require.NoError(t, err)
	require.True(t, d.Allowed)
	clk.Advance(-5 * time.Second) // a reading of 5 s
	d, err = l.AllowN(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, admit.Decision{Allowed: false, Limit: 10, Remaining: 0, RetryAfter: time.Second, ResetAfter: 10 * time.Second}, d,
		"one token is 1 s after the drain at 10 s, not 6 s after the reading of 5 s")
	d, err = l.AllowN(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, admit.Decision{Allowed: true, Limit: 10, Remaining: 0, RetryAfter: 0, ResetAfter: 10 * time.Second}, d,
		"a stale peek is allowed, nothing left, full 10 s after the drain")
	// The same at the last nanosecond before the drain.
	clk.Advance(5*time.Second - 1)
	d, err = l.AllowN(ctx, "k", 3)
	require.NoError(t, err)
	assert.Equal(t, 3*time.Second, d.RetryAfter)
	// And nothing was taken by the stale calls: at 11 s there is one token.
	clk.Advance(time.Second + 1)
	d, err = l.AllowN(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, admit.Decision{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: 10 * time.Second}, d)
}

// TestStaleConversion: a key drained through AllowN (one limit, one word)
// and then converted to a multi-limit entry by a call with an older
// reading keeps the latest time the key has seen: the carry-over is applied
// then, a stale peek is allowed, and the new rate only refills from then.
func TestStaleConversion(t *testing.T) {
	ctx := context.Background()
	l, clk := newFake(t, 2, 1)
	require.True(t, l.Allow("k")) // inserted at 0 s
	clk.Advance(10 * time.Second)
	d, err := l.AllowN(ctx, "k", 2) // drained at 10 s
	require.NoError(t, err)
	require.True(t, d.Allowed)
	clk.Advance(-5 * time.Second)
	big := admit.Limit{Capacity: 10, Rate: 2}
	d, err = l.AllowLimits(ctx, "k", 0, big)
	require.NoError(t, err)
	assert.Equal(t, admit.Decision{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: 5 * time.Second}, d,
		"a stale peek converts the key at 10 s: empty, full 5 s later at 2/s")
	d, err = l.AllowLimits(ctx, "k", 1, big)
	require.NoError(t, err)
	assert.Equal(t, admit.Decision{Allowed: false, Limit: 10, Remaining: 0, RetryAfter: 500 * time.Millisecond, ResetAfter: 5 * time.Second}, d)
	clk.Advance(5 * time.Second) // 10 s
	d, err = l.AllowLimits(ctx, "k", 0, big)
	require.NoError(t, err)
	assert.Equal(t, int64(0), d.Remaining, "carried over at 10 s: nothing has refilled yet")
	clk.Advance(time.Second)
	d, err = l.AllowLimits(ctx, "k", 0, big)
	require.NoError(t, err)
	assert.Equal(t, int64(2), d.Remaining, "one second at 2/s")
}

// TestStaleReadingStorm: 64 goroutines on 8 keys on the real clock, where
// readings lose races all the time. Every denial's RetryAfter is at most
// n/rate and every ResetAfter at most capacity/rate (rounded up to the
// nanosecond), on the one-limit path and on the multi-limit path; every
// peek is allowed.
func TestStaleReadingStorm(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits []admit.Limit
	}{
		{"one limit", []admit.Limit{{Capacity: 1, Rate: 2000}}},
		{"one limit, 100", []admit.Limit{{Capacity: 100, Rate: 1000}}},
		{"two limits", []admit.Limit{{Name: "a", Capacity: 20, Rate: 50}, {Name: "b", Capacity: 4, Rate: 2000}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := keyed.NewLimits(tc.limits)
			require.NoError(t, err)
			wait := func(n int64) time.Duration { // the longest any limit needs for n tokens
				w := time.Duration(0)
				for _, lim := range tc.limits {
					w = max(w, time.Duration(math.Ceil(float64(n)*1e9/lim.Rate)))
				}
				return w
			}
			minCap, reset := tc.limits[0].Capacity, time.Duration(0)
			for _, lim := range tc.limits {
				minCap = min(minCap, lim.Capacity)
				reset = max(reset, time.Duration(math.Ceil(float64(lim.Capacity)*1e9/lim.Rate)))
			}
			var stop atomic.Bool
			var denials, peeks atomic.Int64
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Go(func() {
					ctx := context.Background()
					for i := 0; !stop.Load(); i++ {
						n := int64((i + g) % 3) // peeks, ones and twos
						n = min(n, minCap)
						d, err := l.AllowN(ctx, fmt.Sprint("k", (i+g)%8), n)
						if err != nil {
							t.Error(err)
							return
						}
						if n == 0 {
							peeks.Add(1)
							if !d.Allowed {
								t.Errorf("a peek was denied: %+v", d)
								return
							}
						}
						if d.ResetAfter > reset {
							t.Errorf("ResetAfter %v beyond the longest refill: %+v", d.ResetAfter, d)
							return
						}
						if !d.Allowed {
							denials.Add(1)
							if d.RetryAfter <= 0 || d.RetryAfter > wait(n) {
								t.Errorf("n=%d denied with RetryAfter %v, want in (0, %v]: %+v", n, d.RetryAfter, wait(n), d)
								return
							}
						}
					}
				})
			}
			time.Sleep(200 * time.Millisecond) // how long to storm, not an assertion
			stop.Store(true)
			wg.Wait()
			assert.Positive(t, denials.Load())
			assert.Positive(t, peeks.Load())
		})
	}
}

// TestCarryLowersFloor: a call that brings a faster rate for a Name moves
// the key's full-at time earlier; the shard's floor (the lower bound a
// full bucket is looked for by) must follow, so that a new key finds the
// bucket full and dropped instead of being refused, or evicting a live key.
func TestCarryLowersFloor(t *testing.T) {
	for _, policy := range []keyed.Policy{keyed.RefuseNew, keyed.EvictLRU} {
		t.Run(policy.String(), func(t *testing.T) {
			ctx := context.Background()
			l, clk := newFake(t, 10, 1, keyed.WithMaxKeys(2), keyed.WithShards(1), keyed.WithPolicy(policy))
			d, err := l.AllowN(ctx, "a", 10) // a: full at 10 s
			require.NoError(t, err)
			require.True(t, d.Allowed)
			clk.Advance(time.Second)
			d, err = l.AllowN(ctx, "b", 10) // b: full at 11 s
			require.NoError(t, err)
			require.True(t, d.Allowed)
			d, err = l.AllowLimits(ctx, "b", 0, admit.Limit{Capacity: 10, Rate: 1000})
			require.NoError(t, err)
			require.Equal(t, 10*time.Millisecond, d.ResetAfter, "b at 1000/s: full at 1.01 s")
			clk.Advance(time.Second) // 2 s
			d, err = l.AllowN(ctx, "c", 1)
			require.NoError(t, err, "b is full: dropping it makes room")
			assert.True(t, d.Allowed)
			st := l.Stats()
			assert.Equal(t, uint64(1), st.Drops)
			assert.Zero(t, st.Evictions)
			assert.Zero(t, st.Refusals)
			assert.True(t, l.Held("a"), "a is live")
			assert.False(t, l.Held("b"))
		})
	}
}

// TestFullMultiInUse: a multi-limit key whose every bucket is full is
// dropped at the bound even while a call holds its lock (a peek, say): the
// sweep waits for the lock rather than passing it over, so a new key is
// never refused (nor a live key evicted) while that full bucket is held.
// The hand-off is deterministic: the test holds the key's lock, and the
// sweep's hook, called when it finds the lock held and is about to wait,
// releases it. A sweep that passed the key over would not call the hook
// and would find no room but by evicting or refusing.
func TestFullMultiInUse(t *testing.T) {
	fast := []admit.Limit{{Name: "a", Capacity: 2, Rate: 1}, {Name: "b", Capacity: 4, Rate: 1}}
	slow := []admit.Limit{{Name: "a", Capacity: 2, Rate: 1e-3}, {Name: "b", Capacity: 4, Rate: 1e-3}}
	for _, policy := range []keyed.Policy{keyed.RefuseNew, keyed.EvictLRU} {
		t.Run(policy.String(), func(t *testing.T) {
			ctx := context.Background()
			l, clk := newFake(t, 1, 1, keyed.WithMaxKeys(2), keyed.WithShards(1), keyed.WithPolicy(policy))
			d, err := l.AllowLimits(ctx, "full", 1, fast...)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			d, err = l.AllowLimits(ctx, "live", 2, slow...)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			clk.Advance(time.Minute)                   // full is full again, live is not
			unlock := sync.OnceFunc(l.LockKey("full")) // a call in progress on it
			waited := 0
			l.OnKeyBusy(func() {
				waited++
				unlock() // the call in progress ends while the sweep waits
			})
			// A sweep that does not wait for the lock never calls the hook,
			// and a later step may block on the lock for good: release it
			// after a while so that such a regression fails below instead
			// of hanging. Not an assertion on time.
			done := make(chan struct{})
			go func() {
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					unlock()
				}
			}()
			d, err = l.AllowLimits(ctx, "new", 1, fast...)
			close(done)
			require.NoError(t, err)
			assert.Equal(t, 1, waited, "the sweep found the key in use and waited for it once")
			assert.True(t, d.Allowed)
			st := l.Stats()
			assert.Equal(t, uint64(1), st.Drops, "the full key made the room")
			assert.Zero(t, st.Evictions)
			assert.Zero(t, st.Refusals)
			assert.True(t, l.Held("live"))
			assert.False(t, l.Held("full"))
		})
	}
}

// TestFullMultiPeekedStorm: goroutines peek at a full multi-limit key in a
// loop (each peek holds its lock for a moment) while new keys arrive at the
// bound under RefuseNew: as a full bucket is always held, no new key is
// ever refused, and in particular never with a wait of 0.
func TestFullMultiPeekedStorm(t *testing.T) {
	ctx := context.Background()
	two := []admit.Limit{{Name: "a", Capacity: 2, Rate: 1}, {Name: "b", Capacity: 4, Rate: 1}}
	clk := buckettest.NewFakeClock(fakeStart)
	l, err := keyed.NewLimits(two, admit.WithClock(clk), keyed.WithMaxKeys(1), keyed.WithShards(1), keyed.WithPolicy(keyed.RefuseNew))
	require.NoError(t, err)
	d, err := l.AllowN(ctx, "k0", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	for round := range 100 {
		held, next := fmt.Sprint("k", round), fmt.Sprint("k", round+1)
		clk.Advance(time.Minute) // held is full again
		var stop atomic.Bool
		var peeks atomic.Int64
		var wg sync.WaitGroup
		for range 2 * runtime.GOMAXPROCS(0) {
			wg.Go(func() {
				for !stop.Load() {
					_, _ = l.AllowN(ctx, held, 0)
					peeks.Add(1)
				}
			})
		}
		for peeks.Load() < 100 { // the peekers are running
			runtime.Gosched()
		}
		d, err = l.AllowN(ctx, next, 1)
		stop.Store(true)
		wg.Wait()
		require.NoError(t, err, "round %d: refused with %+v while a full bucket was held", round, d)
		require.True(t, d.Allowed)
		require.False(t, l.Held(held))
	}
	assert.Zero(t, l.Stats().Refusals)
	assert.Equal(t, uint64(100), l.Stats().Drops)
}

// TestEvictedRestartsAtItsTime: an evicted key that comes back with an
// older reading starts no earlier than the latest time its bucket was
// empty, so with one eviction no window holds more than
// capacity + rate × T + 1 plus one burst (the eviction's).
func TestEvictedRestartsAtItsTime(t *testing.T) {
	ctx := context.Background()
	l, clk := newFake(t, 1, 1, keyed.WithMaxKeys(1))
	start := clk.Now()
	admitted := 0
	for s := range 11 { // readings 0..10 s
		clk.Set(start + int64(s)*int64(time.Second))
		if l.Allow("a") {
			admitted++
		}
	}
	require.Equal(t, 11, admitted)
	clk.Set(start) // another key, with a reading of 0 s, evicts a
	d, err := l.AllowN(ctx, "b", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, uint64(1), l.Stats().Evictions)
	for s := range 11 { // a again, readings 0..10 s
		clk.Set(start + int64(s)*int64(time.Second))
		if l.Allow("a") {
			admitted++
		}
	}
	evictions := l.Stats().Evictions
	// Over [0, 10 s]: capacity 1 + 1/s × 10 s + 1 (rounding), plus one
	// burst of 1 per eviction of a (b's return evicts a again, at most
	// once: b is not called again).
	bound := 1 + 10 + 1 + int(evictions)
	assert.LessOrEqual(t, admitted, bound, "%d admissions of a within [0, 10 s] after %d evictions", admitted, evictions)
}

// TestCarryFullIsFull: a key's balance never depends on other keys'
// traffic. A bucket that is full under its old limit is full under a new
// one, as it would be had the full bucket been dropped (as other keys'
// insertions may do at any time): here a key clamped full at capacity 3 is
// brought back to capacity 10, once kept and once dropped in between.
func TestCarryFullIsFull(t *testing.T) {
	ctx := context.Background()
	x10, x3 := admit.Limit{Name: "x", Capacity: 10, Rate: 1}, admit.Limit{Name: "x", Capacity: 3, Rate: 1}
	var got [2]admit.Decision
	for i, other := range []bool{false, true} {
		l, clk := newFake(t, 1, 1, keyed.WithMaxKeys(1))
		d, err := l.AllowLimits(ctx, "k", 6, x10)
		require.NoError(t, err)
		require.True(t, d.Allowed) // 4 left
		clk.Advance(500 * time.Millisecond)
		d, err = l.AllowLimits(ctx, "k", 0, x3)
		require.NoError(t, err)
		require.Equal(t, int64(3), d.Remaining, "4.5 clamped to 3: full")
		if other {
			// Another client's first call finds the bound held and k full:
			// k is dropped, exactly.
			require.True(t, l.Allow("other"))
			require.False(t, l.Held("k"))
		}
		got[i], err = l.AllowLimits(ctx, "k", 0, x10)
		require.NoError(t, err)
	}
	assert.Equal(t, got[1], got[0], "k's balance at capacity 10 depends on whether another key's call dropped it")
	assert.Equal(t, int64(10), got[0].Remaining, "full at 3, full at 10")
}

// TestLongKeysBounded: a key's bytes held by the limiter are bounded,
// whatever the caller sends: 48 keys of 1 MB each cost the limiter a few
// hundred bytes each, not a megabyte. Long keys stay distinct keys (they
// differ in their last byte here), and each is one bucket.
func TestLongKeysBounded(t *testing.T) {
	const n, size = 48, 1 << 20
	base := make([]byte, size)
	for i := range base {
		base[i] = byte('a' + i%26)
	}
	keys := make([]string, n)
	for i := range keys {
		base[size-1] = byte(i)
		keys[i] = string(base)
	}
	l, clk := newFake(t, 2, 1, keyed.WithShards(1))
	before := heapNow()
	for _, k := range keys {
		require.True(t, l.Allow(k))
	}
	grown := heapNow() - before
	assert.Less(t, grown, int64(n*keyed.MaxBytesPerKey), "heap grew %d bytes for %d keys of %d bytes", grown, n, size)
	for _, k := range keys {
		d, err := l.AllowN(context.Background(), k, 1)
		require.NoError(t, err)
		require.Equal(t, int64(0), d.Remaining, "each long key is its own bucket of 2")
		require.False(t, l.Allow(k))
	}
	assert.Equal(t, n, l.Len())
	clk.Advance(2 * time.Second)
	runtime.KeepAlive(keys)
}

// TestStaleRefusalWait: under RefuseNew, a new key's refusal counts its
// RetryAfter from the time a new bucket in its shard would start at (no
// earlier than the latest time of a key removed from the shard), on the
// multi-limit path as on the one-limit path: a caller with an older reading
// is not told to wait its staleness on top.
func TestStaleRefusalWait(t *testing.T) {
	ctx := context.Background()
	o := admit.Limit{Name: "o", Capacity: 3, Rate: 1e5}
	for _, multi := range []bool{false, true} {
		t.Run(fmt.Sprint("multi=", multi), func(t *testing.T) {
			l, clk := newFake(t, 8, 1000, keyed.WithMaxKeys(2), keyed.WithShards(1), keyed.WithPolicy(keyed.RefuseNew))
			d, err := l.AllowLimits(ctx, "gone", 1, o) // full 10 µs later
			require.NoError(t, err)
			require.True(t, d.Allowed)
			clk.Advance(50 * time.Millisecond)
			for _, k := range []string{"a", "b"} { // a's insertion drops gone, at 50 ms
				d, err = l.AllowN(ctx, k, 3) // full 3 ms later
				require.NoError(t, err)
				require.True(t, d.Allowed)
			}
			require.False(t, l.Held("gone"))
			clk.Advance(-50 * time.Millisecond) // a reading from before the removal
			if multi {
				d, err = l.AllowLimits(ctx, "c", 1, o)
			} else {
				d, err = l.AllowN(ctx, "c", 1)
			}
			require.ErrorIs(t, err, admit.ErrUnavailable)
			assert.Equal(t, 3*time.Millisecond, d.RetryAfter, "a and b are full 3 ms after 50 ms, the shard's removal time")
		})
	}
}

// TestStalePeekThenCreate: a peek at a key not held stores nothing in the
// table, but its time is kept for its shard, so that a first admission with
// an older reading does not create the bucket before the peek and let it
// refill over time that had already been applied to the key. (Here a
// bucket created at 50 s would be full again at 101 s and admit 3 more;
// created at 100 s, it holds 2 at 101 s.)
func TestStalePeekThenCreate(t *testing.T) {
	ctx := context.Background()
	for _, multi := range []bool{false, true} {
		t.Run(fmt.Sprint("multi=", multi), func(t *testing.T) {
			l, clk := newFake(t, 3, 1)
			start := clk.Now()
			call := func(n int64) admit.Decision {
				var d admit.Decision
				var err error
				if multi {
					d, err = l.AllowLimits(ctx, "k", n, admit.Limit{Capacity: 3, Rate: 1}, admit.Limit{Name: "x", Capacity: 9, Rate: 9})
				} else {
					d, err = l.AllowN(ctx, "k", n)
				}
				require.NoError(t, err)
				return d
			}
			clk.Set(start + 100*int64(time.Second))
			require.True(t, call(0).Allowed)
			require.False(t, l.Held("k"))
			clk.Set(start + 50*int64(time.Second))
			require.True(t, call(2).Allowed)
			clk.Set(start + 101*int64(time.Second))
			d := call(3)
			assert.False(t, d.Allowed, "created at 100 s with 3, 2 taken: 2 at 101 s")
			assert.Equal(t, int64(2), d.Remaining)
		})
	}
}
