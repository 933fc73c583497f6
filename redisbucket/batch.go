package redisbucket

import (
	"context"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/admit-go/admit"
)

// maxLeases bounds the keys a batcher remembers; past it, a new key looks
// at up to sweepSample of them for expired ones to drop, and if none had
// expired it is decided without batching.
const maxLeases = 4096

// sweepSample is how many leases a new key over maxLeases looks at: a
// bounded sweep, so that a decision's cost does not grow with the table (a
// full sweep of 4 096 live leases cost about a millisecond per new key,
// under the lock every batched decision takes).
const sweepSample = 32

// batcher holds, per hot key, tokens already taken from Redis that this
// process may spend locally until the lease expires.
type batcher struct {
	n   int64
	age time.Duration

	mu       sync.Mutex
	leases   map[string]*lease // requires mu
	examined int64             // leases looked at by sweeps, for the tests; requires mu
}

// lease is one key's local surplus and its round trip in flight. mu is
// held only to read or change these fields, never across a round trip:
// callers that find a round trip in flight wait for its done channel, each
// bounded by its own context and decision deadline.
type lease struct {
	mu sync.Mutex
	// The rest requires mu.
	left    int64 // tokens taken from Redis and not yet spent
	expires int64 // monotonic ns after which left is void
	last    admit.Decision
	// A denial is remembered too: until deniedUntil fewer than deniedN
	// tokens can exist (the server said so, and other clients only take),
	// so denying n >= deniedN locally until then is exact. retryAt is when
	// the server said n would exist (Never's sentinel: retryNever);
	// deniedUntil is that, capped at age after sending.
	deniedN     int64
	deniedUntil int64
	retryAt     int64
	denied      admit.Decision
	flight      chan struct{} // closed when the round trip in flight ends; nil if none
}

// retryNever marks a remembered denial that no refill will lift.
const retryNever = int64(-1)

func newBatcher(n int64, age time.Duration) *batcher {
	return &batcher{n: n, age: age, leases: make(map[string]*lease)}
}

func (b *batcher) get(key string) *lease {
	b.mu.Lock()
	defer b.mu.Unlock()
	key = keyForm(key) // the table holds at most maxLeases keys of at most 65 bytes
	if e, ok := b.leases[key]; ok {
		return e
	}
	if len(b.leases) >= maxLeases {
		now := int64(time.Since(mono))
		seen := 0
		// Map iteration starts at a random entry: successive sweeps look
		// at different leases.
		for k, e := range b.leases {
			if seen == sweepSample {
				break
			}
			seen++
			// A lease whose mu is held, or with a round trip in flight, is
			// in use.
			if e.mu.TryLock() {
				if e.flight == nil && now >= e.expires && now >= e.deniedUntil {
					delete(b.leases, k)
				}
				e.mu.Unlock()
			}
		}
		b.examined += int64(seen)
		if len(b.leases) >= maxLeases {
			return nil
		}
	}
	e := &lease{}
	// A copy: the caller's string may be a slice of a much larger one
	// (a request's buffer), which the table would otherwise keep alive.
	b.leases[strings.Clone(key)] = e
	return e
}

func (b *batcher) allow(ctx context.Context, l *Limiter, key string, n int64) (admit.Decision, error) {
	e := b.get(key)
	if e == nil {
		d, _, err := l.remote(ctx, key, n, n, time.Time{}, l.fixed, nil)
		return d, err
	}
	// by is the decision's deadline once it has waited for another's round
	// trip: the wait and whatever follows it fit in one timeout.
	var by time.Time
	for {
		e.mu.Lock()
		now := int64(time.Since(mono))
		if now < e.expires && e.left >= n {
			e.left -= n
			d := e.last
			d.Remaining += e.left
			e.mu.Unlock()
			return d, nil
		}
		if e.deniedN > 0 && n >= e.deniedN && now < e.deniedUntil {
			d := e.denied
			d.RetryAfter = Never
			if e.retryAt != retryNever {
				d.RetryAfter = time.Duration(max(e.retryAt-now, 1))
			}
			e.mu.Unlock()
			return d, nil
		}
		if e.flight == nil {
			break // this caller sends; e.mu is held
		}
		if !by.IsZero() {
			// Already waited for one round trip, and another is in flight:
			// no queueing behind round trip after round trip; decide this
			// one on its own.
			e.mu.Unlock()
			d, _, err := l.remote(ctx, key, n, n, by, l.fixed, nil)
			return d, err
		}
		f := e.flight
		e.mu.Unlock()
		by = time.Now().Add(l.timeout)
		stop := time.NewTimer(l.timeout)
		select {
		case <-f:
			stop.Stop()
		case <-ctx.Done():
			stop.Stop()
			return admit.Decision{}, ctx.Err()
		case <-stop.C:
			// The round trip ahead outlived this decision's timeout (the
			// breaker hears of it from that round trip itself).
			d, _, err := l.unavailable(ctx, key, n, &timeoutError{after: l.timeout, what: "no decision (waiting for a round trip on the same key)"}, l.fixed)
			return d, err
		}
	}
	// The lease's age counts from before the request is sent: the server
	// takes the tokens later than that, so none is spent more than age after
	// the server handed it out.
	start := int64(time.Since(mono))
	done := make(chan struct{})
	e.flight = done
	e.left, e.expires, e.deniedN = 0, 0, 0
	e.mu.Unlock()

	// The round trip's outcome lands in the lease whether or not this
	// caller is still waiting for it (see handoff): landed by this caller,
	// which spends n of it, or, if it left first, by the request's
	// goroutine, which spends none. Until then the flight stays open, so
	// that callers who come meanwhile wait for it rather than send their own.
	h := &handoff{land: func(res []int64, err error) {
		d, taken, derr := decision(res, l.fixed)
		if err == nil {
			err = derr
		}
		b.land(e, done, start, 0, n, d, taken, err)
	}}
	d, taken, err := l.remote(ctx, key, n, max(b.n, n), by, l.fixed, h)
	if h.left {
		return d, err
	}
	return b.land(e, done, start, n, n, d, taken, err)
}

// land records a round trip's outcome in lease e and ends its flight, done:
// taken tokens, of which used are spent by the caller that lands it (n, or
// 0 for a caller that left), or a denial of n. start is when the request
// was sent. It returns the caller's Decision.
func (b *batcher) land(e *lease, done chan struct{}, start, used, n int64, d admit.Decision, taken int64, err error) (admit.Decision, error) {
	e.mu.Lock()
	defer func() {
		e.flight = nil
		close(done)
		e.mu.Unlock()
	}()
	if err != nil {
		return d, err
	}
	if !d.Allowed {
		// The server decided after start, so start + RetryAfter is no
		// later than the moment n tokens exist. Held at most age, like a
		// lease, so that Remaining stays fresh; the RetryAfter reported from
		// it is the server's, counted down.
		e.deniedN, e.denied = n, d
		e.retryAt, e.deniedUntil = retryNever, start+int64(b.age)
		if d.RetryAfter != Never {
			// Saturating: a RetryAfter of centuries must not wrap.
			e.retryAt = start + min(int64(d.RetryAfter), math.MaxInt64-1-start)
			e.deniedUntil = min(e.deniedUntil, e.retryAt)
		}
		return d, nil
	}
	e.left, e.expires = taken-used, start+int64(b.age)
	e.last = d
	// Remaining counts the surplus this process holds: it is spendable
	// here, though Redis already counts it as taken.
	d.Remaining += e.left
	return d, nil
}
