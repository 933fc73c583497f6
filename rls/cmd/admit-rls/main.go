// Command admit-rls is Envoy's rate limit service (RLS v3) on token
// buckets, a drop-in for envoyproxy/ratelimit: the same environment
// variables and YAML configuration, decisions by package rls.
//
// It serves gRPC ShouldRateLimit on $GRPC_HOST:$GRPC_PORT, HTTP
// /healthcheck and POST /json on $HOST:$PORT, pprof and /rlconfig on
// $DEBUG_HOST:$DEBUG_PORT, and, with USE_PROMETHEUS, /metrics on
// $PROMETHEUS_ADDR. The configuration is every file under
// $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY (and, under
// RUNTIME_WATCH_ROOT=true, the default, the files beside it whose name
// starts with $RUNTIME_APPDIRECTORY and a dot, as envoyproxy/ratelimit
// reads them: see config.ReadRuntime), re-read when it changes (polled every 200 ms); a configuration that does not load is
// logged and counted, and the previous one stays. SIGINT, SIGTERM and
// SIGHUP stop it gracefully, as they stop envoyproxy/ratelimit.
//
// It logs on stderr through log/slog, as text or, with LOG_FORMAT=json,
// as JSON with envoyproxy/ratelimit's keys, every line in that one format
// from the first (a refused setting and grpc-go's own lines included): the
// backend in use and why, every setting that has no effect here, the
// addresses it listens on (a port of 0 picks a free one), each backend
// outage (its start, a line every 10 s while it lasts, its end once no
// call has failed for 10 s), and each configuration reload. No password
// reaches the log.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/config"
	"github.com/admit-go/admit/rls/memstore"
	"github.com/admit-go/admit/rls/settings"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/grpclog"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
)

// pollInterval is how often the configuration directory is read.
const pollInterval = 200 * time.Millisecond

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	slog.SetDefault(newLogger(os.Environ(), os.Stderr))
	grpclog.SetLoggerV2(grpcLogger{slog.Default()})
	if err := run(ctx, os.Environ()); err != nil {
		slog.Error("admit-rls stopped", "err", err)
		os.Exit(1)
	}
}

// newLogger is LOG_LEVEL's and LOG_FORMAT's logger on w, read before any
// other setting so that every line, a refused setting's included, comes in
// one format. A LOG_FORMAT other than text and json gives the text format,
// and a LOG_LEVEL that is no level WARN; the settings then refuse them.
//
// Levels are named as envoyproxy/ratelimit's logger (logrus) names them
// (debug, info, warning, error), and JSON lines carry its keys, @timestamp
// and @message, so that a log pipeline keyed on them keeps working.
func newLogger(env []string, w io.Writer) *slog.Logger {
	var lvl, format string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "LOG_LEVEL="); ok {
			lvl = strings.ToUpper(v)
		} else if v, ok := strings.CutPrefix(kv, "LOG_FORMAT="); ok {
			format = strings.ToLower(v)
		}
	}
	json := format == "json"
	opts := &slog.HandlerOptions{Level: level(lvl), ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) > 0 {
			return a
		}
		switch a.Key {
		case slog.LevelKey:
			a.Value = slog.StringValue(levelName(a.Value.Any().(slog.Level)))
		case slog.TimeKey:
			if json {
				a.Key = "@timestamp"
			}
		case slog.MessageKey:
			if json {
				a.Key = "@message"
			}
		}
		return a
	}}
	if json {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// levelName is logrus's name of a level.
func levelName(l slog.Level) string {
	switch {
	case l < slog.LevelInfo:
		return "debug"
	case l < slog.LevelWarn:
		return "info"
	case l < slog.LevelError:
		return "warning"
	}
	return "error"
}

func run(ctx context.Context, env []string) error {
	s, err := settings.FromEnv(env)
	if err != nil {
		return err
	}
	for _, n := range s.Notes {
		slog.Warn("setting ignored", "note", n)
	}

	m, err := newMetrics(s)
	if err != nil {
		return err
	}
	defer m.close()
	hs := health.NewServer()
	store, err := newBackend(ctx, s, hs)
	if err != nil {
		return err
	}
	defer store.close()
	opts := rls.Options{
		ShadowMode: s.ShadowMode, Headers: s.Headers, FailOpen: s.RedisFailureModeAllow,
		LimitHeader: s.LimitHeader, RemainingHeader: s.RemainingHeader, ResetHeader: s.ResetHeader,
		Observer: m,
	}
	if s.BackendType == "redis" && s.RedisHealthCheck {
		opts.Health = func() error {
			if !store.conns.healthy() {
				return errors.New("no connection to redis is open")
			}
			return nil
		}
	}
	svc := rls.New(store, opts)

	dir := s.ConfigDir()
	read := config.ReadDir
	if s.RuntimeWatchRoot {
		read = config.ReadRuntime // also config.yaml beside the directory, as envoyproxy/ratelimit
	}
	files, err := read(dir, s.RuntimeIgnoreDotFiles)
	if err != nil {
		return fmt.Errorf("reading the configuration from %s (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY): %w", dir, err)
	}
	cfg, err := config.Load(files, s.MergeDomainConfig)
	if err == nil {
		err = svc.Check(cfg)
	}
	if err != nil {
		m.configLoad(false)
		return err
	}
	m.configLoad(true)
	svc.SetConfig(cfg)
	slog.Info("configuration loaded", "dir", dir, "files", len(files))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &config.Watcher{
		Dir: dir, IgnoreDotFiles: s.RuntimeIgnoreDotFiles, Beside: s.RuntimeWatchRoot, Merge: s.MergeDomainConfig, Interval: pollInterval,
		Check: svc.Check,
		Apply: func(c *config.Config) {
			svc.SetConfig(c)
			m.configLoad(true)
			slog.Warn("configuration reloaded", "dir", dir)
		},
		Fail: func(err error) {
			m.configLoad(false)
			slog.Error("configuration not reloaded; the previous one stays", "err", err)
		},
	}
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); w.Run(ctx, files) }()
	defer func() { cancel(); <-watchDone }()

	grpcLn, err := net.Listen("tcp", net.JoinHostPort(s.GrpcHost, strconv.Itoa(s.GrpcPort)))
	if err != nil {
		return err
	}
	// listeners[i] is served by servers[i], once every one is open.
	var listeners []net.Listener
	listen := func(addr string) (net.Listener, error) {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range listeners {
				l.Close()
			}
			return nil, err
		}
		listeners = append(listeners, l)
		return l, nil
	}
	httpLn, err := listen(net.JoinHostPort(s.Host, strconv.Itoa(s.Port)))
	if err != nil {
		grpcLn.Close()
		return err
	}
	gs := grpc.NewServer(grpc.KeepaliveParams(keepalive.ServerParameters{
		MaxConnectionAge: s.GrpcMaxConnectionAge, MaxConnectionAgeGrace: s.GrpcMaxConnectionAgeGrace,
	}))
	pb.RegisterRateLimitServiceServer(gs, svc)
	healthpb.RegisterHealthServer(gs, hs)

	mux := http.NewServeMux()
	mux.Handle("/", svc.HTTPHandler())
	servers := []*http.Server{{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	debugLn, err := listen(net.JoinHostPort(s.DebugHost, strconv.Itoa(s.DebugPort)))
	if err != nil {
		grpcLn.Close()
		return err
	}
	servers = append(servers, &http.Server{Handler: debugHandler(svc), ReadHeaderTimeout: 10 * time.Second})
	if s.UsePrometheus {
		pl, err := listen(s.PrometheusAddr)
		if err != nil {
			grpcLn.Close()
			return err
		}
		pm := http.NewServeMux()
		pm.Handle(s.PrometheusPath, m.handler())
		servers = append(servers, &http.Server{Handler: pm, ReadHeaderTimeout: 10 * time.Second})
		slog.Warn("listening", "what", "prometheus", "addr", pl.Addr().String())
	}
	slog.Warn("listening", "what", "debug", "addr", debugLn.Addr().String())
	slog.Warn("listening", "what", "grpc", "addr", grpcLn.Addr().String())
	slog.Warn("listening", "what", "http", "addr", httpLn.Addr().String())

	errc := make(chan error, 1+len(servers))
	go func() { errc <- gs.Serve(grpcLn) }()
	for i, srv := range servers {
		go func() { errc <- srv.Serve(listeners[i]) }()
	}
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	hs.Shutdown()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	for _, srv := range servers {
		srv.Shutdown(sctx)
	}
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-sctx.Done():
		gs.Stop()
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

func level(s string) slog.Level {
	switch s {
	case "DEBUG", "TRACE":
		return slog.LevelDebug
	case "INFO":
		return slog.LevelInfo
	case "WARN", "WARNING":
		return slog.LevelWarn
	case "ERROR", "FATAL", "PANIC":
		return slog.LevelError
	}
	return slog.LevelWarn
}

// closingBackend is the backend in use, its connections (Redis's), and
// how to let it go.
type closingBackend struct {
	*backend
	conns *conns
	close func()
}

// newBackend builds the store BACKEND_TYPE names (or that the REDIS_
// settings imply), logs which and why, watches it for outages (see
// backend), and keeps the health service's status (overall and
// "ratelimit") in step with its connections when
// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION asks (see conns). Redis is probed
// every second until ctx ends.
func newBackend(ctx context.Context, s *settings.Settings, hs *health.Server) (*closingBackend, error) {
	setHealth := func(healthy bool) {
		st := healthpb.HealthCheckResponse_SERVING
		if !healthy {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		hs.SetServingStatus("", st)
		hs.SetServingStatus("ratelimit", st)
	}
	setHealth(true)
	if s.BackendType != "redis" {
		slog.Warn("backend", "backend", "memory", "by", s.BackendBy, "max_keys", s.MemoryMaxKeys,
			"max_bytes", int64(s.MemoryMaxKeys)*memstore.BucketBytes+memstore.FixedBytes)
		st := memstore.New(memstore.WithMaxKeys(s.MemoryMaxKeys))
		return &closingBackend{backend: &backend{Store: st, name: "memory"}, conns: &conns{}, close: func() {}}, nil
	}
	slog.Warn("backend", "backend", "redis", "by", s.BackendBy, "type", s.RedisType, "url", s.RedisTarget(), "tls", s.Redis.TLS, "db", s.Redis.DB)
	cs := &conns{}
	if s.RedisHealthCheck {
		cs.onChange = setHealth
	}
	st, ping, closeClient, err := newRedisStore(ctx, s, cs)
	if err != nil {
		return nil, err
	}
	b := &backend{Store: st, name: "redis"}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); b.probe(pctx, ping, s.RedisTimeout) }()
	return &closingBackend{backend: b, conns: cs, close: func() { cancel(); <-done; closeClient() }}, nil
}
