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
}

// goRedis runs the script through go-redis: EVALSHA, then EVAL on NOSCRIPT.
type goRedis struct {
	c redis.UniversalClient
	// capUnits, per, m, q: the script's fixed arguments, boxed once here
	// so that passing them as ...interface{} allocates nothing per call.
	args [4]any
}

func newGoRedis(c redis.UniversalClient, p params) *goRedis {
	return &goRedis{c: c, args: [4]any{strconv.FormatInt(p.capUnits, 10), strconv.FormatInt(p.per, 10), strconv.FormatInt(p.m, 10), strconv.FormatInt(p.q, 10)}}
}

func (g *goRedis) run(ctx context.Context, key string, n, want int64) ([]int64, error) {
	return script.Run(ctx, g.c, []string{key}, g.args[0], g.args[1], g.args[2], n, want, g.args[3]).Int64Slice()
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
	args [4]string
}

func (r *rueidisT) run(ctx context.Context, key string, n, want int64) ([]int64, error) {
	// strconv returns small values without allocating.
	return rueidisScript.Exec(ctx, r.c, []string{key},
		[]string{r.args[0], r.args[1], r.args[2], strconv.FormatInt(n, 10), strconv.FormatInt(want, 10), r.args[3]}).AsIntSlice()
}

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
		return &rueidisT{c: client, args: [4]string{strconv.FormatInt(p.capUnits, 10), strconv.FormatInt(p.per, 10), strconv.FormatInt(p.m, 10), strconv.FormatInt(p.q, 10)}}
	}, capacity, refillPerSecond, opts)
}
