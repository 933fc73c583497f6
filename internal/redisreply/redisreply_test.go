package redisreply_test

import (
	"testing"

	"github.com/admit-go/admit/internal/redisreply"
)

func TestUnavailable(t *testing.T) {
	for msg, want := range map[string]bool{
		"LOADING Redis is loading the dataset in memory":                              true,
		"BUSY Redis is busy running a script":                                         true,
		"OOM command not allowed when used memory > 'maxmemory'.":                     true,
		"READONLY You can't write against a read only replica.":                       true,
		"MASTERDOWN Link with MASTER is down":                                         true,
		"CLUSTERDOWN The cluster is down":                                             true,
		"TRYAGAIN Multiple keys request during rehashing of slot":                     true,
		"NOREPLICAS Not enough good replicas to write.":                               true,
		"MISCONF Redis is configured to save RDB snapshots":                           true,
		"ERR max number of clients reached":                                           true,
		"WRONGTYPE Operation against a key holding the wrong kind of value":           false,
		"CROSSSLOT Keys in request don't hash to the same slot":                       false,
		"MOVED 3999 127.0.0.1:6381":                                                   false,
		"NOPERM this user has no permissions to run the 'evalsha' command":            false,
		"ERR user_script:1: attempt to perform arithmetic on local 'a' (a nil value)": false,
		"NOSCRIPT No matching script. Please use EVAL.":                               false,
		"": false,
		"ERR Error running script (call to f_0e0f5b8e): @user_script:60: @user_script: 60: -READONLY You can't write against a read only replica.":             true,
		"ERR Error running script (call to f_0e0f5b8e): @user_script:60: @user_script: 60: -OOM command not allowed when used memory > 'maxmemory'.":           true,
		"ERR Error running script (call to f_0e0f5b8e): @user_script:60: @user_script: 60: -WRONGTYPE Operation against a key holding the wrong kind of value": false,
		"ERR Error running script (call to f_0e0f5b8e): @user_script:12: user_script:12: attempt to compare nil with number":                                   false,
	} {
		if got := redisreply.Unavailable(msg); got != want {
			t.Errorf("Unavailable(%q) = %v, want %v", msg, got, want)
		}
	}
}

func TestRedirect(t *testing.T) {
	for msg, want := range map[string]bool{
		"MOVED 3999 127.0.0.1:6381":                               true,
		"ASK 3999 127.0.0.1:6381":                                 true,
		"CROSSSLOT Keys in request don't hash to the same slot":   false,
		"TRYAGAIN Multiple keys request during rehashing of slot": false,
		"ERR Script attempted to access a non local key in a cluster node script: f_0e0f5b8e, on @user_script:1.": false,
		"MOVEDX": false,
		"":       false,
	} {
		if got := redisreply.Redirect(msg); got != want {
			t.Errorf("Redirect(%q) = %v, want %v", msg, got, want)
		}
	}
}
