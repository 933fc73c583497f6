package redisbucket

import (
	"context"
	"errors"
	"strconv"

	"github.com/admit-go/admit"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// transport runs the script for one key and the limits of set: n tokens
// asked, want taken from each if each holds at least n. It returns the
// script's six integers.
type transport interface {
	run(ctx context.Context, key string, n, want int64, set *limitSet) ([]int64, error)
	// isReply reports whether err is the server's answer (the server is
	// up), as opposed to a network error or a timeout.
	isReply(err error) bool
	// dialFailure returns the latest connection the client failed to
	// open at or after since (monotonic ns), or nil.
	dialFailure(since int64) error
	// policies returns the maxmemory-policy of each node that could be
	// asked (see checkEviction).
	policies(ctx context.Context) []nodePolicy
	// cluster reports whether the client follows Cluster redirects, so
	// that a MOVED or ASK it returns means it ran out of them.
	cluster() bool
}

// goRedis runs the script through go-redis: EVALSHA, then EVAL on NOSCRIPT.
type goRedis struct {
	c       redis.UniversalClient
	dials   *dialWatcher
	routing bool // c is a *redis.ClusterClient that follows redirects
}

func newGoRedis(c redis.UniversalClient) *goRedis {
	// MaxRedirects -1 (0 once go-redis has read it) follows none: then
	// every key of a slot being migrated answers ASK, and every key of a
	// moved slot MOVED until the client reloads its slots, on a healthy
	// Cluster, which is no outage to admit on.
	cc, routing := c.(*redis.ClusterClient)
	routing = routing && cc.Options().MaxRedirects > 0
	return &goRedis{c: c, dials: watchDials(c), routing: routing}
}

func (g *goRedis) cluster() bool { return g.routing }

// The script's command names and bodies, boxed once.
var (
	evalsha, evalshaBody any = "evalsha", script.Hash()
	eval, evalBody       any = "eval", src
)

func (g *goRedis) run(ctx context.Context, key string, n, want int64, set *limitSet) ([]int64, error) {
	cmd := g.cmd(ctx, evalsha, evalshaBody, key, n, want, set)
	_ = g.c.Process(ctx, onceCmd{cmd})
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		// A restarted or flushed server, or a new Cluster node: EVAL
		// loads the script too.
		cmd = g.cmd(ctx, eval, evalBody, key, n, want, set)
		_ = g.c.Process(ctx, onceCmd{cmd})
	}
	return cmd.Result()
}

// cmd is the script's command, built here rather than by Script.Run: an
// IntSliceCmd reads the six integers without boxing each, and its key
// position and step count are set, so that a ClusterClient routes it by its
// key without consulting COMMAND's table. Without a step count, go-redis
// looks the command up on its first use, on a context of its own with a 5 s
// timeout that ignores the decision's deadline (a frozen master stalled
// fresh clients 5 s with a 200 ms timeout), and then takes a lock to read
// that table on every command.
//
// The arguments are one slice (the command keeps it): the fixed ones, then
// the set's, boxed once when the set was built.
func (g *goRedis) cmd(ctx context.Context, name, body any, key string, n, want int64, set *limitSet) *redis.IntSliceCmd {
	args := make([]any, 6, 6+len(set.boxed))
	args[0], args[1], args[2], args[3], args[4], args[5] = name, body, 1, key, n, want
	cmd := redis.NewIntSliceCmd(ctx, append(args, set.boxed...)...)
	cmd.SetFirstKeyPos(3)
	cmd.SetStepCount(1) // EVALSHA's keys: one key per step
	return cmd
}

// onceCmd is the script's command as go-redis runs it: never sent again
// after a failed attempt. go-redis retries a command whose connection ended
// or timed out (MaxRetries, 3 by default), which for the script may be
// after Redis ran it: a retry would take the tokens a second time
// (TestLostReplyTakesOnce saw 2 of capacity 3 taken for 1, and admitted).
// A failure is an outage for the failure policy instead. A ClusterClient
// still follows MOVED, ASK and READONLY (the script did not run), and the
// pool still dials again after a refused dial and replaces a pooled
// connection found closed.
type onceCmd struct{ *redis.IntSliceCmd }

func (onceCmd) NoRetry() bool { return true }

func (g *goRedis) dialFailure(since int64) error {
	if f := g.dials.last.Load(); f != nil && f.at >= since {
		return f.err
	}
	return nil
}

func (g *goRedis) isReply(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply)
}

// rueidisScript is the script for rueidis, which likewise tries EVALSHA and
// falls back to EVAL on NOSCRIPT.
var rueidisScript = rueidis.NewLuaScript(src)

// rueidisT runs the script through rueidis, whose client pipelines
// concurrent commands on shared connections by itself.
type rueidisT struct {
	c rueidis.Client
}

func (r *rueidisT) cluster() bool { return r.c.Mode() == rueidis.ClientModeCluster }

func (r *rueidisT) run(ctx context.Context, key string, n, want int64, set *limitSet) ([]int64, error) {
	argv := make([]string, 2, 2+len(set.argv))
	// strconv returns small values without allocating.
	argv[0], argv[1] = strconv.FormatInt(n, 10), strconv.FormatInt(want, 10)
	return rueidisScript.Exec(ctx, r.c, []string{key}, append(argv, set.argv...)).AsIntSlice()
}

// dialFailure: rueidis returns a failed dial's error itself.
func (r *rueidisT) dialFailure(int64) error { return nil }

func (r *rueidisT) isReply(err error) bool {
	_, ok := rueidis.IsRedisErr(err)
	return ok
}

// NewRueidis is New for a rueidis client. rueidis pipelines concurrent
// commands on shared connections automatically, which makes it the faster
// transport under concurrency (see docs/redis.md for the measurements);
// decisions, options and the failure policy are the same as New's.
func NewRueidis(client rueidis.Client, capacity int64, refillPerSecond float64, opts ...Option) (*Limiter, error) {
	if client == nil {
		return nil, errorf("nil client")
	}
	return newLimiter(&rueidisT{c: client}, []admit.Limit{{Capacity: capacity, Rate: refillPerSecond}}, opts)
}
