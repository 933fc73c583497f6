package settings_test

import (
	"strings"
	"testing"

	"github.com/admit-go/admit/rls/settings"
	"github.com/stretchr/testify/require"
)

// TestLocalCacheAccepted: LOCAL_CACHE_SIZE_IN_BYTES (envoyproxy/ratelimit's
// README section "Local Cache": a freecache of keys over their limit) only
// saves that service Redis calls for keys already over their limit in the
// current window (its decisions are the same with or without it), so an
// environment that sets it starts, with a note; a value that is no integer
// is refused, as envoyproxy/ratelimit's envconfig refuses it.
func TestLocalCacheAccepted(t *testing.T) {
	s, err := settings.FromEnv([]string{"LOCAL_CACHE_SIZE_IN_BYTES=104857600"})
	require.NoError(t, err)
	require.Len(t, s.Notes, 1)
	require.True(t, strings.HasPrefix(s.Notes[0], "LOCAL_CACHE_SIZE_IN_BYTES has no effect in admit-rls: "), s.Notes[0])

	s, err = settings.FromEnv([]string{"LOCAL_CACHE_SIZE_IN_BYTES=0"})
	require.NoError(t, err)
	require.Len(t, s.Notes, 1)

	_, err = settings.FromEnv([]string{"LOCAL_CACHE_SIZE_IN_BYTES=lots"})
	require.ErrorContains(t, err, "LOCAL_CACHE_SIZE_IN_BYTES")
}
