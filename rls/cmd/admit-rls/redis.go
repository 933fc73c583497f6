package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"

	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/redisstore"
	"github.com/admit-go/admit/rls/settings"
	"github.com/redis/rueidis"
)

// newRedisStore connects as REDIS_TYPE, REDIS_SOCKET_TYPE, REDIS_URL (a
// comma-separated list of nodes for CLUSTER) and REDIS_AUTH say, through
// rueidis, which pipelines concurrent decisions on shared connections (so
// REDIS_POOL_SIZE is accepted and has no effect); REDIS_TIMEOUT bounds each
// decision. It checks the connection with PING, so a wrong address fails
// at start.
func newRedisStore(ctx context.Context, s *settings.Settings) (rls.Store, func(), error) {
	user, pass := "", s.RedisAuth
	if u, p, ok := strings.Cut(s.RedisAuth, ":"); ok {
		user, pass = u, p
	}
	opt := rueidis.ClientOption{
		InitAddress: strings.Split(s.RedisURL, ","), Username: user, Password: pass,
		DisableCache: true, ForceSingleClient: s.RedisType == "SINGLE",
	}
	if s.RedisSocketType == "unix" {
		opt.DialCtxFn = func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			return d.DialContext(ctx, "unix", addr)
		}
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, nil, fmt.Errorf("redis at %s: %w", s.RedisURL, err)
	}
	pctx, cancel := context.WithTimeout(ctx, s.RedisTimeout)
	defer cancel()
	if err := c.Do(pctx, c.B().Ping().Build()).Error(); err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("redis at %s: %w", s.RedisURL, err)
	}
	st, err := redisstore.NewRueidis(c, redisstore.WithTimeout(s.RedisTimeout))
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return st, c.Close, nil
}
