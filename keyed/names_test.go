package keyed_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/keyed"
)

// TestNamesPerKeyBounded: a key holds at most keyed.MaxNames limit Names.
// An admission that would store one more, once the key's full Names are
// forgotten, is refused: Allowed false, an error wrapping
// admit.ErrUnavailable that names the bound, RetryAfter exactly until
// enough of the key's other Names are full, nothing taken. After that
// wait the call is admitted, and the Name that became full is gone.
func TestNamesPerKeyBounded(t *testing.T) {
	ctx := context.Background()
	l, clk := newFake(t, 1, 1, keyed.WithMaxKeys(1), keyed.WithShards(1))
	name := func(i int) admit.Limit {
		return admit.Limit{Name: fmt.Sprintf("n%02d", i), Capacity: 10, Rate: 1}
	}
	// Name i takes one token at i × 10 ms: full again 1 s later.
	for i := range keyed.MaxNames {
		d, err := l.AllowLimits(ctx, "k", 1, name(i))
		require.NoError(t, err)
		require.True(t, d.Allowed)
		clk.Advance(10 * time.Millisecond)
	}
	require.Len(t, l.Names("k"), keyed.MaxNames)
	// At 640 ms: n00 is full at 1000 ms.
	extra := admit.Limit{Name: "extra", Capacity: 5, Rate: 1}
	d, err := l.AllowLimits(ctx, "k", 1, extra)
	require.ErrorIs(t, err, admit.ErrUnavailable)
	assert.Contains(t, err.Error(), fmt.Sprint(keyed.MaxNames))
	assert.Equal(t, admit.Decision{Allowed: false, Limit: 5, RetryAfter: 360 * time.Millisecond, ResetAfter: 360 * time.Millisecond, Policy: "extra"}, d)
	require.Len(t, l.Names("k"), keyed.MaxNames, "nothing stored")
	// A Name the key holds is decided as usual, and a peek or a denial
	// with a new Name stores nothing, so needs no room.
	d, err = l.AllowLimits(ctx, "k", 1, name(5))
	require.NoError(t, err)
	require.True(t, d.Allowed)
	d, err = l.AllowLimits(ctx, "k", 0, extra)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	// Both limits of a call count: one held and one new need one room too.
	d, err = l.AllowLimits(ctx, "k", 1, name(7), extra)
	require.ErrorIs(t, err, admit.ErrUnavailable)
	assert.Equal(t, 360*time.Millisecond, d.RetryAfter)
	clk.Advance(360*time.Millisecond - 1)
	d, err = l.AllowLimits(ctx, "k", 1, extra)
	require.ErrorIs(t, err, admit.ErrUnavailable)
	assert.Equal(t, time.Duration(1), d.RetryAfter)
	clk.Advance(1)
	d, err = l.AllowLimits(ctx, "k", 1, extra)
	require.NoError(t, err)
	assert.Equal(t, admit.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: time.Second, Policy: "extra"}, d)
	names := l.Names("k")
	require.Len(t, names, keyed.MaxNames)
	assert.NotContains(t, names, "n00", "full at 1000 ms: forgotten")
	assert.Equal(t, "extra", names[len(names)-1])
	// n00 starts full again: a full bucket equals an absent one.
	d, err = l.AllowLimits(ctx, "k", 0, name(0))
	require.NoError(t, err)
	assert.Equal(t, int64(10), d.Remaining)
	// Later, with every Name full, a call forgets them all but its own.
	clk.Advance(time.Hour)
	d, err = l.AllowLimits(ctx, "k", 1, name(99))
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Equal(t, []string{"n99"}, l.Names("k"))
}

// TestNamesPerKeyMemory: one key (WithMaxKeys(1)) called with 100 000
// different Names, none ever full again (a rate of 1e-6/s), holds at most
// keyed.MaxNames of them: its heap stays within the documented bytes of
// one multi-limit key, however many Names its calls bring.
func TestNamesPerKeyMemory(t *testing.T) {
	ctx := context.Background()
	l, _ := newFake(t, 1, 1, keyed.WithMaxKeys(1), keyed.WithShards(1))
	before := heapNow()
	refused := 0
	for i := range 100_000 {
		d, err := l.AllowLimits(ctx, "client", 1, admit.Limit{Name: fmt.Sprintf("route-%07d", i), Capacity: 10, Rate: 1e-6})
		switch {
		case errors.Is(err, admit.ErrUnavailable):
			require.False(t, d.Allowed)
			refused++
		default:
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
	}
	grown := heapNow() - before
	assert.Equal(t, 100_000-keyed.MaxNames, refused)
	// The limiter's cache of limits holds the last 256 of them besides.
	assert.Less(t, grown, int64(keyed.MaxBytesPerMultiKey+keyed.MaxBytesParamsCache), "one key holds %d bytes", grown)
	runtime.KeepAlive(l)
}

// TestNamesCopied: a Name is copied when a key stores it, so that a key
// never keeps alive a larger buffer its caller's Name points into: 16
// Names of 9 bytes, each the tail of a 1 MB request line, cost the limiter
// a few hundred bytes each, not 16 MB.
func TestNamesCopied(t *testing.T) {
	ctx := context.Background()
	l, _ := newFake(t, 1, 1, keyed.WithMaxKeys(1), keyed.WithShards(1))
	before := heapNow()
	for i := range 16 {
		line := strings.Repeat("x", 1<<20) + fmt.Sprintf("/route-%02d", i)
		d, err := l.AllowLimits(ctx, "client", 1, admit.Limit{Name: line[len(line)-9:], Capacity: 10, Rate: 1e-6})
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	grown := heapNow() - before
	assert.Less(t, grown, int64(keyed.MaxBytesPerMultiKey), "16 Names of 9 bytes hold %d bytes", grown)
	runtime.KeepAlive(l)
}

// TestMultiKeyBytes: keys that each hold keyed.MaxNames Names of 128 bytes
// under limits no other key shares cost at most keyed.MaxBytesPerMultiKey
// each (the table and the limiter's cache of limits aside).
func TestMultiKeyBytes(t *testing.T) {
	ctx := context.Background()
	const keys = 16
	l, _ := newFake(t, 1, 1, keyed.WithMaxKeys(keys))
	before := heapNow()
	for k := range keys {
		key := fmt.Sprintf("%064d", k) // the longest key held as itself
		for i := range keyed.MaxNames {
			lim := admit.Limit{Name: fmt.Sprintf("%0128d", k*keyed.MaxNames+i), Capacity: int64(1000 + i), Rate: float64(1 + k)}
			d, err := l.AllowLimits(ctx, key, 1, lim)
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
		require.Len(t, l.Names(key), keyed.MaxNames)
	}
	grown := heapNow() - before
	perKey := grown / keys
	t.Logf("%d bytes per key holding %d Names of 128 bytes (bound %d)", perKey, keyed.MaxNames, keyed.MaxBytesPerMultiKey)
	// MaxBytesPerKey covers a key's share of the table (and more).
	assert.LessOrEqual(t, grown, int64(keys*(keyed.MaxBytesPerMultiKey+keyed.MaxBytesPerKey)))
	runtime.KeepAlive(l)
}

// TestMaxNamesPerCall: a call may bring at most keyed.MaxNames limits, and
// a limiter be built with as many; one more is an error wrapping
// admit.ErrInvalidConfig that names the bound, and consumes nothing.
func TestMaxNamesPerCall(t *testing.T) {
	ctx := context.Background()
	limits := make([]admit.Limit, keyed.MaxNames+1)
	for i := range limits {
		limits[i] = admit.Limit{Name: fmt.Sprint("l", i), Capacity: 5, Rate: 1}
	}
	l, _ := newFake(t, 1, 1)
	d, err := l.AllowLimits(ctx, "k", 1, limits[:keyed.MaxNames]...)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	d, err = l.AllowLimits(ctx, "k", 1, limits...)
	require.ErrorIs(t, err, admit.ErrInvalidConfig)
	assert.Contains(t, err.Error(), fmt.Sprint(keyed.MaxNames))
	assert.False(t, d.Allowed)
	d, err = l.AllowLimits(ctx, "k", 0, limits[:keyed.MaxNames]...)
	require.NoError(t, err)
	assert.Equal(t, int64(4), d.Remaining, "the bad call took nothing")

	_, err = keyed.NewLimits(limits[:keyed.MaxNames])
	require.NoError(t, err)
	_, err = keyed.NewLimits(limits)
	require.ErrorIs(t, err, admit.ErrInvalidConfig)
	assert.Contains(t, err.Error(), fmt.Sprint(keyed.MaxNames))
}

// TestBytesBound: the documented bound in bytes, keys × MaxBytesPerKey +
// shards × MaxBytesPerShard (plus the Limiter itself), holds whatever the
// shard count: WithShards may be as large as the key bound, and a shard
// costs its lock and view whether it holds a key or not, and its first
// table once it does, however few keys share it. Keys of 16 and of 64
// bytes, and keys over 64 bytes (held as digests).
func TestBytesBound(t *testing.T) {
	const n = 1 << 16
	for _, tc := range []struct {
		shards, klen int
	}{{1 << 16, 16}, {1 << 14, 16}, {1 << 16, 64}, {0, 16}, {0, 64}, {256, 200}} {
		t.Run(fmt.Sprintf("shards=%d/keylen=%d", tc.shards, tc.klen), func(t *testing.T) {
			keys := make([]string, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("%0*d", tc.klen, i)
			}
			opts := []admit.Option{keyed.WithMaxKeys(n)}
			if tc.shards > 0 {
				opts = append(opts, keyed.WithShards(tc.shards))
			}
			before := heapNow()
			l, _ := newFake(t, 10, 1, opts...)
			shards := l.Stats().Shards
			empty := heapNow() - before
			for _, k := range keys {
				require.True(t, l.Allow(k))
			}
			full := heapNow() - before
			const self = 8 << 10 // the Limiter (3 KB with its cache's slots), its limit, the fake clock
			t.Logf("%d shards: empty %d bytes (%.0f a shard), %d keys of %d bytes: %.1f bytes a key", shards, empty, float64(empty)/float64(shards), n, tc.klen, float64(full)/n)
			assert.LessOrEqual(t, empty, int64(shards*(128+32)+self), "an empty limiter")
			assert.LessOrEqual(t, full, int64(n*keyed.MaxBytesPerKey+shards*keyed.MaxBytesPerShard+self))
			runtime.KeepAlive(l)
			runtime.KeepAlive(keys)
		})
	}
}
