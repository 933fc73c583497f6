package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/redisstore"
	"github.com/admit-go/admit/rls/settings"
	"github.com/redis/rueidis"
)

// conns counts the open connections to Redis. With
// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION, health follows it as
// envoyproxy/ratelimit's follows its connection pool: healthy once a
// connection opens, failing when the last one closes. A Cluster with one
// node down keeps its other nodes' connections, and a call that fails on
// an open connection closes nothing, so neither makes the health flap; a
// Redis that is gone closes them all.
type conns struct {
	onChange func(healthy bool) // called on each change, in order; may be nil

	mu sync.Mutex
	n  int
}

// healthy reports whether a connection is open.
func (c *conns) healthy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n > 0
}

func (c *conns) add(d int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += d
	if c.onChange != nil && (d > 0 && c.n == 1 || d < 0 && c.n == 0) {
		c.onChange(c.n > 0)
	}
}

// dial is rueidis's DialCtxFn: a connection on network, through TLS when
// tlsCfg is set (rueidis leaves TLS to a DialCtxFn), counted until closed.
func (c *conns) dial(ctx context.Context, network, addr string, d *net.Dialer, tlsCfg *tls.Config) (net.Conn, error) {
	var conn net.Conn
	var err error
	if tlsCfg != nil {
		conn, err = (&tls.Dialer{NetDialer: d, Config: tlsCfg}).DialContext(ctx, network, addr)
	} else {
		conn, err = d.DialContext(ctx, network, addr)
	}
	if err != nil {
		return nil, err
	}
	c.add(1)
	return &countedConn{Conn: conn, c: c}, nil
}

// countedConn leaves the count when first closed.
type countedConn struct {
	net.Conn
	c    *conns
	once sync.Once
}

func (cc *countedConn) Close() error {
	cc.once.Do(func() { cc.c.add(-1) })
	return cc.Conn.Close()
}

// newRedisStore connects as REDIS_TYPE, REDIS_SOCKET_TYPE, REDIS_URL and
// REDIS_AUTH say (settings.Redis, parsed), through rueidis, which pipelines
// concurrent decisions on shared connections; REDIS_TIMEOUT bounds each
// decision. Every connection is counted in cs. It checks the connection
// with PING and, while that fails, retries with exponential backoff and
// jitter as REDIS_STARTUP_* say (by default for ever, logging each retry),
// as envoyproxy/ratelimit does. It returns the store, a PING for the
// backend's probe, and the client's Close.
func newRedisStore(ctx context.Context, s *settings.Settings, cs *conns) (rls.Store, func(context.Context) error, func(), error) {
	rd := &s.Redis
	opt := rueidis.ClientOption{
		InitAddress: rd.Addrs, Username: rd.Username, Password: rd.Password, SelectDB: rd.DB,
		DisableCache: true, ForceSingleClient: s.RedisType == "SINGLE",
	}
	network := rd.Network
	opt.DialCtxFn = func(ctx context.Context, addr string, d *net.Dialer, tlsCfg *tls.Config) (net.Conn, error) {
		return cs.dial(ctx, network, addr, d, tlsCfg)
	}
	if rd.TLS {
		cfg, err := tlsConfig(rd)
		if err != nil {
			return nil, nil, nil, err
		}
		opt.TLSConfig = cfg
	}
	target := s.RedisTarget()
	start := time.Now()
	b := backoff{min: s.RedisStartupInitial, max: s.RedisStartupMax}
	for {
		c, err := connect(ctx, opt, s.RedisTimeout)
		if err == nil {
			st, err := redisstore.NewRueidis(c, redisstore.WithTimeout(s.RedisTimeout), redisstore.WithPrefix(s.CacheKeyPrefix+redisstore.DefaultPrefix))
			if err != nil {
				c.Close()
				return nil, nil, nil, err
			}
			ping := func(ctx context.Context) error { return c.Do(ctx, c.B().Ping().Build()).Error() }
			return st, ping, c.Close, nil
		}
		elapsed := time.Since(start)
		err = fmt.Errorf("redis at %s: %w", target, err)
		if network == "unix" && strings.Contains(target, ":") {
			// upstream's default socket type too: the obvious first try,
			// REDIS_URL=host:port, is dialled as a socket path.
			err = fmt.Errorf("%w (REDIS_SOCKET_TYPE is unix, its default: set REDIS_SOCKET_TYPE=tcp for a host:port)", err)
		}
		if s.RedisStartupMaxElapsed > 0 && elapsed >= s.RedisStartupMaxElapsed {
			return nil, nil, nil, fmt.Errorf("gave up after %v: %w", elapsed.Round(time.Millisecond), err)
		}
		if ctx.Err() != nil {
			return nil, nil, nil, err
		}
		wait := b.next(rand.Float64)
		slog.Warn("redis not reachable at start; retrying", "in", wait.Round(time.Millisecond).String(),
			"elapsed", elapsed.Round(time.Millisecond).String(), "err", err)
		select {
		case <-ctx.Done():
			return nil, nil, nil, err
		case <-time.After(wait):
		}
	}
}

// backoff is envoyproxy/ratelimit's start-up backoff (jpillora/backoff
// with factor 2 and jitter): the n-th wait (from 0) is drawn uniformly
// between min and min·2^n, then capped at max.
type backoff struct {
	min, max time.Duration
	n        int
}

// next returns the next wait; rnd returns a number in [0, 1).
func (b *backoff) next(rnd func() float64) time.Duration {
	d := float64(b.min) * math.Pow(2, float64(b.n))
	b.n++
	d = float64(b.min) + rnd()*(d-float64(b.min))
	if d >= float64(b.max) {
		return b.max
	}
	return max(b.min, time.Duration(d))
}

// connect makes the client and checks it with PING.
func connect(ctx context.Context, opt rueidis.ClientOption, timeout time.Duration) (rueidis.Client, error) {
	opt.Dialer.Timeout = timeout
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := c.Do(pctx, c.B().Ping().Build()).Error(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// tlsConfig is REDIS_TLS's: the system's roots or REDIS_TLS_CACERT's,
// a client certificate if REDIS_TLS_CLIENT_CERT and _KEY are set, and, with
// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION, the chain verified without the
// server's name.
func tlsConfig(rd *settings.Redis) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if rd.TLSCACert != "" {
		pem, err := os.ReadFile(rd.TLSCACert)
		if err != nil {
			return nil, fmt.Errorf("REDIS_TLS_CACERT: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("REDIS_TLS_CACERT=%s holds no PEM certificate", rd.TLSCACert)
		}
	}
	if rd.TLSClientCert != "" || rd.TLSClientKey != "" {
		cert, err := tls.LoadX509KeyPair(rd.TLSClientCert, rd.TLSClientKey)
		if err != nil {
			return nil, fmt.Errorf("REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if rd.TLSSkipHostname {
		// Verify the chain, not the name: InsecureSkipVerify turns off
		// both, and VerifyConnection puts the chain back.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("redis sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: cfg.RootCAs, Intermediates: inter})
			return err
		}
	}
	return cfg, nil
}
