package redisbucket

import (
	"context"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// transport runs the script for one key: n tokens asked, want taken if at
// least n are there. It returns the script's six integers.
type transport interface {
	run(ctx context.Context, key string, n, want int64) ([]int64, error)
	// isReply reports whether err is the server's answer (the server is
	// up), as opposed to a network error or a timeout.
	isReply(err error) bool
	// dialFailure returns the latest connection the client failed to
	// open at or after since (monotonic ns), or nil.
	dialFailure(since int64) error
}

// goRedis runs the script through go-redis: EVALSHA, then EVAL on NOSCRIPT.
type goRedis struct {
	c     redis.UniversalClient
	dials *dialWatcher
	// capUnits, per, m, q, head: the script's fixed arguments, boxed once
	// here so that passing them as ...interface{} allocates nothing per
	// call.
	args [5]any
}

func newGoRedis(c redis.UniversalClient, p params) *goRedis {
	a := p.args()
	return &goRedis{c: c, dials: watchDials(c), args: [5]any{a[0], a[1], a[2], a[3], a[4]}}
}

// The script's command names and bodies, boxed once.
var (
	evalsha, evalshaBody any = "evalsha", script.Hash()
	eval, evalBody       any = "eval", src
)

func (g *goRedis) run(ctx context.Context, key string, n, want int64) ([]int64, error) {
	cmd := g.cmd(ctx, evalsha, evalshaBody, key, n, want)
	_ = g.c.Process(ctx, cmd)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		// A restarted or flushed server, or a new Cluster node: EVAL
		// loads the script too.
		cmd = g.cmd(ctx, eval, evalBody, key, n, want)
		_ = g.c.Process(ctx, cmd)
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
func (g *goRedis) cmd(ctx context.Context, name, body any, key string, n, want int64) *redis.IntSliceCmd {
	cmd := redis.NewIntSliceCmd(ctx, name, body, 1, key, g.args[0], g.args[1], g.args[2], n, want, g.args[3], g.args[4])
	cmd.SetFirstKeyPos(3)
	cmd.SetStepCount(1) // EVALSHA's keys: one key per step
	return cmd
}

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
	c    rueidis.Client
	args [5]string
}

func (r *rueidisT) run(ctx context.Context, key string, n, want int64) ([]int64, error) {
	// strconv returns small values without allocating.
	return rueidisScript.Exec(ctx, r.c, []string{key},
		[]string{r.args[0], r.args[1], r.args[2], strconv.FormatInt(n, 10), strconv.FormatInt(want, 10), r.args[3], r.args[4]}).AsIntSlice()
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
	return newLimiter(func(p params) transport {
		return &rueidisT{c: client, args: p.args()}
	}, capacity, refillPerSecond, opts)
}
