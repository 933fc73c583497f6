package redisstore

import (
	"context"

	"github.com/admit-go/admit/rls"
)

// TakeState is a take as decideSplit keeps it for a give-back: D and T are
// the bucket's debt and tick after the take, for a test to read; the
// give-back uses the whole take as the script reported it.
type TakeState struct {
	D, T int64
	tk   take
}

// TakeForTest takes h's cost as the first phase of a split decision does.
// s tracks its keys from then on, as a Cluster's store always does.
func (s *Store) TakeForTest(ctx context.Context, h rls.Hit) (rls.Result, TakeState, error) {
	s.track = true
	p, err := s.paramsFor(&h)
	if err != nil {
		return rls.Result{}, TakeState{}, err
	}
	res, tk := make([]rls.Result, 1), make([]take, 1)
	_, err = s.run(ctx, []rls.Hit{h}, []params{p}, res, nil, tk, false)
	return res[0], TakeState{D: tk[0].d, T: tk[0].t, tk: tk[0]}, err
}

// GiveBackForTest gives back h's cost for the take ts, as decideSplit does
// when another key refused the request.
func (s *Store) GiveBackForTest(ctx context.Context, h rls.Hit, ts TakeState) (rls.Result, error) {
	p, err := s.paramsFor(&h)
	if err != nil {
		return rls.Result{}, err
	}
	res := make([]rls.Result, 1)
	_, err = s.run(ctx, []rls.Hit{h}, []params{p}, res, []take{ts.tk}, nil, false)
	return res[0], err
}

// TrackForTest makes s keep its keys' versions and points, as a Cluster's
// store does, on one Redis.
func (s *Store) TrackForTest() { s.track = true }

// TakeReqForTest runs one key's hits as the first phase of a split
// decision does (one script), and returns whether the script admitted
// them, each hit's result, and the give-back decideSplit would send if
// another key refused the request (N 0: nothing to give back).
func (s *Store) TakeReqForTest(ctx context.Context, hits []rls.Hit) (bool, []rls.Result, rls.Hit, TakeState, error) {
	s.track = true
	ps := make([]params, len(hits))
	for i := range hits {
		p, err := s.paramsFor(&hits[i])
		if err != nil {
			return false, nil, rls.Hit{}, TakeState{}, err
		}
		ps[i] = p
	}
	res, tk := make([]rls.Result, len(hits)), make([]take, len(hits))
	ok, err := s.run(ctx, hits, ps, res, nil, tk, false)
	if err != nil {
		return false, nil, rls.Hit{}, TakeState{}, err
	}
	idx := make([]int, len(hits))
	for i := range idx {
		idx[i] = i
	}
	h := giveBack(hits, res, idx)
	if !ok {
		h.N = 0
	}
	last := len(hits) - 1
	return ok, res, h, TakeState{D: tk[last].d, T: tk[last].t, tk: tk[last]}, nil
}
