package redisbucket

import "strconv"

// Units exposes a limiter's representation to the tests: units per token
// and the capacity in units.
func Units(l *Limiter) (per, capUnits int64) { return l.p.per, l.p.capUnits }

// Tick is the limiter's tick in microseconds.
func Tick(l *Limiter) int64 { return l.p.q }

// ScriptHash is the SHA-1 that EVALSHA names.
func ScriptHash() string { return script.Hash() }

// ScriptSource is the Lua every decision runs.
const ScriptSource = src

// ScriptArgs returns the script's ARGV for a request of n tokens.
func ScriptArgs(l *Limiter, n int64) []string {
	return []string{l.args[0].(string), l.args[1].(string), l.args[2].(string), strconv.FormatInt(n, 10), strconv.FormatInt(n, 10), l.args[3].(string)}
}
