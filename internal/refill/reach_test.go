package refill

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReachMatchesWhen checks the constant-time inverse against the binary
// search it replaces on hot paths, at random and at boundary points.
func TestReachMatchesWhen(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, tc := range []struct {
		capacity int64
		rate     float64
	}{
		{1, 1e9}, {1, 1}, {3, 3}, {7, 1.0 / 3}, {1e9, 1e-6}, {1, 1e-6}, {100, 0.5},
		{10, 1e5}, {1 << 60, 1}, {1, 0}, {1e9, 1e9}, {5, 7.3},
	} {
		p, err := NewParams(tc.capacity, tc.rate)
		require.NoError(t, err)
		vmax := p.V(Horizon)
		check := func(from, v int64) {
			require.Equal(t, p.When(from, v), p.Reach(from, v), "capacity %d rate %v: Reach(%d, %d)", tc.capacity, tc.rate, from, v)
		}
		for _, from := range []int64{0, 1, 999_999_999, 1e9, 1 << 40, Horizon - 1, Horizon} {
			vf := p.V(from)
			for _, d := range []int64{-1, 0, 1, 2, p.Cap - 1, p.Cap, p.Cap + 1, 1 << 30, vmax - vf, vmax - vf + 1} {
				check(from, vf+d)
			}
		}
		for range 2000 {
			from := rng.Int64N(Horizon + 1)
			if rng.IntN(2) == 0 {
				from = rng.Int64N(1 << 45)
			}
			vf := p.V(from)
			check(from, vf+rng.Int64N(p.Cap+2))
			check(from, vf+rng.Int64N(max(vmax-vf, 1)+2))
		}
	}
}
