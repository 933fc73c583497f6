package memstore_test

import (
	"testing"
	"time"

	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/memstore"
	"github.com/stretchr/testify/require"
)

// TestDebt walks a debt bucket (capacity 10, 10 a second) through usage
// reports: charged whatever the outcome, down to minus one burst, and
// repaid by refill before it holds anything, a check included.
func TestDebt(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	s := memstore.New(memstore.WithClock(clk))
	u := lim{10, 10, time.Second}.hit("u", 0)
	u.Debt = true
	report := func(n int64) (bool, rls.Result) { h := u; h.N = n; return decide1(t, s, h) }

	ok, r := report(6)
	require.True(t, ok, "6 of 10: held and taken")
	require.Equal(t, int64(4), r.Remaining)
	ok, r = report(7)
	require.False(t, ok, "7 of 4: refused, and charged")
	require.Equal(t, int64(0), r.Remaining)
	require.Equal(t, 1300*time.Millisecond, r.ResetAfter, "a balance of -3")
	ok, _ = report(0)
	require.False(t, ok, "in debt, even a check is refused")
	ok, r = report(100)
	require.False(t, ok)
	require.Equal(t, 2*time.Second, r.ResetAfter, "the debt stops at minus one burst")
	clk.Advance(time.Second) // balance 0
	ok, _ = report(0)
	require.True(t, ok)
	ok, _ = report(1)
	require.False(t, ok, "a balance of 0 holds no token")
	clk.Advance(1100 * time.Millisecond) // balance 0 - 1 + 11 = 10
	ok, r = report(1)
	require.True(t, ok)
	require.Equal(t, int64(9), r.Remaining)
}

// TestDebtOutsideAllOrNothing: a debt hit is charged when another hit
// refuses the request, an ordinary hit still takes nothing, and a shadow
// debt hit is charged without refusing.
func TestDebtOutsideAllOrNothing(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	s := memstore.New(memstore.WithClock(clk))
	u := lim{10, 10, time.Hour}.hit("u", 4)
	u.Debt = true
	a := lim{5, 5, time.Hour}.hit("a", 2)
	empty := lim{1, 1, time.Hour}.hit("e", 1)
	res := make([]rls.Result, 3)
	ok, err := s.Decide(ctx, []rls.Hit{empty}, res[:1])
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.Decide(ctx, []rls.Hit{u, a, empty}, res)
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, []bool{true, true, false}, []bool{res[0].OK, res[1].OK, res[2].OK})
	require.Equal(t, []int64{6, 5, 0}, []int64{res[0].Remaining, res[1].Remaining, res[2].Remaining},
		"the debt hit was charged, the ordinary one took nothing")

	sh := u
	sh.N, sh.Shadow = 20, true
	ok, err = s.Decide(ctx, []rls.Hit{sh, a}, res[:2])
	require.NoError(t, err)
	require.True(t, ok, "a shadow debt hit does not refuse")
	require.False(t, res[0].OK)
	require.Equal(t, int64(3), res[1].Remaining)
	_, r := decide1(t, s, u)
	require.Equal(t, int64(0), r.Remaining)
	require.Equal(t, 2*time.Hour, r.ResetAfter, "6 - 20 - 4, clamped to -10: 20 tokens at 10 an hour")
}

// TestDebtChange: a rule that loses debt: true keeps the debt (a change of
// limit never forgives counted usage), one that gains it starts from the
// balance.
func TestDebtChange(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	s := memstore.New(memstore.WithClock(clk))
	u := lim{10, 10, time.Hour}.hit("u", 15)
	u.Debt = true
	ok, _ := decide1(t, s, u)
	require.False(t, ok)
	plain := lim{10, 10, time.Hour}.hit("u", 0)
	ok, r := decide1(t, s, plain)
	require.False(t, ok, "a balance of -5 holds nothing, not even a check")
	require.Equal(t, 90*time.Minute, r.ResetAfter, "-5 kept: 15 tokens at 10 an hour")
	clk.Advance(30 * time.Minute)
	ok, r = decide1(t, s, plain)
	require.True(t, ok, "refill has repaid the debt: a balance of 0 holds a check")
	require.Equal(t, time.Hour, r.ResetAfter)
}
