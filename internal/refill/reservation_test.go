package refill

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRefund walks the tail rule through explicit states of a capacity-2,
// 1e9/s bucket (one unit is one token and one nanosecond of refill).
func TestRefund(t *testing.T) {
	p, err := NewParams(2, 1e9)
	require.NoError(t, err)
	require.Equal(t, uint(0), p.Shift)
	// Drained at 10 ns: (0, 10), empty point 10. A reservation of 2 at 10
	// leaves (-2, 10), end 12, due at 12 ns.
	end := p.EmptyPoint(-2, 10)
	require.Equal(t, int64(12), end)
	for _, tc := range []struct {
		name              string
		tokens, last, now int64
		wantTok, wantLast int64
		wantDue           bool
	}{
		{"tail, at once: everything back", -2, 10, 10, 0, 10, false},
		{"tail, 1 ns later: back, with the refill", -2, 10, 11, 1, 11, false},
		{"stale reading: judged at the latest time applied", -2, 10, 3, 0, 10, false},
		{"come due: the caller has them", -2, 10, 12, -2, 10, true},
		{"due by the stored time, whatever the reading", -1, 13, 11, -1, 13, true},
		{"stacked on (another 2 reserved): forfeited", -4, 10, 11, -4, 10, false},
		{"stacked on, then the later one undone: the tail again", -2, 10, 11, 1, 11, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, last, due := p.Refund(tc.tokens, tc.last, tc.now, 2, end)
			assert.Equal(t, tc.wantDue, due)
			assert.Equal(t, tc.wantTok, tok, "tokens")
			assert.Equal(t, tc.wantLast, last, "last")
		})
	}
}
