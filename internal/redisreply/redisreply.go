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
// reply (a script's own errors, WRONGTYPE, NOPERM, CROSSSLOT, MOVED past the
// client's redirects, an unknown command) says that this decision cannot be
// made on this key or with this configuration, now or later: treated as an
// outage, a fail-open policy would admit on a healthy Redis. A reply
// missing from the list is thus refused, never admitted: the safe side.
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
