package keyed_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/keyed"
)

// newRace returns a limiter of capacity and rate on a raceClock and a
// function that makes the next call's reading s seconds after the start
// (stale if the clock has been later) and the present at least that.
func newRace(t *testing.T, capacity int64, rate float64, opts ...admit.Option) (*keyed.Limiter, func(s float64)) {
	t.Helper()
	clk := newRaceClock(fakeStart)
	return newOn(t, clk, capacity, rate, opts...), func(s float64) { clk.read(fakeStart + int64(s*float64(time.Second))) }
}

// TestStaleConversionNewName: a single-limit key's latest call (a denial at
// 100 s) stores no time; a call whose reading lost the race to it (5 s)
// converts the key to a multi-limit entry and takes 2 of a new Name's 3.
// The conversion decides at the key's latest time, so a second call, also
// with a reading before 100 s, finds 1 token, as a lock would: the Name
// must not refill over time the key had already seen. The same holds for a
// key that was multi-limit already (whose time is exact). (FuzzModel's
// input 306a9ffc40705013.)
func TestStaleConversionNewName(t *testing.T) {
	ctx := context.Background()
	o := admit.Limit{Name: "o", Capacity: 3, Rate: 1e5}
	prim := admit.Limit{Capacity: 3, Rate: 0}
	for _, multiFirst := range []bool{false, true} {
		t.Run(fmt.Sprint("multiFirst=", multiFirst), func(t *testing.T) {
			l, at := newRace(t, 3, 0, keyed.WithShards(1))
			at(0)
			if multiFirst {
				d, _ := l.AllowLimits(ctx, "b", 3, prim, admit.Limit{Name: "x", Capacity: 100, Rate: 1e9})
				require.True(t, d.Allowed)
			} else {
				d, _ := l.AllowN(ctx, "b", 3)
				require.True(t, d.Allowed)
			}
			at(100)
			d, _ := l.AllowN(ctx, "b", 1)
			require.False(t, d.Allowed, "rate 0 refilled")
			at(5) // lost the race to the 100 s call
			d, err := l.AllowLimits(ctx, "b", 2, o)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			at(5.1) // still before 100 s
			d, err = l.AllowLimits(ctx, "b", 3, o)
			require.NoError(t, err)
			assert.Equal(t, admit.Decision{Allowed: false, Limit: 3, Remaining: 1, RetryAfter: 20 * time.Microsecond, ResetAfter: 20 * time.Microsecond, Policy: "o"}, d,
				"o took 2 at the key's latest time (100 s): 1 left, and 2 more are 20 µs away at 1e5/s")
		})
	}
}

// TestStaleConversionNotDrained: a key whose latest admission (1000 s) left
// it 99 of 100 tokens, converted by a call reading 950 s to a limit of the
// same Name 1000 times faster: the balance carries over at 1000 s, so at
// 1000 s the key holds what it held then (99), as when the conversion's
// reading is not stale, and not 99 plus 50 s at the new rate.
func TestStaleConversionNotDrained(t *testing.T) {
	ctx := context.Background()
	fast := admit.Limit{Capacity: 100_000, Rate: 1000}
	run := func(stale bool) admit.Decision {
		l, at := newRace(t, 100, 1, keyed.WithShards(1))
		at(0)
		require.True(t, l.Allow("k"))
		at(1000)
		d, _ := l.AllowN(ctx, "k", 1)
		require.True(t, d.Allowed)
		require.Equal(t, int64(99), d.Remaining)
		if stale {
			at(950)
		} else {
			at(1000)
		}
		_, err := l.AllowLimits(ctx, "k", 0, fast) // converts and carries over
		require.NoError(t, err)
		at(1000)
		d, err = l.AllowLimits(ctx, "k", 0, fast)
		require.NoError(t, err)
		return d
	}
	fresh, stale := run(false), run(true)
	assert.Equal(t, int64(99), fresh.Remaining)
	assert.Equal(t, fresh, stale, "the conversion's stale reading changed the balance")
}

// TestStaleEviction: a key evicted by a call whose reading lost a race
// restarts no earlier than the present, which no time the key applied is
// after: here a key whose latest admission (100 s) left it 2 of 3 tokens,
// so that its words say only that it was last empty at 98 s, is evicted by
// a call reading 0 s, and comes back with a reading of 99 s: it restarts
// full at 100 s, so a call reading 100 s finds no token refilled since.
func TestStaleEviction(t *testing.T) {
	ctx := context.Background()
	l, at := newRace(t, 3, 1, keyed.WithMaxKeys(1))
	at(0)
	require.True(t, l.Allow("a"))
	at(100)
	require.True(t, l.Allow("a")) // full again at 100 s: 2 left
	at(0)
	require.True(t, l.Allow("b")) // evicts a
	require.Equal(t, uint64(1), l.Stats().Evictions)
	at(99)
	d, err := l.AllowN(ctx, "a", 3) // evicts b; a restarts full
	require.NoError(t, err)
	require.True(t, d.Allowed)
	at(100)
	d, err = l.AllowN(ctx, "a", 1)
	require.NoError(t, err)
	assert.Equal(t, admit.Decision{Allowed: false, Limit: 3, Remaining: 0, RetryAfter: time.Second, ResetAfter: 3 * time.Second}, d,
		"a restarted at 100 s, not at 98 or 99 s")
}

// TestBackwardClockConversion: on a clock that runs backwards (which
// admit.Clock asks not to), reading the clock again does not find the
// key's latest time, and a conversion decides at the latest time the key's
// words record: here the instant it was last empty (0 s), while it had
// seen 100 s. The Name the conversion starts may then refill over time the
// key had seen, by at most one burst: o admits 2 + 3 at 5 s and 5.1 s,
// within its 3 + 1e5/s × 0.1 s + 1, plus its one burst.
func TestBackwardClockConversion(t *testing.T) {
	ctx := context.Background()
	o := admit.Limit{Name: "o", Capacity: 3, Rate: 1e5}
	l, clk := newFake(t, 3, 0, keyed.WithShards(1))
	start := clk.Now()
	require.True(t, l.Allow("b"))
	d, _ := l.AllowN(ctx, "b", 2)
	require.True(t, d.Allowed) // drained at 0 s
	clk.Set(start + int64(100*time.Second))
	d, _ = l.AllowN(ctx, "b", 1)
	require.False(t, d.Allowed)
	clk.Set(start + int64(5*time.Second))
	d, err := l.AllowLimits(ctx, "b", 2, o)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	clk.Set(start + int64(5100*time.Millisecond))
	d, err = l.AllowLimits(ctx, "b", 3, o)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "the clock went back: the conversion applied 5 s")
}

// TestBackwardClockDrop: on a clock that runs backwards (which admit.Clock
// asks not to), a full bucket's drop is not exact: the sweep decides
// "full" at the time the inserting call applies (its shard's absentAt, a
// later time a peek at another key applied), not at the key's own latest
// time, and the key then restarts at that later time: its client, never
// evicted, gets up to one more burst at a reading no later than the one
// that drained it. The documented backward-clock exceptions (a conversion,
// an eviction: TestBackwardClockConversion) now name the drop too; this
// pins the gain at one burst.
func TestBackwardClockDrop(t *testing.T) {
	ctx := context.Background()
	l, clk := newFake(t, 3, 1, keyed.WithMaxKeys(2), keyed.WithShards(1))
	t0 := clk.Now()
	d, err := l.AllowN(ctx, "a", 3) // a drained at t0
	require.NoError(t, err)
	require.True(t, d.Allowed)
	clk.Set(t0 + 100e9)
	_, err = l.AllowN(ctx, "p", 0) // a peek at a key not held: the shard has applied t0+100s
	require.NoError(t, err)
	clk.Set(t0) // the clock runs back
	for _, k := range []string{"b", "c"} {
		d, err = l.AllowN(ctx, k, 1) // b and c start at t0+100s; c's insertion drops a, full then
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	require.False(t, l.Held("a"))
	require.EqualValues(t, 0, l.Stats().Evictions)
	got := int64(0)
	for range 4 {
		if d, err = l.AllowN(ctx, "a", 1); err == nil && d.Allowed {
			got++
		}
	}
	// a's own readings never passed t0, where it was drained: a lock-held
	// mutexbucket would admit nothing; the drop gives one burst, no more.
	assert.EqualValues(t, 3, got, "a admitted %d more at reading t0", got)
	assert.EqualValues(t, 1, l.Stats().Evictions) // b or c, never a
}
