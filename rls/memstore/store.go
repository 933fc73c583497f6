package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/internal/refill"
	"github.com/admit-go/admit/rls"
)

// nShards is the number of shards; a power of two.
const nShards = 64

// DefaultMaxKeys is the key bound when WithMaxKeys is not given.
const DefaultMaxKeys = 1 << 20

// MaxHits is the most hits one Decide accepts.
const MaxHits = 64

// sweep is how many buckets a new key at a full shard inspects for a full
// one before it evicts.
const sweep = 8

// Option configures a Store.
type Option func(*Store)

// WithClock sets the time source (a buckettest.FakeClock in tests).
func WithClock(c admit.Clock) Option { return func(s *Store) { s.clk = refill.NewClock(c) } }

// WithMaxKeys bounds the number of buckets held; n below nShards is raised
// to one per shard.
func WithMaxKeys(n int) Option { return func(s *Store) { s.maxKeys = n } }

// Store is the in-process rls.Store. It is safe for concurrent use; its zero
// value is not usable (build one with New) and it must not be copied after
// first use.
type Store struct {
	clk       refill.Clock
	seed      maphash.Seed
	maxKeys   int
	perShard  int
	params    sync.Map // paramsKey → *refill.Params: NewParams uses big.Rat, so each Limit is computed once
	evictions atomic.Int64
	shards    [nShards]shard
}

type shard struct {
	mu sync.Mutex
	m  map[string]*bucket
	_  [40]byte // keeps neighbouring shards' mutexes off one cache line
}

type paramsKey struct {
	capacity int64
	rate     float64
}

// bucket is one key's state: (tokens, last) in p's units and elapsed
// nanoseconds, for the limit lim. Guarded by its shard's mutex.
type bucket struct {
	lim    paramsKey
	p      *refill.Params
	tokens int64
	last   int64
}

var _ rls.Store = (*Store)(nil)

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{seed: maphash.MakeSeed(), maxKeys: DefaultMaxKeys}
	s.clk = refill.NewClock(nil)
	for _, o := range opts {
		o(s)
	}
	s.perShard = max(1, s.maxKeys/nShards)
	for i := range s.shards {
		s.shards[i].m = make(map[string]*bucket)
	}
	return s
}

// Evictions returns how many live buckets were dropped for room.
func (s *Store) Evictions() int64 { return s.evictions.Load() }

// Len returns the number of buckets held (full buckets are not held).
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

func (s *Store) paramsFor(l admit.Limit) (*refill.Params, error) {
	k := paramsKey{l.Capacity, l.Rate}
	if p, ok := s.params.Load(k); ok {
		return p.(*refill.Params), nil
	}
	p, err := refill.NewParams(l.Capacity, l.Rate)
	if err != nil {
		return nil, err
	}
	v, _ := s.params.LoadOrStore(k, &p)
	return v.(*refill.Params), nil
}

// Check implements rls.Store.
func (s *Store) Check(h rls.Hit) error {
	_, err := s.paramsFor(h.Limit())
	return err
}

// saved is a bucket's state before a request touched it, for the undo.
type saved struct {
	sh      *shard
	key     string
	b       *bucket
	old     bucket
	created bool
}

// Decide implements rls.Store; see the package doc for how it is atomic.
// Errors: a Limit refill cannot represent, or more than MaxHits hits, wrap
// admit.ErrInvalidConfig and nothing is taken.
func (s *Store) Decide(ctx context.Context, hits []rls.Hit, results []rls.Result) (bool, error) {
	if len(hits) > MaxHits {
		return false, fmt.Errorf("%w: %d descriptors, above %d", admit.ErrInvalidConfig, len(hits), MaxHits)
	}
	// Parameters first, outside the locks: NewParams may be slow once.
	var pbuf [8]*refill.Params
	ps := pbuf[:0]
	for i := range hits {
		p, err := s.paramsFor(hits[i].Limit())
		if err != nil {
			return false, err
		}
		ps = append(ps, p)
	}
	var ibuf, obuf [8]uint8
	idx, order := ibuf[:0], obuf[:0]
	for _, h := range hits {
		i := uint8(maphash.String(s.seed, h.Key) & (nShards - 1))
		idx = append(idx, i)
		order = insertUnique(order, i)
	}
	// Lock order: ascending shard index, released in reverse.
	for _, i := range order {
		s.shards[i].mu.Lock()
	}
	defer func() {
		for j := len(order) - 1; j >= 0; j-- {
			s.shards[order[j]].mu.Unlock()
		}
	}()
	now := s.clk.Now()

	var sbuf [8]saved
	undo := sbuf[:0]
	admitted := true
	for i, h := range hits {
		sh := &s.shards[idx[i]]
		p := ps[i]
		lim := h.Limit()
		b, ok := sh.m[h.Key]
		if !ok {
			s.room(sh, hits, now)
			b = &bucket{lim: paramsKey{lim.Capacity, lim.Rate}, p: p, tokens: p.Cap, last: now}
			sh.m[h.Key] = b
			undo = append(undo, saved{sh: sh, key: h.Key, b: b, created: true})
		} else {
			undo = append(undo, saved{sh: sh, key: h.Key, b: b, old: *b})
			if b.p != p {
				b.carry(p, paramsKey{lim.Capacity, lim.Rate}, now)
			}
		}
		b.tokens, b.last = b.p.Refill(b.tokens, b.last, now)
		ok = h.N >= 0 && h.N <= h.Capacity && b.tokens >= b.p.Units(h.N)
		results[i].OK = ok
		if ok {
			b.tokens -= b.p.Units(h.N)
		} else if !h.Shadow {
			admitted = false
		}
	}
	if !admitted {
		for j := len(undo) - 1; j >= 0; j-- {
			u := &undo[j]
			if u.created {
				delete(u.sh.m, u.key)
			} else {
				*u.b = u.old
			}
		}
	}
	for i, h := range hits {
		sh := &s.shards[idx[i]]
		b, ok := sh.m[h.Key]
		if !ok {
			results[i].Remaining, results[i].ResetAfter = h.Capacity, 0
			continue
		}
		bal, at := b.p.Refill(b.tokens, b.last, now)
		results[i].Remaining = bal >> b.p.Shift
		results[i].ResetAfter = 0
		if bal < b.p.Cap {
			results[i].ResetAfter = rls.Never
			if t, ok := b.p.Wake(bal, at, b.p.Cap); ok && t <= refill.Horizon {
				results[i].ResetAfter = time.Duration(t - now)
			}
		}
	}
	// A bucket full after the decision is the same as no bucket.
	for i, h := range hits {
		sh := &s.shards[idx[i]]
		if b, ok := sh.m[h.Key]; ok {
			if bal, _ := b.p.Refill(b.tokens, b.last, now); bal >= b.p.Cap {
				delete(sh.m, h.Key)
			}
		}
	}
	return admitted, nil
}

// carry moves b to new parameters: its balance advanced to now under the
// old ones, whole tokens kept, clamped to the new capacity. The fraction of
// a token is dropped, so a change never adds.
func (b *bucket) carry(p *refill.Params, lim paramsKey, now int64) {
	bal, at := b.p.Refill(b.tokens, b.last, now)
	whole := min(bal>>b.p.Shift, lim.capacity)
	b.p, b.lim, b.tokens, b.last = p, lim, p.Units(whole), at
}

// room makes space in sh for one more bucket: it drops full buckets met in a
// short scan and, if the shard is still at its bound, evicts a bucket that
// none of this request's hits uses. Called with sh locked.
func (s *Store) room(sh *shard, hits []rls.Hit, now int64) {
	if len(sh.m) < s.perShard {
		return
	}
	seen := 0
	victim := ""
	for k, b := range sh.m {
		if seen == sweep {
			break
		}
		seen++
		if uses(hits, k) {
			continue // its state may be saved for this request's undo
		}
		if bal, _ := b.p.Refill(b.tokens, b.last, now); bal >= b.p.Cap {
			delete(sh.m, k)
			continue
		}
		if victim == "" {
			victim = k
		}
	}
	if len(sh.m) >= s.perShard && victim != "" {
		delete(sh.m, victim)
		s.evictions.Add(1)
	}
}

func uses(hits []rls.Hit, key string) bool {
	for _, h := range hits {
		if h.Key == key {
			return true
		}
	}
	return false
}

// insertUnique inserts v into the ascending s unless present.
func insertUnique(s []uint8, v uint8) []uint8 {
	i := 0
	for i < len(s) && s[i] < v {
		i++
	}
	if i < len(s) && s[i] == v {
		return s
	}
	s = append(s, 0)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}
