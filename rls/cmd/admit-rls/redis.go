package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/redisstore"
	"github.com/admit-go/admit/rls/settings"
	"github.com/redis/rueidis"
)

// newRedisStore connects as REDIS_TYPE, REDIS_SOCKET_TYPE, REDIS_URL and
// REDIS_AUTH say (settings.Redis, parsed), through rueidis, which pipelines
// concurrent decisions on shared connections; REDIS_TIMEOUT bounds each
// decision. It checks the connection with PING and, while that fails,
// retries with exponential backoff as REDIS_STARTUP_* say (by default for
// ever, logging each retry), as envoyproxy/ratelimit does. It returns the
// store, a PING for the backend's probe, and the client's Close.
func newRedisStore(ctx context.Context, s *settings.Settings) (rls.Store, func(context.Context) error, func(), error) {
	rd := &s.Redis
	opt := rueidis.ClientOption{
		InitAddress: rd.Addrs, Username: rd.Username, Password: rd.Password, SelectDB: rd.DB,
		DisableCache: true, ForceSingleClient: s.RedisType == "SINGLE",
	}
	if rd.Network == "unix" {
		opt.DialCtxFn = func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			return d.DialContext(ctx, "unix", addr)
		}
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
	wait := s.RedisStartupInitial
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
		err = fmt.Errorf("redis at %s: %w", target, err)
		if ctx.Err() != nil || s.RedisStartupMaxElapsed > 0 && time.Since(start)+wait > s.RedisStartupMaxElapsed {
			return nil, nil, nil, err
		}
		slog.Warn("redis not reachable at start; retrying", "in", wait.String(), "err", err)
		select {
		case <-ctx.Done():
			return nil, nil, nil, err
		case <-time.After(wait):
		}
		wait = min(2*wait, s.RedisStartupMax)
	}
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
