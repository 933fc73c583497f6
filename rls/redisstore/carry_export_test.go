package redisstore

import (
	"context"

	"github.com/admit-go/admit/rls"
)

// TakeFullForTest is TakeForTest that also returns the take's full flag
// (the script's seventh value), as decideSplit keeps it.
func (s *Store) TakeFullForTest(ctx context.Context, h rls.Hit) (rls.Result, int64, int64, bool, error) {
	p, err := s.paramsFor(&h)
	if err != nil {
		return rls.Result{}, 0, 0, false, err
	}
	res, tk := make([]rls.Result, 1), make([]take, 1)
	_, err = s.run(ctx, []rls.Hit{h}, []params{p}, res, nil, tk, false)
	lastTake = tk[0]
	return res[0], tk[0].d, tk[0].t, tk[0].full, err
}

// GiveBackFullForTest is GiveBackForTest with the take's full flag as
// decideSplit passes it (flag 8 when false).
func (s *Store) GiveBackFullForTest(ctx context.Context, h rls.Hit, d, t int64, full bool) (rls.Result, error) {
	p, err := s.paramsFor(&h)
	if err != nil {
		return rls.Result{}, err
	}
	res := make([]rls.Result, 1)
	_, err = s.run(ctx, []rls.Hit{h}, []params{p}, res, []take{{d: d, t: t, full: full, dref: lastTake.dref, marked: lastTake.marked, refMark: lastTake.refMark}}, nil, false)
	return res[0], err
}
