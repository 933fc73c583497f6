package config_test

import (
	"testing"
	"time"

	"github.com/admit-go/admit/rls/config"
	"github.com/stretchr/testify/require"
)

func loadString(s string) (*config.Config, error) {
	return config.Load([]config.File{{Name: "f.yaml", Content: []byte(s)}}, false)
}

// TestBurst reads the burst extension: the capacity, defaulting to
// requests_per_unit, the rate unchanged.
func TestBurst(t *testing.T) {
	c, err := loadString(`
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 60, burst: 5}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 36}
`)
	require.NoError(t, err)
	ra, _ := c.Lookup("d", desc("a", "x"))
	require.Equal(t, int64(5), ra.Capacity())
	require.Equal(t, uint32(60), ra.RequestsPerUnit)
	rb, _ := c.Lookup("d", desc("b", "x"))
	require.Equal(t, int64(36), rb.Capacity())
	require.Equal(t, 30*24*time.Hour, config.UnitDuration(4+1)) // MONTH
}

// TestRefused names what admit-rls refuses beyond envoyproxy/ratelimit's own
// checks.
func TestRefused(t *testing.T) {
	for _, tc := range []struct{ yaml, err string }{
		{`
domain: d
descriptors:
  - key: a
    quota_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
`, "f.yaml: descriptor 'd.a': quota_mode is not implemented by admit-rls"},
		{`
domain: d
descriptors:
  - key: a
    rate_limit: {unlimited: true, burst: 3}
`, "f.yaml: descriptor 'd.a': should not specify burst when unlimited"},
		{`
domain: d
descriptors:
  - key: a
    rate_limit: {unlimited: true, debt: true}
`, "f.yaml: descriptor 'd.a': should not specify debt when unlimited"},
		{`
domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: hour, requests_per_unit: 0, burst: 5}
`, "f.yaml: descriptor 'd.a.b': burst 5 with requests_per_unit 0 never refills; give a rate, or drop burst for a limit of zero"},
		{`
domain: d
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 0, debt: true}
`, "f.yaml: descriptor 'd.a': debt with requests_per_unit 0: a limit of zero holds nothing to charge"},
		{`
domain: d
descriptors:
  - key: a
    value: b
    share_threshold: true
`, "f.yaml: share_threshold can only be used with wildcard values (containing '*'), but found key 'a_b'"},
		{`
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1.5}
`, "f.yaml: error checking config"},
	} {
		_, err := loadString(tc.yaml)
		require.Error(t, err)
		require.Equal(t, tc.err, err.Error())
	}
	_, err := loadString("domain: d\ndescriptors:\n  - key: a\n    quota_mode: false\n")
	require.NoError(t, err)
	_, err = loadString("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 0}\n")
	require.NoError(t, err, "a limit of zero, as envoyproxy/ratelimit loads it")
}

// TestExample loads the example configuration `make rls` serves.
func TestExample(t *testing.T) {
	files, err := config.ReadDir("../examples/config", false)
	require.NoError(t, err)
	require.Len(t, files, 1)
	c, err := config.Load(files, false)
	require.NoError(t, err)
	r, _ := c.Lookup("example", desc("api_key", "k", "path", "/search?q=x"))
	require.NotNil(t, r)
	require.Equal(t, uint32(60), r.RequestsPerUnit)
}

// TestDebtAndLargeRules: debt: true is read; every uint32
// requests_per_unit loads, rules above 1e9 a second included (hits that
// count bytes), as envoyproxy/ratelimit loads them.
func TestDebtAndLargeRules(t *testing.T) {
	c, err := loadString(`
domain: d
descriptors:
  - key: usage
    rate_limit: {unit: hour, requests_per_unit: 1000, debt: true}
  - key: bytes
    rate_limit: {unit: second, requests_per_unit: 4294967295}
`)
	require.NoError(t, err)
	r, _ := c.Lookup("d", desc("usage", "x"))
	require.True(t, r.Debt)
	r, _ = c.Lookup("d", desc("bytes", "x"))
	require.False(t, r.Debt)
	require.Equal(t, int64(4294967295), r.Capacity())
}

// TestShareThresholdKeyWildcard: share_threshold on a wildcard key with no
// value shares one window among the values of each key that matches it, as
// envoyproxy/ratelimit keys it by the pattern; a value's own wildcard is
// shared as before.
func TestShareThresholdKeyWildcard(t *testing.T) {
	c, err := loadString(`
domain: d
descriptors:
  - key: foo*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: path
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
`)
	require.NoError(t, err)
	for _, tc := range []struct {
		key, value string
		shared     []string
	}{
		{"foobar", "v1", []string{"foo*"}},
		{"foobar", "v2", []string{"foo*"}},
		{"foo", "", []string{"foo*"}},
		{"path", "files/a", []string{"files/*"}},
	} {
		r, shared := c.Lookup("d", desc(tc.key, tc.value))
		require.NotNil(t, r, "%s=%s", tc.key, tc.value)
		require.Equal(t, tc.shared, shared, "%s=%s", tc.key, tc.value)
	}
}
