package settings_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/rls/settings"
	"github.com/stretchr/testify/require"
)

func TestDefaults(t *testing.T) {
	s, err := settings.FromEnv(nil)
	require.NoError(t, err)
	require.Equal(t, 8080, s.Port)
	require.Equal(t, 8081, s.GrpcPort)
	require.Equal(t, "memory", s.BackendType)
	require.Equal(t, 6070, s.DebugPort)
	require.Equal(t, 24*time.Hour, s.GrpcMaxConnectionAge)
	require.Equal(t, time.Hour, s.GrpcMaxConnectionAgeGrace)
	require.Equal(t, "text", s.LogFormat)
	require.Empty(t, s.Notes)
	require.Equal(t, "/srv/runtime_data/current/config", s.ConfigDir())
	require.Equal(t, 10*time.Second, s.RedisTimeout)
	require.Equal(t, ":9090", s.PrometheusAddr)
	require.Equal(t, "/metrics", s.PrometheusPath)
}

func TestEnv(t *testing.T) {
	s, err := settings.FromEnv([]string{
		"PORT=1", "GRPC_PORT=2", "RUNTIME_ROOT=/r", "RUNTIME_SUBDIRECTORY=s", "RUNTIME_APPDIRECTORY=a",
		"BACKEND_TYPE=redis", "REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=cluster", "REDIS_URL=a:1,b:2",
		"SHADOW_MODE=true", "LIMIT_RESPONSE_HEADERS_ENABLED=1", "USE_STATSD=false", "REDIS_TIMEOUT=250ms",
	})
	require.NoError(t, err)
	require.Equal(t, "/r/s/a", s.ConfigDir())
	require.Equal(t, "CLUSTER", s.RedisType)
	require.True(t, s.ShadowMode)
	require.True(t, s.Headers)
	require.Equal(t, 250*time.Millisecond, s.RedisTimeout)
}

// TestRefused: every setting admit-rls does not implement is refused with
// its name; a bad value names its variable.
func TestRefused(t *testing.T) {
	for _, kv := range []string{
		"USE_STATSD=true", "USE_DOG_STATSD=true", "MEMCACHE_HOST_PORT=h:1", "CONFIG_TYPE=GRPC_XDS_SOTW",
		"QUOTA_MODE=true", "REDIS_PERSECOND=true", "GRPC_SERVER_USE_TLS=true",
		"BACKEND_TYPE=memcache", "REDIS_TYPE=SENTINEL", "PORT=x", "SHADOW_MODE=maybe", "REDIS_TIMEOUT=soon",
		"LOG_FORMAT=yaml", "GRPC_MAX_CONNECTION_AGE=-1s", "REDIS_URL=redis://h:1/x", "TRACING_ENABLED=true",
		"MEMORY_MAX_KEYS=16383",
	} {
		_, err := settings.FromEnv([]string{kv})
		require.Error(t, err, kv)
		require.True(t, errors.Is(err, admit.ErrInvalidConfig), kv)
		require.Contains(t, err.Error(), strings.SplitN(kv, "=", 2)[0], kv)
	}
}

// TestMemoryMaxKeysFloor: 64 shards × 256 descriptors is the least bound.
func TestMemoryMaxKeysFloor(t *testing.T) {
	s, err := settings.FromEnv([]string{"MEMORY_MAX_KEYS=16384"})
	require.NoError(t, err)
	require.Equal(t, settings.MinMemoryMaxKeys, s.MemoryMaxKeys)
}

// TestAllRefusedAtOnce: every refused setting and bad value is named in one
// error, so that a migration sees them all at the first start.
func TestAllRefusedAtOnce(t *testing.T) {
	_, err := settings.FromEnv([]string{"USE_STATSD=true", "QUOTA_MODE=true", "PORT=x", "LOG_FORMAT=xml"})
	require.ErrorIs(t, err, admit.ErrInvalidConfig)
	for _, name := range []string{"USE_STATSD", "QUOTA_MODE", "PORT", "LOG_FORMAT"} {
		require.Contains(t, err.Error(), name)
	}
}

// TestBackendDefault: memory for a bare start; Redis when an
// envoyproxy/ratelimit environment names Redis without BACKEND_TYPE (its
// default backend); BACKEND_TYPE wins.
func TestBackendDefault(t *testing.T) {
	for _, tc := range []struct {
		env     []string
		backend string
		by      string
	}{
		{nil, "memory", "default"},
		{[]string{"REDIS_URL=/tmp/r.sock"}, "redis", "REDIS_URL"},
		{[]string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=h:1"}, "redis", "REDIS_SOCKET_TYPE"},
		{[]string{"BACKEND_TYPE=memory", "REDIS_URL=h:1"}, "memory", "BACKEND_TYPE"},
		{[]string{"BACKEND_TYPE=redis"}, "redis", "BACKEND_TYPE"},
	} {
		s, err := settings.FromEnv(tc.env)
		require.NoError(t, err, tc.env)
		require.Equal(t, tc.backend, s.BackendType, tc.env)
		require.Contains(t, s.BackendBy, tc.by, tc.env)
	}
}

// TestRedisURL: REDIS_URL as envoyproxy/ratelimit's Redis client (radix)
// takes it: host:port or a socket path, or redis:// (and rediss://) URLs
// with user, password and database in the user info and path or in the
// query (username, password, db; the user info and path win), one per
// node of a Cluster; REDIS_AUTH wins over the URL's credentials.
func TestRedisURL(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want settings.Redis
	}{
		{[]string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=h:1", "REDIS_AUTH=pw"},
			settings.Redis{Network: "tcp", Addrs: []string{"h:1"}, Password: "pw"}},
		{[]string{"REDIS_URL=/run/r.sock", "REDIS_AUTH=u:pw"},
			settings.Redis{Network: "unix", Addrs: []string{"/run/r.sock"}, Username: "u", Password: "pw"}},
		{[]string{"REDIS_URL=redis://:s3cret@h:1/3"},
			settings.Redis{Network: "tcp", Addrs: []string{"h:1"}, Password: "s3cret", DB: 3}},
		{[]string{"REDIS_URL=rediss://user:pw@h"},
			settings.Redis{Network: "tcp", Addrs: []string{"h:6379"}, Username: "user", Password: "pw", TLS: true}},
		{[]string{"REDIS_TYPE=cluster", "REDIS_URL=redis://a:1,redis://b:2", "REDIS_TLS=true", "REDIS_TLS_CACERT=/ca.pem"},
			settings.Redis{Network: "tcp", Addrs: []string{"a:1", "b:2"}, TLS: true, TLSCACert: "/ca.pem"}},
		// The query, as radix reads it.
		{[]string{"REDIS_URL=redis://h:6379?db=2"},
			settings.Redis{Network: "tcp", Addrs: []string{"h:6379"}, DB: 2}},
		{[]string{"REDIS_URL=redis://h:6379/?db=2&password=pw&username=u"},
			settings.Redis{Network: "tcp", Addrs: []string{"h:6379"}, Username: "u", Password: "pw", DB: 2}},
		{[]string{"REDIS_URL=redis://v:up@h:6379/4?db=2&password=qp&username=u"},
			settings.Redis{Network: "tcp", Addrs: []string{"h:6379"}, Username: "v", Password: "up", DB: 4}},
		// REDIS_AUTH wins over the URL's credentials.
		{[]string{"REDIS_URL=redis://:urlpw@h:1", "REDIS_AUTH=authpw"},
			settings.Redis{Network: "tcp", Addrs: []string{"h:1"}, Password: "authpw"}},
		{[]string{"REDIS_URL=redis://user@h:1", "REDIS_AUTH=authpw"},
			settings.Redis{Network: "tcp", Addrs: []string{"h:1"}, Username: "user", Password: "authpw"}},
		{[]string{"REDIS_URL=redis://user:urlpw@h:1", "REDIS_AUTH=admin:authpw"},
			settings.Redis{Network: "tcp", Addrs: []string{"h:1"}, Username: "admin", Password: "authpw"}},
		{[]string{"REDIS_URL=redis://h:1?password=qp", "REDIS_AUTH=authpw"},
			settings.Redis{Network: "tcp", Addrs: []string{"h:1"}, Password: "authpw"}},
		// A SINGLE URL is never split: its password may hold a comma.
		{[]string{"REDIS_URL=redis://:p,w@h:1"},
			settings.Redis{Network: "tcp", Addrs: []string{"h:1"}, Password: "p,w"}},
		{[]string{"REDIS_TYPE=CLUSTER", "REDIS_URL=redis://:p%2Cw@a:1,redis://:p%2Cw@b:2"},
			settings.Redis{Network: "tcp", Addrs: []string{"a:1", "b:2"}, Password: "p,w"}},
		{[]string{"REDIS_URL=redis://u:pw@[::1]/2"},
			settings.Redis{Network: "tcp", Addrs: []string{"[::1]:6379"}, Username: "u", Password: "pw", DB: 2}},
	} {
		s, err := settings.FromEnv(tc.env)
		require.NoError(t, err, tc.env)
		require.Equal(t, tc.want, s.Redis, tc.env)
	}
	s, err := settings.FromEnv([]string{"REDIS_URL=redis://u:urlpw@h:1", "REDIS_AUTH=admin:authpw"})
	require.NoError(t, err)
	require.Len(t, s.Notes, 2, "the URL's user and password are noted as overridden: %v", s.Notes)
	for _, bad := range [][]string{
		{"REDIS_URL=redis://h:1/db"},
		{"REDIS_URL=redis://h:1?db=x"},
		{"REDIS_URL=redis://h:1?database=2"},
		{"REDIS_URL=redis://h:1#frag"},
		{"REDIS_URL=redis://:pw@"},
		{"REDIS_TYPE=CLUSTER", "REDIS_URL=redis://a:1/2"},
		{"REDIS_TYPE=CLUSTER", "REDIS_URL=redis://:x@a:1,redis://:y@b:2"},
		{"REDIS_URL=a:1,b:2", "REDIS_SOCKET_TYPE=tcp"},
		{"REDIS_URL=redis://a:1,redis://b:2"},
		{"REDIS_TYPE=CLUSTER", "REDIS_URL=a:1"},
	} {
		_, err := settings.FromEnv(bad)
		require.ErrorIs(t, err, admit.ErrInvalidConfig, bad)
		require.Contains(t, err.Error(), "REDIS_", bad)
	}
}

// TestSecretsNotShown: no password reaches an error, a note or the target
// logged at start, whatever it holds (the reserved characters of a URL,
// encoded or not): a password url.Parse cannot read, or reads as a port,
// a path, a query or a fragment, is refused without being quoted; so is a
// refused setting that may hold one.
func TestSecretsNotShown(t *testing.T) {
	const secret = "s3cr3t"
	var envs [][]string
	for _, c := range []string{",", "#", "/", "?", "%", " ", "[", "]", "@", ":", "%zz", "!$&'()*+;=", "/5", "?5@h:1", "#5"} {
		for _, pw := range []string{secret + c + "x", "12" + c + secret} {
			for _, u := range []string{"redis://u:" + pw + "@h:6379", "redis://:" + pw + "@h:6379/1", "rediss://" + pw + "@h",
				"redis://h:6379?password=" + pw, "redis://u:" + pw + "@h:1,redis://u:" + pw + "@h:2"} {
				envs = append(envs, []string{"REDIS_URL=" + u}, []string{"REDIS_TYPE=CLUSTER", "REDIS_URL=" + u},
					[]string{"REDIS_URL=" + u, "REDIS_AUTH=" + pw})
			}
			enc := url.UserPassword("u", pw).String()
			envs = append(envs, []string{"REDIS_URL=redis://" + enc + "@h:6379"},
				[]string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + enc + "@h:6379"}, // no scheme
				[]string{"REDIS_SENTINEL_AUTH=" + pw}, []string{"REDIS_PERSECOND_AUTH=" + pw, "BACKEND_TYPE=memory"},
				[]string{"REDIS_AUTH=" + pw, "REDIS_URL=h:1", "REDIS_SOCKET_TYPE=tcp", "PORT=x"})
		}
	}
	accepted := 0
	for _, env := range envs {
		s, err := settings.FromEnv(env)
		if err != nil {
			require.NotContains(t, err.Error(), secret, env)
			continue
		}
		accepted++
		require.NotContains(t, s.RedisTarget(), secret, env)
		for _, n := range s.Notes {
			require.NotContains(t, n, secret, env)
		}
	}
	t.Logf("%d environments, %d accepted", len(envs), accepted)
	// Encoded, each password reaches Redis unchanged.
	for _, c := range []string{",", "#", "/", "?", "%", " ", "[", "@", ":"} {
		pw := secret + c + "x"
		s, err := settings.FromEnv([]string{"REDIS_URL=redis://" + url.UserPassword("u", pw).String() + "@h:6379"})
		require.NoError(t, err)
		require.Equal(t, pw, s.Redis.Password)
		require.Equal(t, "redis://xxxxx@h:6379", s.RedisTarget())
	}
}

// TestNotes: envoyproxy/ratelimit's settings that change nothing here are
// accepted and noted, each with the reason, for the log.
func TestNotes(t *testing.T) {
	s, err := settings.FromEnv([]string{"REDIS_POOL_SIZE=20", "RUNTIME_WATCH_ROOT=false", "NEAR_LIMIT_RATIO=0.9",
		"CONFIG_GRPC_XDS_NODE_ID=n", "USE_STATSD=false", "BACKEND_TYPE=memory"})
	require.NoError(t, err)
	require.Len(t, s.Notes, 3)
	require.False(t, s.RuntimeWatchRoot) // it chooses which files are read (TestAppDirectorySiblings)
	for i, name := range []string{"CONFIG_GRPC_XDS_NODE_ID", "NEAR_LIMIT_RATIO", "REDIS_POOL_SIZE"} {
		require.True(t, strings.HasPrefix(s.Notes[i], name+" has no effect in admit-rls: "), s.Notes[i])
	}
}

// TestLogLevel: LOG_LEVEL takes what envoyproxy/ratelimit's logger takes,
// in any case; another value stops the start, as it stops
// envoyproxy/ratelimit, instead of running at a level nobody asked for.
func TestLogLevel(t *testing.T) {
	for _, l := range []string{"trace", "DEBUG", "Info", "warn", "warning", "error", "fatal", "panic"} {
		_, err := settings.FromEnv([]string{"LOG_LEVEL=" + l})
		require.NoError(t, err, l)
	}
	for _, l := range []string{"verbose", "warnings", "5"} {
		_, err := settings.FromEnv([]string{"LOG_LEVEL=" + l})
		require.ErrorIs(t, err, admit.ErrInvalidConfig, l)
		require.Contains(t, err.Error(), "LOG_LEVEL", l)
	}
}

// TestEmptyValues: a variable set to the empty string reads as unset, its
// default (docs/rls.md, What differs: envoyproxy/ratelimit's envconfig
// takes the empty value, a start-up error for a number, a boolean or a
// duration). A REDIS_ variable set empty still counts as set when the
// backend is chosen.
func TestEmptyValues(t *testing.T) {
	env := []string{"PORT=", "GRPC_PORT=", "SHADOW_MODE=", "REDIS_TIMEOUT=", "LOG_LEVEL=", "REDIS_TYPE=",
		"RUNTIME_ROOT=", "RUNTIME_APPDIRECTORY=", "BACKEND_TYPE=", "REDIS_URL=", "USE_STATSD=", "CONFIG_TYPE=",
		"LIMIT_RESET_HEADER="}
	s, err := settings.FromEnv(env)
	require.NoError(t, err)
	require.Equal(t, 8080, s.Port)
	require.Equal(t, 8081, s.GrpcPort)
	require.False(t, s.ShadowMode)
	require.Equal(t, 10*time.Second, s.RedisTimeout)
	require.Equal(t, "WARN", s.LogLevel)
	require.Equal(t, "SINGLE", s.RedisType)
	require.Equal(t, "/srv/runtime_data/current/config", s.ConfigDir())
	require.Equal(t, "redis", s.BackendType, "REDIS_URL= is a REDIS_ setting")
	require.Equal(t, "/var/run/nutcracker/ratelimit.sock", s.RedisURL)
	require.Equal(t, "RateLimit-Reset", s.ResetHeader)
}

// TestRuntimeWatchRootDefault: RUNTIME_WATCH_ROOT is true unless set false,
// as in envoyproxy/ratelimit; it selects the files read beside the
// configuration directory (config.ReadRuntime).
func TestRuntimeWatchRootDefault(t *testing.T) {
	s, err := settings.FromEnv(nil)
	require.NoError(t, err)
	require.True(t, s.RuntimeWatchRoot)
	s, err = settings.FromEnv([]string{"RUNTIME_WATCH_ROOT=true"})
	require.NoError(t, err)
	require.True(t, s.RuntimeWatchRoot)
	require.Empty(t, s.Notes)
	_, err = settings.FromEnv([]string{"RUNTIME_WATCH_ROOT=sometimes"})
	require.ErrorContains(t, err, "RUNTIME_WATCH_ROOT")
}

// TestPrometheusPath: PROMETHEUS_PATH is a pattern of net/http's ServeMux
// (envoyproxy/ratelimit hands it to http.Handle); one the mux cannot take
// ("metrics", without its slash) is refused by name at start with
// USE_PROMETHEUS, instead of making admit-rls panic once its listeners are
// open. Without USE_PROMETHEUS it is not read, as there.
func TestPrometheusPath(t *testing.T) {
	for _, p := range []string{"metrics", "/a b", "/{x"} {
		_, err := settings.FromEnv([]string{"USE_PROMETHEUS=true", "PROMETHEUS_PATH=" + p})
		require.ErrorIs(t, err, admit.ErrInvalidConfig, p)
		require.ErrorContains(t, err, "PROMETHEUS_PATH", p)
		_, err = settings.FromEnv([]string{"PROMETHEUS_PATH=" + p})
		require.NoError(t, err, p)
	}
	for _, p := range []string{"/m", "/metrics/", "GET /metrics"} {
		s, err := settings.FromEnv([]string{"USE_PROMETHEUS=true", "PROMETHEUS_PATH=" + p})
		require.NoError(t, err, p)
		require.Equal(t, p, s.PrometheusPath)
	}
}

// TestIntegers: a number reads as envoyproxy/ratelimit's envconfig reads
// it (strconv.ParseInt with base 0): a 0x, 0o or 0b prefix, a leading 0
// for octal, and underscores between digits; so one environment means the
// same ports in both, and a value envconfig refuses is refused.
func TestIntegers(t *testing.T) {
	s, err := settings.FromEnv([]string{"PORT=0x1f90", "GRPC_PORT=010", "DEBUG_PORT=6_070", "MEMORY_MAX_KEYS=0b100000000000000"})
	require.NoError(t, err)
	require.Equal(t, 8080, s.Port)
	require.Equal(t, 8, s.GrpcPort)
	require.Equal(t, 6070, s.DebugPort)
	require.Equal(t, 1<<14, s.MemoryMaxKeys)
	for _, kv := range []string{"PORT=08080", "GRPC_PORT=1e3", "LOCAL_CACHE_SIZE_IN_BYTES=0x"} {
		_, err := settings.FromEnv([]string{kv})
		require.ErrorIs(t, err, admit.ErrInvalidConfig, kv)
		require.ErrorContains(t, err, strings.SplitN(kv, "=", 2)[0], kv)
	}
}

// TestGrpcMaxConnectionAgeZero: GRPC_MAX_CONNECTION_AGE=0 (and a grace of
// 0) is gRPC's zero value, no limit, which envoyproxy/ratelimit passes to
// grpc-go as it is; an environment that turned GOAWAY off that way starts
// here too. A negative age or grace is refused.
func TestGrpcMaxConnectionAgeZero(t *testing.T) {
	s, err := settings.FromEnv([]string{"GRPC_MAX_CONNECTION_AGE=0", "GRPC_MAX_CONNECTION_AGE_GRACE=0s"})
	require.NoError(t, err)
	require.Zero(t, s.GrpcMaxConnectionAge)
	require.Zero(t, s.GrpcMaxConnectionAgeGrace)
	for _, kv := range []string{"GRPC_MAX_CONNECTION_AGE=-1s", "GRPC_MAX_CONNECTION_AGE_GRACE=-1ns"} {
		_, err := settings.FromEnv([]string{kv})
		require.ErrorIs(t, err, admit.ErrInvalidConfig, kv)
		require.ErrorContains(t, err, "GRPC_MAX_CONNECTION_AGE", kv)
	}
}
