// Package redisreply classifies Redis error replies for the Redis-backed
// limiters (redisbucket, admit-rls's redisstore): which say that Redis
// cannot decide now, an outage for the failure policy, and which say that
// this decision cannot be made, now or later.
package redisreply

import "strings"

// Unavailable reports whether an error reply's message says that Redis
// cannot decide now, though it answers: loading its data, busy with a
// script, out of memory under noeviction, a replica or a Cluster that is
// failing over or reconfiguring, writes stopped, no room for another
// client. Those are outages, for the failure policy. Every other error
// reply (a script's own errors, WRONGTYPE, NOPERM, CROSSSLOT, an unknown
// command) says that this decision cannot be made on this key or with this
// configuration, now or later: treated as an outage, a fail-open policy
// would admit on a healthy Redis. A reply missing from the list is thus
// refused, never admitted: the safe side. MOVED and ASK are not listed:
// whether one is an outage depends on the client (see Redirect).
//
// Redis before 7 reports an error a script's call raised inside its own
// ("ERR Error running script (call to f_…): @user_script:1: -READONLY You
// can't write…"): the inner reply decides.
func Unavailable(msg string) bool {
	if strings.HasPrefix(msg, "ERR Error running script") {
		if i := strings.LastIndex(msg, ": -"); i >= 0 {
			return Unavailable(msg[i+3:])
		}
	}
	code, _, _ := strings.Cut(msg, " ")
	switch code {
	case "LOADING", "BUSY", "OOM", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "NOREPLICAS", "MISCONF":
		return true
	}
	return strings.HasPrefix(msg, "ERR max number of clients reached")
}

// Redirect reports whether an error reply's message is a Cluster redirect,
// MOVED or ASK. A Cluster client follows redirects and returns one only
// when it ran out of them (go-redis's MaxRedirects, rueidis's
// MaxMovedRedirections) while the masters disagree about the key's slot,
// for a moment while a slot moves or a replica takes over: an outage. A
// single-node client on a Cluster gets one for every key of another
// master's slots, now and later: a configuration error. A script never
// raises one (a key of another slot inside a script is an ERR), so a
// wrapped script error is not looked into.
func Redirect(msg string) bool {
	code, _, _ := strings.Cut(msg, " ")
	return code == "MOVED" || code == "ASK"
}
