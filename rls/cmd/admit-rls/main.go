// Command admit-rls is Envoy's rate limit service (RLS v3) on token
// buckets, a drop-in for envoyproxy/ratelimit: the same environment
// variables and YAML configuration, decisions by package rls.
//
// It serves gRPC ShouldRateLimit on $GRPC_HOST:$GRPC_PORT, HTTP
// /healthcheck and POST /json on $HOST:$PORT, and, with USE_PROMETHEUS,
// /metrics on $PROMETHEUS_ADDR. The configuration is every file under
// $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY, re-read when it
// changes (polled every 200 ms); a configuration that does not load is
// logged and counted, and the previous one stays. SIGINT and SIGTERM stop
// it gracefully. It logs, on stderr, the addresses it listens on (a port of
// 0 picks a free one).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/config"
	"github.com/admit-go/admit/rls/memstore"
	"github.com/admit-go/admit/rls/settings"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// pollInterval is how often the configuration directory is read.
const pollInterval = 200 * time.Millisecond

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Environ()); err != nil {
		slog.Error("admit-rls", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, env []string) error {
	s, err := settings.FromEnv(env)
	if err != nil {
		return err
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level(s.LogLevel)})))

	m, err := newMetrics(s)
	if err != nil {
		return err
	}
	defer m.close()
	store, closeStore, err := newStore(ctx, s)
	if err != nil {
		return err
	}
	defer closeStore()
	svc := rls.New(store, rls.Options{
		ShadowMode: s.ShadowMode, Headers: s.Headers, FailOpen: s.RedisFailureModeAllow,
		LimitHeader: s.LimitHeader, RemainingHeader: s.RemainingHeader, ResetHeader: s.ResetHeader,
		Observer: m,
	})

	dir := s.ConfigDir()
	files, err := config.ReadDir(dir, s.RuntimeIgnoreDotFiles)
	if err != nil {
		return fmt.Errorf("reading the configuration: %w", err)
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
		Dir: dir, IgnoreDotFiles: s.RuntimeIgnoreDotFiles, Merge: s.MergeDomainConfig, Interval: pollInterval,
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
	httpLn, err := net.Listen("tcp", net.JoinHostPort(s.Host, strconv.Itoa(s.Port)))
	if err != nil {
		grpcLn.Close()
		return err
	}
	gs := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(gs, svc)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	hs.SetServingStatus("ratelimit", healthpb.HealthCheckResponse_SERVING)

	mux := http.NewServeMux()
	mux.Handle("/", svc.HTTPHandler())
	servers := []*http.Server{{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	listeners := []net.Listener{httpLn}
	if s.UsePrometheus {
		pl, err := net.Listen("tcp", s.PrometheusAddr)
		if err != nil {
			grpcLn.Close()
			httpLn.Close()
			return err
		}
		pm := http.NewServeMux()
		pm.Handle(s.PrometheusPath, m.handler())
		servers = append(servers, &http.Server{Handler: pm, ReadHeaderTimeout: 10 * time.Second})
		listeners = append(listeners, pl)
		slog.Warn("listening", "what", "prometheus", "addr", pl.Addr().String())
	}
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
	case "ERROR", "FATAL", "PANIC":
		return slog.LevelError
	}
	return slog.LevelWarn
}

// newStore builds the backend BACKEND_TYPE names.
func newStore(ctx context.Context, s *settings.Settings) (rls.Store, func(), error) {
	switch s.BackendType {
	case "redis":
		return newRedisStore(ctx, s)
	default:
		return memstore.New(memstore.WithMaxKeys(s.MemoryMaxKeys)), func() {}, nil
	}
}
