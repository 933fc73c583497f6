package redisbucket

import "strconv"

// Units exposes a limiter's representation to the tests: units per token
// and the capacity in units.
func Units(l *Limiter) (per, capUnits int64) { return l.p.per, l.p.capUnits }

// Tick is the limiter's tick in microseconds.
func Tick(l *Limiter) int64 { return l.p.q }

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
	return l.p.args()[4] + strconv.FormatInt(d, 10) + " " + strconv.FormatInt(t, 10)
}

// SweepExamined is how many leases the batcher's sweeps have looked at.
func SweepExamined(l *Limiter) int64 {
	l.batch.mu.Lock()
	defer l.batch.mu.Unlock()
	return l.batch.examined
}
