package rls

import (
	"context"
	"time"

	"github.com/admit-go/admit"
)

// Hit is one descriptor's share of a request: the bucket it draws from and
// what it costs.
type Hit struct {
	// Key names the bucket: the domain and the descriptor's entries.
	Key string
	// Capacity is the bucket's burst; Count per Period is its rate,
	// exactly (requests_per_unit per unit).
	Capacity int64
	Count    int64
	Period   time.Duration
	// N is the cost, hits_addend; 0 checks without taking.
	N int64
	// Shadow marks a hit that may lack N tokens without refusing the
	// request (shadow_mode): it is reported, not enforced.
	Shadow bool
}

// Limit returns the hit's bucket as an admit.Limit (the rate rounded to a
// float64).
func (h *Hit) Limit() admit.Limit {
	return admit.Limit{Capacity: h.Capacity, Rate: float64(h.Count) / h.Period.Seconds()}
}

// Result is one hit's outcome.
type Result struct {
	// OK reports whether the bucket held N tokens at the decision.
	OK bool
	// Remaining is the bucket's whole tokens after the decision.
	Remaining int64
	// ResetAfter is the time until the bucket is full again; 0 when full.
	ResetAfter time.Duration
}

// Store holds the buckets and decides requests. Rules, for every
// implementation:
//
//  1. All or nothing. A request is admitted exactly when every hit that is
//     not Shadow holds its N tokens at one instant. An admitted request
//     takes N from every hit that holds N (a Shadow hit that lacks them
//     takes nothing); a refused request takes from none.
//  2. Each Key is a token bucket with admit's semantics: created full,
//     refilled lazily, never more than Capacity + Count/Period × T admitted
//     over a span T in which its limit did not change. A changed limit
//     carries the balance over, clamped to the new capacity.
//  3. N above Capacity (or negative) is never held.
//  4. Hits of one request may share a Key; they are taken in order, so two
//     hits of one key need both costs.
//
// results has one entry per hit. Check reports whether the store can
// represent a hit's bucket (its capacity and rate; Key and N are ignored),
// with an error wrapping admit.ErrInvalidConfig when it cannot; Decide
// fails on such a hit the same way. A Store is safe for concurrent use.
type Store interface {
	Decide(ctx context.Context, hits []Hit, results []Result) (admitted bool, err error)
	Check(h Hit) error
}

// Never is a ResetAfter too long for a time.Duration.
const Never = time.Duration(1<<63 - 1)
