package shardedbucket

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
)

// TestDryBound checks the dry bound: once a gather has found the shards
// short of a whole token, later rejections read one word and write nothing,
// the bound lifts exactly when a token can exist, and a give-back (an undone
// reservation) lifts it at once.
func TestDryBound(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	b, err := New(8, 1, WithShards(4), admit.WithClock(clk))
	require.NoError(t, err)
	require.True(t, b.TryAcquireN(8))
	clk.Advance(250 * time.Millisecond) // a quarter token, spread over the shards
	assert.False(t, b.TryAcquire())
	dry := b.dry.Load()
	require.Equal(t, b.p.V(b.clk.Now())+b.p.Units(1)-b.p.Units(1)/4, dry, "a gather publishes when the missing 3/4 token will exist")
	before := make([]int64, len(b.shards))
	for i := range b.shards {
		before[i] = b.shards[i].z.Load()
	}
	for range 10 {
		assert.False(t, b.TryAcquire())
	}
	assert.Equal(t, dry, b.dry.Load(), "rejections under the bound write nothing")
	for i := range b.shards {
		assert.Equal(t, before[i], b.shards[i].z.Load(), "shard %d written by a rejection", i)
	}
	clk.Advance(750*time.Millisecond - 1)
	assert.False(t, b.TryAcquire(), "1 ns before a whole token")
	clk.Advance(1)
	assert.True(t, b.TryAcquire(), "a token exists exactly when the bound says")

	// A reservation undone gives units back: the bound must not hide them.
	c, err := New(8, 1, WithShards(4), admit.WithClock(clk))
	require.NoError(t, err)
	require.True(t, c.TryAcquireN(6))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.AcquireN(ctx, 3) }() // takes the 2 tokens and reserves a third
	require.NoError(t, clk.WaitForSleepers(context.Background(), 1))
	assert.False(t, c.TryAcquire())
	require.Greater(t, c.dry.Load(), c.p.V(c.clk.Now()), "the failed gather published a dry bound")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	assert.Less(t, c.dry.Load(), int64(0), "the give-back withdrew the bound")
	assert.True(t, c.TryAcquireN(2), "the undone reservation's 2 tokens are there at once")
}
