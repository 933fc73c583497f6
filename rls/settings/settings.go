// Package settings implements admit-rls's environment: the variables of
// envoyproxy/ratelimit whose meaning carries over, with the same names and
// defaults (except BACKEND_TYPE, whose default is memory), and a refusal,
// naming the variable, of every setting admit-rls does not implement.
package settings

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/admit-go/admit"
)

// Settings is what the environment configures.
type Settings struct {
	Host     string // HOST, default 0.0.0.0: the HTTP endpoints
	Port     int    // PORT, default 8080
	GrpcHost string // GRPC_HOST, default 0.0.0.0
	GrpcPort int    // GRPC_PORT, default 8081

	RuntimeRoot           string // RUNTIME_ROOT, default /srv/runtime_data/current
	RuntimeSubdirectory   string // RUNTIME_SUBDIRECTORY
	RuntimeAppDirectory   string // RUNTIME_APPDIRECTORY, default config
	RuntimeIgnoreDotFiles bool   // RUNTIME_IGNOREDOTFILES
	MergeDomainConfig     bool   // MERGE_DOMAIN_CONFIG

	BackendType     string        // BACKEND_TYPE: memory (default) or redis
	RedisSocketType string        // REDIS_SOCKET_TYPE: unix (default) or tcp
	RedisURL        string        // REDIS_URL, default /var/run/nutcracker/ratelimit.sock
	RedisType       string        // REDIS_TYPE: SINGLE (default) or CLUSTER
	RedisAuth       string        // REDIS_AUTH: password, or user:password
	RedisPoolSize   int           // REDIS_POOL_SIZE, default 10: checked, unused (rueidis pipelines)
	RedisTimeout    time.Duration // REDIS_TIMEOUT, default 10s
	// RedisFailureModeAllow admits requests while Redis cannot decide
	// (REDIS_FAILURE_MODE_ALLOW, an admit-rls addition); by default they
	// fail with Unavailable and Envoy's failure_mode_deny decides.
	RedisFailureModeAllow bool
	// MemoryMaxKeys bounds the memory backend's buckets
	// (MEMORY_MAX_KEYS, an admit-rls addition, default 1048576).
	MemoryMaxKeys int

	ShadowMode      bool   // SHADOW_MODE
	Headers         bool   // LIMIT_RESPONSE_HEADERS_ENABLED
	LimitHeader     string // LIMIT_LIMIT_HEADER, default RateLimit-Limit
	RemainingHeader string // LIMIT_REMAINING_HEADER, default RateLimit-Remaining
	ResetHeader     string // LIMIT_RESET_HEADER, default RateLimit-Reset

	UsePrometheus  bool   // USE_PROMETHEUS
	PrometheusAddr string // PROMETHEUS_ADDR, default :9090
	PrometheusPath string // PROMETHEUS_PATH, default /metrics

	LogLevel string // LOG_LEVEL, default WARN
}

// ConfigDir is where the YAML files live:
// $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY.
func (s *Settings) ConfigDir() string {
	return filepath.Join(s.RuntimeRoot, s.RuntimeSubdirectory, s.RuntimeAppDirectory)
}

// refused are envoyproxy/ratelimit's settings that admit-rls does not
// implement, each with the one value that is harmless ("" meaning unset or
// empty only).
var refused = map[string]string{
	"USE_STATSD": "false", "USE_DOG_STATSD": "false", "USE_DOG_STATSD_MOGRIFIERS": "",
	"MEMCACHE_HOST_PORT": "", "MEMCACHE_SRV": "", "MEMCACHE_TLS": "false",
	"CONFIG_TYPE": "FILE", "CONFIG_GRPC_XDS_SERVER_URL": "", "CONFIG_GRPC_XDS_NODE_ID": "",
	"CONFIG_GRPC_XDS_NODE_METADATA": "", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "false",
	"QUOTA_MODE": "false", "RESPONSE_DYNAMIC_METADATA": "false",
	"REDIS_PERSECOND": "false", "REDIS_TLS": "false", "REDIS_PIPELINE_WINDOW": "0",
	"REDIS_PIPELINE_LIMIT": "0", "REDIS_SENTINEL_AUTH": "",
	"GRPC_SERVER_USE_TLS": "false", "GRPC_UDS": "", "TRACING_ENABLED": "false",
	"LOCAL_CACHE_SIZE_IN_BYTES": "0", "PROMETHEUS_MAPPER_YAML": "",
	"EXTRA_TAGS": "", "CACHE_KEY_PREFIX": "",
}

// FromEnv reads the settings from env (os.Environ's form). Errors wrap
// admit.ErrInvalidConfig and name the variable.
func FromEnv(env []string) (*Settings, error) {
	m := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	var names []string
	for k := range refused {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		v, set := m[k]
		if !set || v == refused[k] || v == "" {
			continue
		}
		if ok := refused[k]; ok == "false" {
			if b, err := strconv.ParseBool(v); err == nil && !b {
				continue
			}
		}
		return nil, fmt.Errorf("%w: %s=%q is not implemented by admit-rls", admit.ErrInvalidConfig, k, v)
	}
	r := reader{m: m}
	s := &Settings{
		Host:                  r.str("HOST", "0.0.0.0"),
		Port:                  r.int("PORT", 8080),
		GrpcHost:              r.str("GRPC_HOST", "0.0.0.0"),
		GrpcPort:              r.int("GRPC_PORT", 8081),
		RuntimeRoot:           r.str("RUNTIME_ROOT", "/srv/runtime_data/current"),
		RuntimeSubdirectory:   r.str("RUNTIME_SUBDIRECTORY", ""),
		RuntimeAppDirectory:   r.str("RUNTIME_APPDIRECTORY", "config"),
		RuntimeIgnoreDotFiles: r.bool("RUNTIME_IGNOREDOTFILES"),
		MergeDomainConfig:     r.bool("MERGE_DOMAIN_CONFIG"),
		BackendType:           strings.ToLower(r.str("BACKEND_TYPE", "memory")),
		RedisSocketType:       strings.ToLower(r.str("REDIS_SOCKET_TYPE", "unix")),
		RedisURL:              r.str("REDIS_URL", "/var/run/nutcracker/ratelimit.sock"),
		RedisType:             strings.ToUpper(r.str("REDIS_TYPE", "SINGLE")),
		RedisAuth:             r.str("REDIS_AUTH", ""),
		RedisPoolSize:         r.int("REDIS_POOL_SIZE", 10),
		RedisTimeout:          r.duration("REDIS_TIMEOUT", 10*time.Second),
		RedisFailureModeAllow: r.bool("REDIS_FAILURE_MODE_ALLOW"),
		MemoryMaxKeys:         r.int("MEMORY_MAX_KEYS", 1<<20),
		ShadowMode:            r.bool("SHADOW_MODE"),
		Headers:               r.bool("LIMIT_RESPONSE_HEADERS_ENABLED"),
		LimitHeader:           r.str("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
		RemainingHeader:       r.str("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
		ResetHeader:           r.str("LIMIT_RESET_HEADER", "RateLimit-Reset"),
		UsePrometheus:         r.bool("USE_PROMETHEUS"),
		PrometheusAddr:        r.str("PROMETHEUS_ADDR", ":9090"),
		PrometheusPath:        r.str("PROMETHEUS_PATH", "/metrics"),
		LogLevel:              strings.ToUpper(r.str("LOG_LEVEL", "WARN")),
	}
	if r.err != nil {
		return nil, r.err
	}
	switch {
	case s.BackendType != "memory" && s.BackendType != "redis":
		return nil, fmt.Errorf("%w: BACKEND_TYPE=%q: admit-rls implements memory and redis", admit.ErrInvalidConfig, s.BackendType)
	case s.RedisSocketType != "tcp" && s.RedisSocketType != "unix":
		return nil, fmt.Errorf("%w: REDIS_SOCKET_TYPE=%q: expected tcp or unix", admit.ErrInvalidConfig, s.RedisSocketType)
	case s.RedisType != "SINGLE" && s.RedisType != "CLUSTER":
		return nil, fmt.Errorf("%w: REDIS_TYPE=%q: admit-rls implements SINGLE and CLUSTER", admit.ErrInvalidConfig, s.RedisType)
	case s.RedisType == "CLUSTER" && s.RedisSocketType != "tcp":
		return nil, fmt.Errorf("%w: REDIS_TYPE=CLUSTER needs REDIS_SOCKET_TYPE=tcp", admit.ErrInvalidConfig)
	case s.RedisTimeout <= 0:
		return nil, fmt.Errorf("%w: REDIS_TIMEOUT=%v is not positive", admit.ErrInvalidConfig, s.RedisTimeout)
	case s.MemoryMaxKeys < 1:
		return nil, fmt.Errorf("%w: MEMORY_MAX_KEYS=%d is below 1", admit.ErrInvalidConfig, s.MemoryMaxKeys)
	}
	return s, nil
}

// reader parses variables, keeping the first error.
type reader struct {
	m   map[string]string
	err error
}

func (r *reader) str(k, def string) string {
	if v, ok := r.m[k]; ok && v != "" {
		return v
	}
	return def
}

func (r *reader) fail(k, v string, err error) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s=%q: %v", admit.ErrInvalidConfig, k, v, err)
	}
}

func (r *reader) int(k string, def int) int {
	v := r.str(k, "")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		r.fail(k, v, err)
	}
	return n
}

func (r *reader) bool(k string) bool {
	v := r.str(k, "")
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.fail(k, v, err)
	}
	return b
}

func (r *reader) duration(k string, def time.Duration) time.Duration {
	v := r.str(k, "")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		r.fail(k, v, err)
	}
	return d
}
