package redisbucket

import (
	"encoding/binary"
	"math"
	"strconv"
	"strings"

	"github.com/admit-go/admit"
)

// Units exposes a limiter's representation to the tests: units per token
// and the capacity in units.
func Units(l *Limiter) (per, capUnits int64) {
	return l.fixed.params[0].per, l.fixed.params[0].capUnits
}

// Tick is the limiter's tick in microseconds.
func Tick(l *Limiter) int64 { return l.fixed.params[0].q }

// ScriptHash is the SHA-1 that EVALSHA names.
func ScriptHash() string { return script.Hash() }

// Leases is how many keys the limiter's batcher holds.
func Leases(l *Limiter) int {
	l.batch.mu.Lock()
	defer l.batch.mu.Unlock()
	return len(l.batch.leases)
}

// MaxLeases bounds Leases.
const MaxLeases = maxLeases

// RedisKey is key's name in Redis.
func RedisKey(l *Limiter, key string) string { return l.rkey(key) }

// Stored is the value the script stores for debt d (units) at tick t.
func Stored(l *Limiter, d, t int64) string {
	return l.fixed.argv[1] + pack(d, t)
}

// Head is the record heads of the limiter's limits, back to back, as the
// script receives them; Params their parameters, packed.
func Head(l *Limiter) string { return l.fixed.argv[1] }

func Params(l *Limiter) string { return l.fixed.argv[2] }

// SweepExamined is how many leases the batcher's sweeps have looked at.
func SweepExamined(l *Limiter) int64 {
	l.batch.mu.Lock()
	defer l.batch.mu.Unlock()
	return l.batch.examined
}

// Record is the stored record of lim with debt d (units) at tick t, and the
// limit's units per token and µs per tick.
func Record(lim admit.Limit, d, t int64) (rec string, per, q int64) {
	p, err := newParams(lim.Capacity, lim.Rate)
	if err != nil {
		panic(err)
	}
	return p.head(lim.Name) + pack(d, t), p.per, p.q
}

// Cached is how many limit sets the limiter remembers for AllowLimits.
func Cached(l *Limiter) int64 { return l.cache.n.Load() }

// Stored1 is one record of a stored value, decoded.
type Stored1 struct {
	Name           string
	Cap, Per, M, Q int64
	D, T           int64
}

// Join returns the stored value holding records, each one as Record
// returns it (its head, then its 16 bytes of state): the heads back to
// back, then the states.
func Join(records ...string) string {
	var heads, states strings.Builder
	for _, r := range records {
		heads.WriteString(r[:len(r)-16])
		states.WriteString(r[len(r)-16:])
	}
	return heads.String() + states.String()
}

// Decode splits a stored value into its records, or reports false if it
// does not parse (as the script's records does).
func Decode(v string) ([]Stored1, bool) {
	var out []Stored1
	i := 0
	for len(v)-i > 16*len(out) {
		c := strings.IndexByte(v[i:], ':')
		if c < 1 {
			return nil, false
		}
		n, err := strconv.Atoi(v[i : i+c])
		if err != nil || n < 0 || len(v) < i+c+1+n+32 {
			return nil, false
		}
		p := unpack(v[i+c+1+n:], 4)
		if p == nil {
			return nil, false
		}
		out = append(out, Stored1{Name: v[i+c+1 : i+c+1+n], Cap: p[0], Per: p[1], M: p[2], Q: p[3]})
		i += c + 1 + n + 32
	}
	if len(v)-i != 16*len(out) {
		return nil, false
	}
	for x := range out {
		st := unpack(v[i+16*x:], 2)
		if st == nil {
			return nil, false
		}
		out[x].D, out[x].T = st[0], st[1]
	}
	return out, true
}

// unpack reads n packed integers from the start of b, or returns nil if one
// is not an integer in [0, 2^53).
func unpack(b string, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		f := math.Float64frombits(binary.LittleEndian.Uint64([]byte(b[8*i : 8*i+8])))
		if f != math.Trunc(f) || f < 0 || f >= 1<<53 {
			return nil
		}
		out[i] = int64(f)
	}
	return out
}

// Lease reports key's lease in the limiter's batcher: the tokens it holds
// and whether a round trip for it is in flight; ok is false if there is no
// lease for key.
func Lease(l *Limiter, key string) (left int64, inFlight, ok bool) {
	l.batch.mu.Lock()
	e, ok := l.batch.leases[key]
	l.batch.mu.Unlock()
	if !ok {
		return 0, false, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.left, e.flight != nil, true
}

// ScriptSource is the script's Lua source.
const ScriptSource = src
