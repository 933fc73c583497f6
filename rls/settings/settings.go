// Package settings implements admit-rls's environment: the variables of
// envoyproxy/ratelimit, with the same names and defaults (except that the
// backend is memory when no Redis setting is given), each one either
// implemented, accepted with a note saying why it has no effect here, or
// refused by name when it asks for something admit-rls does not do.
package settings

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/admit-go/admit"
)

// Settings is what the environment configures.
type Settings struct {
	Host      string // HOST, default 0.0.0.0: the HTTP endpoints
	Port      int    // PORT, default 8080
	GrpcHost  string // GRPC_HOST, default 0.0.0.0
	GrpcPort  int    // GRPC_PORT, default 8081
	DebugHost string // DEBUG_HOST, default 0.0.0.0: pprof and /rlconfig
	DebugPort int    // DEBUG_PORT, default 6070

	// GrpcMaxConnectionAge (GRPC_MAX_CONNECTION_AGE, default 24h) is how
	// long a client connection may live before the server sends GOAWAY, so
	// that clients spread over new replicas; GrpcMaxConnectionAgeGrace
	// (GRPC_MAX_CONNECTION_AGE_GRACE, default 1h) how long its calls may
	// then take before it is closed. 0 is no limit, gRPC's zero value,
	// as in envoyproxy/ratelimit.
	GrpcMaxConnectionAge      time.Duration
	GrpcMaxConnectionAgeGrace time.Duration

	RuntimeRoot           string // RUNTIME_ROOT, default /srv/runtime_data/current
	RuntimeSubdirectory   string // RUNTIME_SUBDIRECTORY
	RuntimeAppDirectory   string // RUNTIME_APPDIRECTORY, default config
	RuntimeIgnoreDotFiles bool   // RUNTIME_IGNOREDOTFILES
	// RuntimeWatchRoot (RUNTIME_WATCH_ROOT, default true) also reads the
	// files beside the configuration directory whose name starts with
	// RUNTIME_APPDIRECTORY and a dot ("config.yaml", "config.d/"), as
	// envoyproxy/ratelimit's runtime loader does under it (see
	// config.ReadRuntime). Reloads do not depend on it: the directory is
	// polled, so a swapped RUNTIME_ROOT link and files changed in place
	// both apply.
	RuntimeWatchRoot  bool
	MergeDomainConfig bool // MERGE_DOMAIN_CONFIG

	// BackendType is BACKEND_TYPE (memory or redis). Unset, it is redis
	// when any REDIS_ variable is set (an envoyproxy/ratelimit
	// environment, whose default is redis), memory otherwise; BackendBy
	// says which.
	BackendType string
	BackendBy   string

	RedisSocketType string        // REDIS_SOCKET_TYPE: unix (default) or tcp
	RedisURL        string        // REDIS_URL, default /var/run/nutcracker/ratelimit.sock
	RedisType       string        // REDIS_TYPE: SINGLE (default) or CLUSTER
	RedisAuth       string        // REDIS_AUTH: password, or user:password
	RedisTimeout    time.Duration // REDIS_TIMEOUT, default 10s
	// Redis is REDIS_URL parsed, with REDIS_AUTH and the REDIS_TLS
	// settings applied.
	Redis Redis
	// RedisHealthCheck fails /healthcheck and the gRPC health service
	// while Redis cannot be reached (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION,
	// default false, as in envoyproxy/ratelimit).
	RedisHealthCheck bool
	// RedisStartup* retry the first connection to Redis with exponential
	// backoff: REDIS_STARTUP_INITIAL_INTERVAL (1s), _MAX_INTERVAL (30s),
	// _MAX_ELAPSED_TIME (0, for ever).
	RedisStartupInitial, RedisStartupMax, RedisStartupMaxElapsed time.Duration
	// CacheKeyPrefix starts every Redis key, before admit-rls's own
	// "admit-rls:" (CACHE_KEY_PREFIX).
	CacheKeyPrefix string
	// RedisFailureModeAllow admits requests while Redis cannot decide
	// (REDIS_FAILURE_MODE_ALLOW, an admit-rls addition); by default they
	// fail with Unavailable and Envoy's failure_mode_deny decides.
	RedisFailureModeAllow bool
	// MemoryMaxKeys bounds the memory backend's buckets
	// (MEMORY_MAX_KEYS, an admit-rls addition, default 1048576, at least
	// MinMemoryMaxKeys).
	MemoryMaxKeys int

	ShadowMode      bool   // SHADOW_MODE
	Headers         bool   // LIMIT_RESPONSE_HEADERS_ENABLED
	LimitHeader     string // LIMIT_LIMIT_HEADER, default RateLimit-Limit
	RemainingHeader string // LIMIT_REMAINING_HEADER, default RateLimit-Remaining
	ResetHeader     string // LIMIT_RESET_HEADER, default RateLimit-Reset

	UsePrometheus  bool   // USE_PROMETHEUS
	PrometheusAddr string // PROMETHEUS_ADDR, default :9090
	PrometheusPath string // PROMETHEUS_PATH, default /metrics

	LogLevel  string // LOG_LEVEL, default WARN
	LogFormat string // LOG_FORMAT: text (default) or json

	// Notes are the settings that were given and have no effect in
	// admit-rls, each with the reason, for the log at start.
	Notes []string

	target []string // REDIS_URL's nodes for the log (RedisTarget)
}

// Redis is where and how to connect to Redis.
type Redis struct {
	Network            string   // tcp or unix
	Addrs              []string // host:port (or a socket path), one per node
	Username, Password string
	DB                 int
	TLS                bool   // REDIS_TLS, or a rediss:// URL
	TLSCACert          string // REDIS_TLS_CACERT: a PEM file; empty for the system's roots
	TLSClientCert      string // REDIS_TLS_CLIENT_CERT and _KEY: PEM files
	TLSClientKey       string
	TLSSkipHostname    bool // REDIS_TLS_SKIP_HOSTNAME_VERIFICATION
}

// ConfigDir is where the YAML files live:
// $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY.
func (s *Settings) ConfigDir() string {
	return filepath.Join(s.RuntimeRoot, s.RuntimeSubdirectory, s.RuntimeAppDirectory)
}

// refused are envoyproxy/ratelimit's settings that admit-rls does not
// implement, each with the one value that is harmless ("" meaning unset or
// empty only; "false" any false boolean).
var refused = map[string]string{
	"USE_STATSD": "false", "USE_DOG_STATSD": "false", "USE_DOG_STATSD_MOGRIFIERS": "",
	"MEMCACHE_HOST_PORT": "", "MEMCACHE_SRV": "", "MEMCACHE_TLS": "false",
	"CONFIG_TYPE": "FILE", "FORCE_START_WITHOUT_INITIAL_CONFIG": "false",
	"QUOTA_MODE": "false", "RESPONSE_DYNAMIC_METADATA": "false",
	"REDIS_PERSECOND": "false", "REDIS_SENTINEL_AUTH": "",
	"GRPC_SERVER_USE_TLS": "false", "GRPC_UDS": "", "TRACING_ENABLED": "false",
	"PROMETHEUS_MAPPER_YAML": "", "EXTRA_TAGS": "",
}

// noEffect are envoyproxy/ratelimit's settings that admit-rls accepts and
// that change nothing here, by prefix or name, with the reason.
var noEffect = []struct{ name, why string }{
	{"REDIS_POOL_SIZE", "rueidis pipelines concurrent decisions on shared connections"},
	{"REDIS_POOL_ON_EMPTY_BEHAVIOR", "rueidis pipelines concurrent decisions on shared connections"},
	{"REDIS_PIPELINE_WINDOW", "rueidis pipelines concurrent decisions on shared connections"},
	{"REDIS_PIPELINE_LIMIT", "rueidis pipelines concurrent decisions on shared connections"},
	{"REDIS_CLUSTER_PIPELINE_PARALLELISM", "rueidis pipelines concurrent decisions on shared connections"},
	{"REDIS_PERSECOND_", "there is no per-second Redis (REDIS_PERSECOND is false)"},
	{"EXPIRATION_JITTER_MAX_SECONDS", "a Redis bucket expires when it would be full again"},
	{"NEAR_LIMIT_RATIO", "there is no near_limit statistic"},
	{"LOCAL_CACHE_SIZE_IN_BYTES", "every decision goes to the backend; envoyproxy/ratelimit's local cache only spares it Redis calls for keys already over their limit, with the same decisions"},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "a refused request never takes from its buckets"},
	{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "admit-rls serves only once a configuration has loaded"},
	{"STATSD_", "there is no statsd (USE_STATSD is false)"},
	{"STATS_FLUSH_INTERVAL", "there is no statsd"},
	{"DISABLE_STATS", "USE_PROMETHEUS alone decides whether metrics are served"},
	{"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "there is no response time histogram"},
	{"MEMCACHE_", "BACKEND_TYPE is not memcache"},
	{"CONFIG_GRPC_XDS_", "CONFIG_TYPE is FILE"},
	{"XDS_CLIENT_", "CONFIG_TYPE is FILE"},
	{"GRPC_SERVER_TLS_", "GRPC_SERVER_USE_TLS is false"},
	{"GRPC_CLIENT_TLS_", "GRPC_SERVER_USE_TLS is false"},
	{"TRACING_", "TRACING_ENABLED is false"},
}

// FromEnv reads the settings from env (os.Environ's form). Errors wrap
// admit.ErrInvalidConfig and name every refused variable and bad value at
// once.
func FromEnv(env []string) (*Settings, error) {
	m := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	var errs []string
	for k, harmless := range refused {
		v, set := m[k]
		if !set || v == harmless || v == "" {
			continue
		}
		if harmless == "false" || harmless == "0" {
			if b, err := strconv.ParseBool(v); err == nil && !b || v == "0" {
				continue
			}
		}
		errs = append(errs, fmt.Sprintf("%s is not implemented by admit-rls", shown(k, v)))
	}
	r := reader{m: m}
	s := &Settings{
		Host:                      r.str("HOST", "0.0.0.0"),
		Port:                      r.int("PORT", 8080),
		GrpcHost:                  r.str("GRPC_HOST", "0.0.0.0"),
		GrpcPort:                  r.int("GRPC_PORT", 8081),
		DebugHost:                 r.str("DEBUG_HOST", "0.0.0.0"),
		DebugPort:                 r.int("DEBUG_PORT", 6070),
		GrpcMaxConnectionAge:      r.duration("GRPC_MAX_CONNECTION_AGE", 24*time.Hour),
		GrpcMaxConnectionAgeGrace: r.duration("GRPC_MAX_CONNECTION_AGE_GRACE", time.Hour),
		RuntimeRoot:               r.str("RUNTIME_ROOT", "/srv/runtime_data/current"),
		RuntimeSubdirectory:       r.str("RUNTIME_SUBDIRECTORY", ""),
		RuntimeAppDirectory:       r.str("RUNTIME_APPDIRECTORY", "config"),
		RuntimeIgnoreDotFiles:     r.bool("RUNTIME_IGNOREDOTFILES"),
		RuntimeWatchRoot:          r.str("RUNTIME_WATCH_ROOT", "") == "" || r.bool("RUNTIME_WATCH_ROOT"),
		MergeDomainConfig:         r.bool("MERGE_DOMAIN_CONFIG"),
		BackendType:               strings.ToLower(r.str("BACKEND_TYPE", "")),
		RedisSocketType:           strings.ToLower(r.str("REDIS_SOCKET_TYPE", "unix")),
		RedisURL:                  r.str("REDIS_URL", "/var/run/nutcracker/ratelimit.sock"),
		RedisType:                 strings.ToUpper(r.str("REDIS_TYPE", "SINGLE")),
		RedisAuth:                 r.str("REDIS_AUTH", ""),
		RedisTimeout:              r.duration("REDIS_TIMEOUT", 10*time.Second),
		RedisHealthCheck:          r.bool("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION"),
		RedisStartupInitial:       r.duration("REDIS_STARTUP_INITIAL_INTERVAL", time.Second),
		RedisStartupMax:           r.duration("REDIS_STARTUP_MAX_INTERVAL", 30*time.Second),
		RedisStartupMaxElapsed:    r.duration("REDIS_STARTUP_MAX_ELAPSED_TIME", 0),
		CacheKeyPrefix:            r.str("CACHE_KEY_PREFIX", ""),
		RedisFailureModeAllow:     r.bool("REDIS_FAILURE_MODE_ALLOW"),
		MemoryMaxKeys:             r.int("MEMORY_MAX_KEYS", 1<<20),
		ShadowMode:                r.bool("SHADOW_MODE"),
		Headers:                   r.bool("LIMIT_RESPONSE_HEADERS_ENABLED"),
		LimitHeader:               r.str("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
		RemainingHeader:           r.str("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
		ResetHeader:               r.str("LIMIT_RESET_HEADER", "RateLimit-Reset"),
		UsePrometheus:             r.bool("USE_PROMETHEUS"),
		PrometheusAddr:            r.str("PROMETHEUS_ADDR", ":9090"),
		PrometheusPath:            r.str("PROMETHEUS_PATH", "/metrics"),
		LogLevel:                  strings.ToUpper(r.str("LOG_LEVEL", "WARN")),
		LogFormat:                 strings.ToLower(r.str("LOG_FORMAT", "text")),
	}
	s.Redis = Redis{
		TLS: r.bool("REDIS_TLS"), TLSCACert: r.str("REDIS_TLS_CACERT", ""),
		TLSClientCert: r.str("REDIS_TLS_CLIENT_CERT", ""), TLSClientKey: r.str("REDIS_TLS_CLIENT_KEY", ""),
		TLSSkipHostname: r.bool("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"),
	}
	r.int("LOCAL_CACHE_SIZE_IN_BYTES", 0) // no effect (see noEffect), but an integer, as envoyproxy/ratelimit requires
	errs = append(errs, r.errs...)
	switch {
	case s.BackendType != "":
		s.BackendBy = "BACKEND_TYPE"
	default:
		s.BackendType, s.BackendBy = "memory", "default (no BACKEND_TYPE and no REDIS_ setting)"
		for _, k := range sortedKeys(m) {
			if strings.HasPrefix(k, "REDIS_") {
				s.BackendType, s.BackendBy = "redis", k+" is set and BACKEND_TYPE is not (envoyproxy/ratelimit's default)"
				break
			}
		}
	}
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if s.BackendType != "memory" && s.BackendType != "redis" {
		bad("BACKEND_TYPE=%q: admit-rls implements memory and redis", s.BackendType)
	}
	if s.RedisSocketType != "tcp" && s.RedisSocketType != "unix" {
		bad("REDIS_SOCKET_TYPE=%q: expected tcp or unix", s.RedisSocketType)
	}
	if s.RedisType != "SINGLE" && s.RedisType != "CLUSTER" {
		bad("REDIS_TYPE=%q: admit-rls implements SINGLE and CLUSTER", s.RedisType)
	}
	if s.RedisTimeout <= 0 {
		bad("REDIS_TIMEOUT=%v is not positive", s.RedisTimeout)
	}
	if s.RedisStartupInitial <= 0 || s.RedisStartupMax < s.RedisStartupInitial || s.RedisStartupMaxElapsed < 0 {
		bad("REDIS_STARTUP_INITIAL_INTERVAL=%v, REDIS_STARTUP_MAX_INTERVAL=%v, REDIS_STARTUP_MAX_ELAPSED_TIME=%v: want 0 < initial <= max and elapsed >= 0",
			s.RedisStartupInitial, s.RedisStartupMax, s.RedisStartupMaxElapsed)
	}
	if s.GrpcMaxConnectionAge < 0 || s.GrpcMaxConnectionAgeGrace < 0 {
		bad("GRPC_MAX_CONNECTION_AGE=%v, GRPC_MAX_CONNECTION_AGE_GRACE=%v: want an age and a grace of 0 (no limit) or more", s.GrpcMaxConnectionAge, s.GrpcMaxConnectionAgeGrace)
	}
	if s.MemoryMaxKeys < MinMemoryMaxKeys {
		bad("MEMORY_MAX_KEYS=%d is below %d (64 shards, each holding a request's 256 limited descriptors)", s.MemoryMaxKeys, MinMemoryMaxKeys)
	}
	if s.LogFormat != "text" && s.LogFormat != "json" {
		bad("LOG_FORMAT=%q: expected text or json", s.LogFormat)
	}
	if !logLevels[s.LogLevel] {
		bad("LOG_LEVEL=%q: expected TRACE, DEBUG, INFO, WARN (WARNING), ERROR, FATAL or PANIC", s.LogLevel)
	}
	if s.UsePrometheus {
		if err := muxPattern(s.PrometheusPath); err != nil {
			bad("PROMETHEUS_PATH=%q: not a pattern net/http's ServeMux takes: %v", s.PrometheusPath, err)
		}
	}
	if s.BackendType == "redis" {
		if err := s.parseRedisURL(); err != nil {
			errs = append(errs, err.Error())
		}
	}
	for _, k := range sortedKeys(m) {
		if _, r := refused[k]; r {
			continue
		}
		for _, n := range noEffect {
			if k == n.name || strings.HasSuffix(n.name, "_") && strings.HasPrefix(k, n.name) {
				s.Notes = append(s.Notes, fmt.Sprintf("%s has no effect in admit-rls: %s", k, n.why))
				break
			}
		}
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return nil, fmt.Errorf("%w: %s", admit.ErrInvalidConfig, strings.Join(errs, "; "))
	}
	return s, nil
}

// parseRedisURL fills s.Redis from REDIS_URL and REDIS_AUTH as
// envoyproxy/ratelimit's Redis client (radix) reads them:
//
//   - With REDIS_TYPE=SINGLE the whole value is one node, never split (a
//     password may hold a comma); a Cluster's nodes are separated by commas
//     (percent-encode a comma in a Cluster's password: %2C).
//   - A node is host:port (REDIS_SOCKET_TYPE=tcp), a socket path (unix), or
//     a redis:// or rediss:// URL (a URL means TCP; rediss:// means TLS,
//     an admit-rls addition). A URL's user, password and database come
//     from its user info and path (redis://user:password@host:port/db) or
//     from its query parameters username, password and db; the user info
//     and the path win over the query, as in radix.
//   - REDIS_AUTH ("password" or "user:password") wins over the URL's: its
//     password over the URL's password, and its user, when it names one,
//     over the URL's user; a URL with a user alone keeps REDIS_AUTH's
//     password. A URL credential that REDIS_AUTH overrides is noted.
//   - The URLs of a Cluster's nodes must agree on credentials and database.
//
// Its errors never show REDIS_URL's value nor part of it: it may hold a
// password.
func (s *Settings) parseRedisURL() error {
	rd := &s.Redis
	rd.Network = s.RedisSocketType
	var authUser, authPass string
	if u, p, ok := strings.Cut(s.RedisAuth, ":"); ok {
		authUser, authPass = u, p
	} else {
		authPass = s.RedisAuth
	}
	nodes := []string{s.RedisURL}
	if s.RedisType == "CLUSTER" {
		nodes = strings.Split(s.RedisURL, ",")
	}
	name := func(i int) string {
		if len(nodes) == 1 {
			return "REDIS_URL"
		}
		return fmt.Sprintf("REDIS_URL's node %d of %d", i+1, len(nodes))
	}
	isURL := func(n string) bool {
		n = strings.TrimSpace(n)
		return strings.HasPrefix(n, "redis://") || strings.HasPrefix(n, "rediss://")
	}
	var first *redisURL
	for i, node := range nodes {
		node = strings.TrimSpace(node)
		if isURL(node) != isURL(nodes[0]) {
			// A comma inside a URL's password would otherwise make a node
			// of the password's end.
			return fmt.Errorf("%s: either every node is a redis:// URL or none is (its value is not shown: it may hold a password; percent-encode a comma in a password: %%2C)", name(i))
		}
		if !isURL(node) {
			switch {
			case node == "":
				return fmt.Errorf("%s is empty", name(i))
			case rd.Network == "tcp" && strings.Contains(node, "@"):
				return fmt.Errorf("%s holds an @ but is not a redis:// URL (its value is not shown: it may hold a password)", name(i))
			case rd.Network == "tcp" && strings.Contains(node, ","):
				return fmt.Errorf("%s holds a comma with REDIS_TYPE=SINGLE: a Cluster's nodes need REDIS_TYPE=CLUSTER", name(i))
			case rd.Network == "tcp" && !hostPort(node):
				return fmt.Errorf("%s is not host:port (its value is not shown: it may hold a password)", name(i))
			}
			rd.Addrs = append(rd.Addrs, node)
			s.target = append(s.target, node)
			continue
		}
		ru, err := parseNode(node)
		if err != nil {
			return fmt.Errorf("%s %s (its value is not shown: it may hold a password)", name(i), err)
		}
		if first == nil {
			first = ru
		} else if ru.user != first.user || ru.pass != first.pass || ru.db != first.db || ru.tls != first.tls {
			return fmt.Errorf("%s names another user, password, database or scheme than the first node", name(i))
		}
		rd.Network = "tcp"
		rd.Addrs = append(rd.Addrs, ru.host)
		s.target = append(s.target, ru.redacted)
	}
	rd.Username, rd.Password = authUser, authPass
	if first != nil {
		rd.TLS = rd.TLS || first.tls
		rd.DB = first.db
		if authUser == "" {
			rd.Username = first.user
		} else if first.user != "" {
			s.Notes = append(s.Notes, "REDIS_URL's user has no effect: REDIS_AUTH names one, and wins (as in envoyproxy/ratelimit)")
		}
		if authPass == "" {
			rd.Password = first.pass
		} else if first.pass != "" {
			s.Notes = append(s.Notes, "REDIS_URL's password has no effect: REDIS_AUTH is set, and wins (as in envoyproxy/ratelimit)")
		}
	}
	switch {
	case rd.Network == "unix" && s.RedisType == "CLUSTER":
		return errors.New("REDIS_TYPE=CLUSTER needs REDIS_SOCKET_TYPE=tcp")
	case s.RedisType == "CLUSTER" && rd.DB != 0:
		return fmt.Errorf("REDIS_URL: a Cluster has only database 0, not %d", rd.DB)
	}
	return nil
}

// muxPattern reports why a ServeMux would refuse the pattern p: it panics
// on one it cannot parse, as envoyproxy/ratelimit's http.Handle does.
func muxPattern(p string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	http.NewServeMux().Handle(p, http.NotFoundHandler())
	return nil
}

// hostPort reports whether node is host:port with a numeric port.
func hostPort(node string) bool {
	h, p, err := net.SplitHostPort(node)
	if err != nil || h == "" {
		return false
	}
	n, err := strconv.ParseUint(p, 10, 16)
	return err == nil && n > 0
}

// redisURL is one redis:// or rediss:// node.
type redisURL struct {
	host       string // host:port
	user, pass string
	db         int
	tls        bool
	redacted   string // for the log: scheme://xxxxx@host/db
}

// parseNode reads one redis:// or rediss:// URL. Its errors complete
// "REDIS_URL …" and never quote the URL: a password that url.Parse cannot
// read (an unencoded space, %, [ or ]) or that it reads as something else
// (an unencoded /, ? or # ends the host, so the password's start would be
// taken for a port, the rest for a path, query or fragment) is refused
// without being shown.
func parseNode(node string) (*redisURL, error) {
	const encode = "; percent-encode the reserved characters of a password (@ : / ? # [ ] %% and space)"
	u, err := url.Parse(node)
	if err != nil {
		return nil, fmt.Errorf("is not a valid URL%s", encode)
	}
	if u.Fragment != "" || strings.Contains(node, "#") {
		return nil, fmt.Errorf("holds a # (a fragment)%s", encode)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("names no host%s", encode)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("has a query that does not parse%s", encode)
	}
	for k := range q {
		if k != "db" && k != "password" && k != "username" {
			return nil, fmt.Errorf("has a query parameter other than db, password and username%s", encode)
		}
	}
	ru := &redisURL{host: u.Host, tls: u.Scheme == "rediss", user: q.Get("username"), pass: q.Get("password")}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		ru.host = net.JoinHostPort(u.Hostname(), "6379")
	}
	if n := u.User.Username(); n != "" {
		ru.user = n
	}
	if p, ok := u.User.Password(); ok {
		ru.pass = p
	}
	db := q.Get("db")
	if u.Path != "" && u.Path != "/" {
		db = u.Path[1:]
	}
	if db != "" {
		if ru.db, err = strconv.Atoi(db); err != nil || ru.db < 0 || strconv.Itoa(ru.db) != db {
			return nil, fmt.Errorf("names a database that is not a number%s", encode)
		}
	}
	r := u.Scheme + "://"
	if ru.user != "" || ru.pass != "" {
		r += "xxxxx@" // a user alone may be a password written in its place
	}
	r += ru.host
	if ru.db != 0 {
		r += "/" + strconv.Itoa(ru.db)
	}
	ru.redacted = r
	return ru, nil
}

// RedisTarget returns REDIS_URL for the log: each node as parsed, a URL's
// credentials masked (as envoyproxy/ratelimit masks them) and its query
// left out.
func (s *Settings) RedisTarget() string { return strings.Join(s.target, ",") }

// logLevels are LOG_LEVEL's values, as envoyproxy/ratelimit's logger
// (logrus) parses them, upper-cased.
var logLevels = map[string]bool{
	"TRACE": true, "DEBUG": true, "INFO": true, "WARN": true, "WARNING": true,
	"ERROR": true, "FATAL": true, "PANIC": true,
}

// secret reports whether a variable may hold a password or a key, so that
// its value is never shown.
func secret(k string) bool {
	for _, w := range []string{"AUTH", "PASSWORD", "SECRET", "TOKEN", "URL"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// shown is "K=value" for an error, or "K" alone for a variable that may
// hold a secret.
func shown(k, v string) string {
	if secret(k) {
		return k + " (its value is not shown: it may hold a secret)"
	}
	return fmt.Sprintf("%s=%q", k, v)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// reader parses variables, keeping every error.
type reader struct {
	m    map[string]string
	errs []string
}

func (r *reader) str(k, def string) string {
	if v, ok := r.m[k]; ok && v != "" {
		return v
	}
	return def
}

func (r *reader) fail(k, v string, err error) {
	if secret(k) {
		err = errors.New("not a valid value")
	}
	r.errs = append(r.errs, fmt.Sprintf("%s: %v", shown(k, v), err))
}

func (r *reader) int(k string, def int) int {
	v := r.str(k, "")
	if v == "" {
		return def
	}
	// Base 0, as envoyproxy/ratelimit's envconfig parses an int: 0x1f90
	// and 8_080 are 8080, 010 is 8, and 08080 is refused.
	n, err := strconv.ParseInt(v, 0, strconv.IntSize)
	if err != nil {
		r.fail(k, v, err)
	}
	return int(n)
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

// MinMemoryMaxKeys is the smallest MEMORY_MAX_KEYS: 64 shards × 256, the
// most limited descriptors of a request (rls.MaxLimited). A request's own
// buckets are never evicted for its other descriptors, so a shard's share
// below that could hold more than its share while a request is decided.
const MinMemoryMaxKeys = 64 * 256
