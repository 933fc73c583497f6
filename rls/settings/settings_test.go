package settings_test

import (
	"errors"
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
		"QUOTA_MODE=true", "REDIS_PERSECOND=true", "REDIS_TLS=true", "GRPC_SERVER_USE_TLS=true",
		"BACKEND_TYPE=memcache", "REDIS_TYPE=SENTINEL", "PORT=x", "SHADOW_MODE=maybe", "REDIS_TIMEOUT=soon",
	} {
		_, err := settings.FromEnv([]string{kv})
		require.Error(t, err, kv)
		require.True(t, errors.Is(err, admit.ErrInvalidConfig), kv)
		require.Contains(t, err.Error(), strings.SplitN(kv, "=", 2)[0], kv)
	}
}
