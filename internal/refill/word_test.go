package refill

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReserveWord walks one word through ReserveWord's outcomes: a take
// when the units are there, a reservation that moves z past them and
// raises debtUntil to its wake, a wait beyond the limit that changes
// nothing, and Never without refill.
func TestReserveWord(t *testing.T) {
	p, err := NewParams(4, 1)
	require.NoError(t, err)
	one := p.Units(1)
	var z, debt atomic.Int64
	z.Store(-p.Cap) // full at 0

	wait, _, _ := p.ReserveWord(&z, &debt, 0, 3*one, 1<<62)
	assert.Zero(t, wait, "3 of 4 tokens there: taken at once")
	assert.Equal(t, -one, z.Load())

	sec := int64(time.Second)
	wait, old, end := p.ReserveWord(&z, &debt, 0, 3*one, 1<<62)
	assert.Equal(t, 2*sec, wait, "1 token there, 2 short at 1/s")
	assert.Equal(t, -one, old)
	assert.Equal(t, 2*one, end, "z moved past the 3 units")
	assert.Equal(t, end, z.Load())
	assert.Equal(t, 2*sec, debt.Load(), "debt until the wake")
	assert.GreaterOrEqual(t, p.V(wait), end, "at the wake the stream has reached end")

	wait, _, _ = p.ReserveWord(&z, &debt, 0, one, sec)
	assert.Equal(t, 3*sec, wait, "behind the reservation: 3 s away")
	assert.Equal(t, end, z.Load(), "over the limit: nothing reserved")
	assert.Equal(t, 2*sec, debt.Load())

	zero, err := NewParams(4, 0)
	require.NoError(t, err)
	z.Store(0) // drained, no refill
	wait, _, _ = zero.ReserveWord(&z, &debt, 0, one, 1<<62)
	assert.Equal(t, int64(Never), wait)
	assert.Zero(t, z.Load())
}
