package redisstore

import (
	"context"

	"github.com/admit-go/admit/rls"
)

// TakeState is a take as decideSplit keeps it for a give-back: D and T, the
// bucket's debt and tick after the take, may be changed by a test (to say
// the take happened longer ago); the rest (whether the key was full, the
// state a refused request leaves) comes from the script as it is.
type TakeState struct {
	D, T int64
	Full bool // the key was not full only by a clamp (no flag 8)
	tk   take
}

// TakeForTest takes h's cost as the first phase of a split decision does.
func (s *Store) TakeForTest(ctx context.Context, h rls.Hit) (rls.Result, TakeState, error) {
	p, err := s.paramsFor(&h)
	if err != nil {
		return rls.Result{}, TakeState{}, err
	}
	res, tk := make([]rls.Result, 1), make([]take, 1)
	_, err = s.run(ctx, []rls.Hit{h}, []params{p}, res, nil, tk, false)
	return res[0], TakeState{D: tk[0].d, T: tk[0].t, Full: tk[0].full, tk: tk[0]}, err
}

// GiveBackForTest gives back h's cost for the take ts, as decideSplit does
// when another key refused the request.
func (s *Store) GiveBackForTest(ctx context.Context, h rls.Hit, ts TakeState) (rls.Result, error) {
	p, err := s.paramsFor(&h)
	if err != nil {
		return rls.Result{}, err
	}
	tk := ts.tk
	tk.d, tk.t, tk.full = ts.D, ts.T, ts.Full
	res := make([]rls.Result, 1)
	_, err = s.run(ctx, []rls.Hit{h}, []params{p}, res, []take{tk}, nil, false)
	return res[0], err
}
