package redisbucket

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/admit-go/admit"
	"github.com/redis/go-redis/v9"
)

var _ admit.PolicyLimiter = (*Limiter)(nil)

// NewLimits returns a Limiter whose AllowN applies every one of limits to
// each key, all or nothing, as admit.PolicyLimiter's rules say, decided in
// one script on the key's one Redis key. Limits are checked by
// admit.ValidateLimits, there may be at most MaxLimits, and each must be
// representable (see the package doc); errors wrap admit.ErrInvalidConfig. With WithBatch, a round trip
// takes the batch from every limit at once (see WithBatch).
func NewLimits(client redis.UniversalClient, limits []admit.Limit, opts ...Option) (*Limiter, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", admit.ErrInvalidConfig)
	}
	if err := checkClient(client); err != nil {
		return nil, err
	}
	return newLimiter(newGoRedis(client), limits, opts)
}

// AllowLimits decides key against limits chosen for this call, as
// admit.PolicyLimiter's rules say: all or nothing, in one script on the
// key's one Redis key, on the server's clock, in one round trip. More than
// MaxLimits limits are an error wrapping admit.ErrInvalidConfig. State is
// per (key, Name) and shared with AllowN's limits of the same Names. A Name
// the key holds with another Capacity or Rate carries its balance over
// (advanced to now at the old rate; a bucket full there is full under the
// new limit, one not full is clamped to the new capacity; the conversion
// rounds down, by under one unit of the new limit, what it refills in one
// tick: a millionth of a token at 1/s, nearly one at 1e6/s); AllowN's own limits
// instead refuse such a key (see WithPrefix).
//
// AllowLimits is never batched, whatever WithBatch says: leases belong to
// the limiter's own limits. When Redis cannot decide, the failure policy
// decides; a WithFallback limiter that is an admit.PolicyLimiter is asked
// AllowLimits with the same limits, any other its AllowN.
func (l *Limiter) AllowLimits(ctx context.Context, key string, n int64, limits ...admit.Limit) (admit.Decision, error) {
	set, err := l.cache.set(limits)
	if err != nil {
		return admit.Decision{}, err
	}
	if n < 0 || n > set.minCap {
		m := set.limits[set.minIdx]
		return admit.Decision{Limit: m.Capacity, Policy: m.Name}, fmt.Errorf("%w: n=%d is outside [0, capacity %d of limit %q]", admit.ErrUnsatisfiable, n, m.Capacity, m.Name)
	}
	if err := ctx.Err(); err != nil {
		return admit.Decision{}, err
	}
	d, _, err := l.remote(ctx, key, n, n, time.Time{}, set, nil)
	return d, err
}

// limitSet is one call's limits as the script takes them.
type limitSet struct {
	limits []admit.Limit // Names and Capacities, for Decisions
	params []params
	minCap int64 // the smallest Capacity: n above it is unsatisfiable
	minIdx int   // the first limit with it
	// perCall: chosen by the caller (AllowLimits), so a fallback that is a
	// PolicyLimiter is handed them; strict otherwise.
	perCall bool
	// argv: the script's ARGV after n and want: the strict flag, the
	// limits' record heads back to back, and their parameters packed (see
	// the script's doc). boxed is argv as go-redis takes it, boxed once
	// for a fixed set so that a decision allocates nothing for it.
	argv  []string
	boxed []any
}

// MaxLimits is the most limits one call may bring (NewLimits' limits, or
// AllowLimits'); more are rejected with an error wrapping
// admit.ErrInvalidConfig, before any round trip. The script's work and its
// arguments grow with each limit, and Lua's stack bounds what it can take
// at once (2 000 limits overflowed it). A key may still hold records of
// more Names, brought by different calls: the script reads and writes any
// number of them.
const MaxLimits = 64

// newLimitSet checks limits and picks each one's units.
func newLimitSet(limits []admit.Limit, perCall bool) (*limitSet, error) {
	if len(limits) > MaxLimits {
		return nil, fmt.Errorf("%w: %d limits in one call, above redisbucket.MaxLimits (%d)", admit.ErrInvalidConfig, len(limits), MaxLimits)
	}
	if err := admit.ValidateLimits(limits); err != nil {
		return nil, err
	}
	s := &limitSet{limits: append([]admit.Limit(nil), limits...), perCall: perCall}
	for i := range s.limits {
		s.limits[i].Name = strings.Clone(s.limits[i].Name) // see setCache.set
	}
	strict := "1"
	if perCall {
		strict = "0"
	}
	var heads, packed strings.Builder
	for i, lim := range limits {
		p, err := newParams(lim.Capacity, lim.Rate)
		if err != nil {
			return nil, fmt.Errorf("limit %q: %w", lim.Name, err)
		}
		s.params = append(s.params, p)
		heads.WriteString(p.head(lim.Name))
		packed.WriteString(pack(p.capUnits, p.per, p.m, p.q))
		if i == 0 || lim.Capacity < s.minCap {
			s.minCap, s.minIdx = lim.Capacity, i
		}
	}
	s.argv = []string{strict, heads.String(), packed.String()}
	s.boxed = make([]any, len(s.argv))
	for i, a := range s.argv {
		s.boxed[i] = a
	}
	return s, nil
}

// maxCached bounds the limit sets a Limiter remembers for AllowLimits;
// past it, a set not seen before is built for its call and not kept.
const maxCached = 1024

// setCache remembers AllowLimits' sets by their limits, so that a call
// with limits seen before does not redo newParams' exact arithmetic (big
// rationals) or allocate the arguments again. Safe for concurrent use.
type setCache struct {
	m sync.Map // setKey → *limitSet
	n atomic.Int64
}

// setKey is up to eight limits, compared as values; calls with more are
// not cached.
type setKey struct {
	n int
	l [8]admit.Limit
}

func (c *setCache) set(limits []admit.Limit) (*limitSet, error) {
	var k setKey
	cacheable := len(limits) <= len(k.l)
	if cacheable {
		k.n = copy(k.l[:], limits)
		for _, lim := range limits {
			if lim.Rate != lim.Rate { // NaN: never equal to itself
				cacheable = false
			}
		}
		if cacheable {
			// Looked up with the caller's Names, which compare by value:
			// a call with limits seen before allocates nothing for them.
			if s, ok := c.m.Load(k); ok {
				return s.(*limitSet), nil
			}
		}
	}
	s, err := newLimitSet(limits, true)
	if err != nil || !cacheable || c.n.Load() >= maxCached {
		return s, err
	}
	for i := range k.n {
		// Stored with copies: a caller's Name may be a slice of a much
		// larger string, which the cache would otherwise keep alive.
		k.l[i].Name = strings.Clone(k.l[i].Name)
	}
	if _, loaded := c.m.LoadOrStore(k, s); !loaded {
		c.n.Add(1)
	}
	return s, nil
}

// head is the limit's record head in the script's form: "<len>:<name>"
// then cap, per, m and q packed (see pack).
func (p params) head(name string) string {
	return strconv.Itoa(len(name)) + ":" + name + pack(p.capUnits, p.per, p.m, p.q)
}

// pack returns the script's binary form of integers below 2^53: each a
// little-endian IEEE 754 double, 8 bytes, as Lua's struct.pack('<d')
// writes it (exact: a double holds every integer below 2^53).
func pack(v ...int64) string {
	b := make([]byte, 0, 8*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(x)))
	}
	return string(b)
}
