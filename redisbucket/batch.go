package redisbucket

import (
	"context"
	"sync"
	"time"

	"github.com/admit-go/admit"
)

// maxLeases bounds the keys a batcher remembers; past it, expired leases
// are swept, and if none expired a new key is decided without batching.
const maxLeases = 4096

// batcher holds, per hot key, tokens already taken from Redis that this
// process may spend locally until the lease expires.
type batcher struct {
	n   int64
	age time.Duration

	mu     sync.Mutex
	leases map[string]*lease // requires mu
}

// lease is one key's local surplus. lock is a one-slot semaphore rather
// than a mutex so that a caller waiting behind another's round trip can
// give up when its ctx ends. While a round trip is in flight the lock is
// held: callers on the same key wait for its result instead of sending
// their own, which is what batching saves.
type lease struct {
	lock chan struct{}
	// The rest requires lock.
	left    int64 // tokens taken from Redis and not yet spent
	expires int64 // monotonic ns after which left is void
	last    admit.Decision
	// A denial is remembered too: until deniedUntil fewer than deniedN
	// tokens can exist (the server said so, and other clients only take),
	// so denying n >= deniedN locally until then is exact.
	deniedN     int64
	deniedUntil int64
	denied      admit.Decision
}

func newBatcher(n int64, age time.Duration) *batcher {
	return &batcher{n: n, age: age, leases: make(map[string]*lease)}
}

func (b *batcher) get(key string) *lease {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.leases[key]; ok {
		return e
	}
	if len(b.leases) >= maxLeases {
		now := int64(time.Since(mono))
		for k, e := range b.leases {
			// An entry whose lock is held is in use; TryLock-style probe.
			select {
			case e.lock <- struct{}{}:
				if now >= e.expires {
					delete(b.leases, k)
				}
				<-e.lock
			default:
			}
		}
		if len(b.leases) >= maxLeases {
			return nil
		}
	}
	e := &lease{lock: make(chan struct{}, 1)}
	b.leases[key] = e
	return e
}

func (b *batcher) allow(ctx context.Context, l *Limiter, key string, n int64) (admit.Decision, error) {
	e := b.get(key)
	if e == nil {
		d, _, err := l.remote(ctx, key, n, n, time.Time{})
		return d, err
	}
	select {
	case e.lock <- struct{}{}:
	case <-ctx.Done():
		return admit.Decision{}, ctx.Err()
	}
	defer func() { <-e.lock }()
	now := int64(time.Since(mono))
	if now < e.expires && e.left >= n {
		e.left -= n
		d := e.last
		d.Remaining += e.left
		return d, nil
	}
	if e.deniedN > 0 && n >= e.deniedN && now < e.deniedUntil {
		d := e.denied
		d.RetryAfter = time.Duration(e.deniedUntil - now)
		return d, nil
	}
	// The lease's age counts from before the request is sent: the server
	// takes the tokens later than that, so none is spent more than age after
	// the server handed it out.
	start := now
	d, taken, err := l.remote(ctx, key, n, max(b.n, n), time.Time{})
	e.left, e.expires, e.deniedN = 0, 0, 0
	if err != nil {
		return d, err
	}
	if !d.Allowed {
		// The server decided after start, so start + RetryAfter is no
		// later than the moment n tokens exist. Held at most age, like a
		// lease, so that Remaining stays fresh.
		e.deniedN, e.deniedUntil, e.denied = n, start+int64(min(d.RetryAfter, b.age)), d
		return d, nil
	}
	e.left, e.expires = taken-n, start+int64(b.age)
	e.last = d
	// Remaining counts the surplus this process holds: it is spendable
	// here, though Redis already counts it as taken.
	d.Remaining += e.left
	return d, nil
}
