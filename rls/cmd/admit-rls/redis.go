package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/redisstore"
	"github.com/admit-go/admit/rls/settings"
	"github.com/redis/go-redis/v9"
)

// newRedisStore connects as REDIS_TYPE, REDIS_SOCKET_TYPE, REDIS_URL (a
// comma-separated list of nodes for CLUSTER), REDIS_AUTH and
// REDIS_POOL_SIZE say; REDIS_TIMEOUT bounds each decision. It checks the
// connection with PING, so a wrong address fails at start.
func newRedisStore(ctx context.Context, s *settings.Settings) (rls.Store, func(), error) {
	user, pass := "", s.RedisAuth
	if u, p, ok := strings.Cut(s.RedisAuth, ":"); ok {
		user, pass = u, p
	}
	var c redis.UniversalClient
	if s.RedisType == "CLUSTER" {
		c = redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: strings.Split(s.RedisURL, ","), Username: user, Password: pass,
			PoolSize: s.RedisPoolSize, ContextTimeoutEnabled: true,
		})
	} else {
		c = redis.NewClient(&redis.Options{
			Network: s.RedisSocketType, Addr: s.RedisURL, Username: user, Password: pass,
			PoolSize: s.RedisPoolSize, ContextTimeoutEnabled: true,
		})
	}
	pctx, cancel := context.WithTimeout(ctx, s.RedisTimeout)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("redis at %s: %w", s.RedisURL, err)
	}
	st, err := redisstore.New(c, redisstore.WithTimeout(s.RedisTimeout))
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return st, func() { c.Close() }, nil
}
