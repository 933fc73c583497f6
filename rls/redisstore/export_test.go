package redisstore

import (
	"context"

	"github.com/admit-go/admit/rls"
)

// TakeForTest takes h's cost as the first phase of a split decision does,
// returning the bucket's debt and tick after it.
func (s *Store) TakeForTest(ctx context.Context, h rls.Hit) (rls.Result, int64, int64, error) {
	p, err := s.paramsFor(&h)
	if err != nil {
		return rls.Result{}, 0, 0, err
	}
	res, tk := make([]rls.Result, 1), make([]take, 1)
	_, err = s.run(ctx, []rls.Hit{h}, []params{p}, res, nil, tk, false)
	lastTake = tk[0]
	return res[0], tk[0].d, tk[0].t, err
}

// lastTake is the last take of TakeForTest or TakeFullForTest: a give-back
// for a test passes its refused state and marks (the tests run serially).
var lastTake take

// GiveBackForTest gives back h's cost for a take that left debt d at tick t.
func (s *Store) GiveBackForTest(ctx context.Context, h rls.Hit, d, t int64) (rls.Result, error) {
	p, err := s.paramsFor(&h)
	if err != nil {
		return rls.Result{}, err
	}
	res := make([]rls.Result, 1)
	_, err = s.run(ctx, []rls.Hit{h}, []params{p}, res, []take{{d: d, t: t, full: true, dref: lastTake.dref, marked: lastTake.marked, refMark: lastTake.refMark}}, nil, false)
	return res[0], err
}
