package redisstore

import (
	"context"
	"math"

	"github.com/admit-go/admit/rls"
)

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
	var n int64
	for i, h := range hits {
		if res[i].OK && !h.Debt && h.N > 0 {
			n = min(n+h.N, math.MaxInt64/2)
		}
	}
	last := len(hits) - 1
	h := hits[last]
	h.N = min(n, 2*h.Capacity)
	if !ok {
		h.N = 0
	}
	return ok, res, h, TakeState{D: tk[last].d, T: tk[last].t, Full: tk[last].full, tk: tk[last]}, nil
}
