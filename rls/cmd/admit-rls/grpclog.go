package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"google.golang.org/grpc/grpclog"
)

// grpcLogger sends grpc-go's own log lines through slog, so that they come
// in LOG_FORMAT like every other line (grpc-go's default logger writes its
// own format to stderr). Its infos and warnings (connection state changes,
// a client that hung up) are debug lines; its errors are errors. It is
// installed before any gRPC call, as grpclog.SetLoggerV2 requires.
type grpcLogger struct{ l *slog.Logger }

var _ grpclog.LoggerV2 = grpcLogger{}

func (g grpcLogger) log(level slog.Level, msg string) {
	g.l.Log(context.Background(), level, msg, "source", "grpc")
}

func (g grpcLogger) Info(args ...any)   { g.log(slog.LevelDebug, fmt.Sprint(args...)) }
func (g grpcLogger) Infoln(args ...any) { g.log(slog.LevelDebug, sprintln(args)) }
func (g grpcLogger) Infof(format string, args ...any) {
	g.log(slog.LevelDebug, fmt.Sprintf(format, args...))
}
func (g grpcLogger) Warning(args ...any)   { g.log(slog.LevelDebug, fmt.Sprint(args...)) }
func (g grpcLogger) Warningln(args ...any) { g.log(slog.LevelDebug, sprintln(args)) }
func (g grpcLogger) Warningf(format string, args ...any) {
	g.log(slog.LevelDebug, fmt.Sprintf(format, args...))
}
func (g grpcLogger) Error(args ...any)   { g.log(slog.LevelError, fmt.Sprint(args...)) }
func (g grpcLogger) Errorln(args ...any) { g.log(slog.LevelError, sprintln(args)) }
func (g grpcLogger) Errorf(format string, args ...any) {
	g.log(slog.LevelError, fmt.Sprintf(format, args...))
}
func (g grpcLogger) Fatal(args ...any)   { g.log(slog.LevelError, fmt.Sprint(args...)); os.Exit(1) }
func (g grpcLogger) Fatalln(args ...any) { g.log(slog.LevelError, sprintln(args)); os.Exit(1) }
func (g grpcLogger) Fatalf(format string, args ...any) {
	g.log(slog.LevelError, fmt.Sprintf(format, args...))
	os.Exit(1)
}

// V reports whether grpc-go's verbose lines of level l are wanted: none
// above 0, as with its default logger.
func (g grpcLogger) V(l int) bool { return l <= 0 }

// sprintln is fmt.Sprintln without the newline.
func sprintln(args []any) string {
	s := fmt.Sprintln(args...)
	return s[:len(s)-1]
}
