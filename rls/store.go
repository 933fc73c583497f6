package rls

import (
	"context"
	"time"
)

// Hit is one descriptor's share of a request: the bucket it draws from and
// what it costs.
type Hit struct {
	// Key names the bucket: the domain and the descriptor's entries.
	Key string
	// Capacity is the bucket's burst; Count per Period is its rate,
	// exactly (requests_per_unit per unit). Capacity 0 is a limit of zero
	// (requests_per_unit: 0): no bucket, nothing held but a check (N = 0).
	Capacity int64
	Count    int64
	Period   time.Duration
	// N is the cost, hits_addend; 0 checks without taking.
	N int64
	// Shadow marks a hit that may lack N tokens without refusing the
	// request (shadow_mode): it is reported, not enforced.
	Shadow bool
	// Debt marks a hit that is charged whatever the request's outcome
	// (a rule with debt: true, for usage reported after the fact): it
	// takes N even when the bucket lacks them, down to a balance of minus
	// one burst, and still refuses the request (unless Shadow) when the
	// bucket lacked them.
	Debt bool
}

// Result is one hit's outcome.
type Result struct {
	// OK reports whether the bucket held N tokens at the decision (a
	// bucket in debt holds none, not even 0).
	OK bool
	// Remaining is the bucket's whole tokens right after this hit, as the
	// decision leaves it (with the request's takes up to this hit if it is
	// admitted, its debt charges up to this hit if refused), 0 when in
	// debt: two hits of one key report the first's take, then both, as
	// envoyproxy/ratelimit's increments do; a key's last hit reports the
	// bucket after the decision.
	Remaining int64
	// ResetAfter is the time from then until the bucket is full again; 0
	// when full, Never when it never will be.
	ResetAfter time.Duration
}

// Store holds the buckets and decides requests. Rules, for every
// implementation:
//
//  1. All or nothing. A request is admitted exactly when every hit that is
//     not Shadow holds its N tokens at one instant. An admitted request
//     takes N from every hit that holds N (a Shadow hit that lacks them
//     takes nothing); a refused request takes from none, except its Debt
//     hits, which are charged whatever the outcome.
//  2. Each Key is a token bucket with admit's semantics: created full,
//     refilled lazily and exactly (Count tokens per Period), never more
//     than Capacity + Count/Period × T admitted over a span T in which its
//     limit did not change. Debt hits may take a bucket's balance down to
//     −Capacity; a bucket below zero holds nothing until refill has repaid
//     the debt.
//  3. A changed limit (Capacity, Count or Period) applies at the first hit
//     that brings it, whatever that hit's outcome: the balance, fraction
//     included, carries over to the new limit and refills at the new rate
//     from then on, clamped to [−Capacity, Capacity] of the new limit, so
//     lowering a limit never gives tokens back and a debt stays owed
//     (down to the new limit's own bound) whether or not the new hits are
//     Debt. A full bucket is the same as none and is full under the new
//     limit too.
//  4. N above Capacity (or negative) is never held. A hit of Capacity 0
//     holds only N = 0 and has no bucket: Remaining 0, ResetAfter 0.
//  5. Hits of one request may share a Key; they are taken in order, so two
//     hits of one key need both costs, and each reports the bucket as its
//     own hit left it (Result).
//
// results has one entry per hit. Check reports whether the store can
// represent a hit's bucket (its capacity, rate and Debt; Key and N are
// ignored), with an error wrapping admit.ErrInvalidConfig when it cannot;
// Decide fails on such a hit the same way. A Store is safe for concurrent
// use.
type Store interface {
	Decide(ctx context.Context, hits []Hit, results []Result) (admitted bool, err error)
	Check(h Hit) error
}

// Never is a ResetAfter too long for a time.Duration.
const Never = time.Duration(1<<63 - 1)
