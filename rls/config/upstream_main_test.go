package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWildcardAnywhere: a "*" anywhere in a value (or key) matches any run
// of characters, as envoyproxy/ratelimit has matched since its commit
// 6bcd4d2 (2026-03, "Support wildcard in non-trailing positions"): a
// configuration written for it must not load here and then never match.
// Exact values still win, and wildcards are tried in file order.
func TestWildcardAnywhere(t *testing.T) {
	c, err := loadString(`
domain: d
descriptors:
  - key: multiWild
    value: foo*bar*baz
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    value: /api/*/users
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: path
    value: /api/v1/users
    rate_limit: {unit: minute, requests_per_unit: 30}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 40}
  - key: midWild
    value: bar*b
    rate_limit: {unit: minute, requests_per_unit: 50}
  - key: ab
    value: ab*ba
    rate_limit: {unit: minute, requests_per_unit: 60}
`)
	require.NoError(t, err)
	for _, tc := range []struct {
		key, value string
		rpu        uint32 // 0: no match
	}{
		{"multiWild", "foobarbaz", 10},
		{"multiWild", "fooXbarYbaz", 10},
		{"multiWild", "foo-baz-bar-baz", 10},
		{"multiWild", "foobaz", 0},
		{"multiWild", "fooXbarYbazZ", 0},
		{"path", "/api/v2/users", 20},
		{"path", "/api//users", 20},
		{"path", "/api/v1/users", 30},
		{"path", "/api/v2/orders", 40},
		{"midWild", "barab", 50},
		{"midWild", "barb", 50},
		{"midWild", "bar*b", 50},
		{"midWild", "bar", 0},
		{"ab", "aba", 0}, // prefix and suffix may not overlap
		{"ab", "abba", 60},
		{"ab", "ab-ba", 60},
		{"ab", "abXba", 60},
	} {
		r, _ := c.Lookup("d", desc(tc.key, tc.value))
		if tc.rpu == 0 {
			require.Nil(t, r, "%s=%s", tc.key, tc.value)
			continue
		}
		require.NotNil(t, r, "%s=%s", tc.key, tc.value)
		require.Equal(t, tc.rpu, r.RequestsPerUnit, "%s=%s", tc.key, tc.value)
	}
}

// TestShareThresholdWildcardAnywhere: share_threshold applies to a
// wildcard with a "*" anywhere, as in envoyproxy/ratelimit's main branch
// (its share_threshold.yaml's midpath and multiroute): the values it
// matches share one bucket, keyed by the pattern.
func TestShareThresholdWildcardAnywhere(t *testing.T) {
	c, err := loadString(`
domain: d
descriptors:
  - key: midpath
    value: /api*v1
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: multiroute
    value: svc*ep*rpc
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 50}
`)
	require.NoError(t, err)
	for _, tc := range []struct {
		key, value string
		shared     []string
	}{
		{"midpath", "/api/x/v1", []string{"/api*v1"}},
		{"midpath", "/apiv1", []string{"/api*v1"}},
		{"multiroute", "svc1-ep2-rpc", []string{"svc*ep*rpc"}},
	} {
		r, shared := c.Lookup("d", desc(tc.key, tc.value))
		require.NotNil(t, r, "%s=%s", tc.key, tc.value)
		require.Equal(t, tc.shared, shared, "%s=%s", tc.key, tc.value)
	}
}

// TestMetadataKey: a descriptor's metadata (envoyproxy/ratelimit's main
// branch, since 3728d99, 2026-04: arbitrary YAML sent back in the
// response's dynamic metadata under RESPONSE_DYNAMIC_METADATA) loads, its
// keys unchecked, as there; admit-rls refuses RESPONSE_DYNAMIC_METADATA,
// so it changes nothing. This is upstream's own fixture, metadata.yaml.
func TestMetadataKey(t *testing.T) {
	c, err := loadString(`
domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit:
          unit: second
          requests_per_unit: 5
        metadata:
          name: service_1
      - key: subkey1
        value: subvalue1
        rate_limit:
          unit: second
          requests_per_unit: 10
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
    metadata:
      service_with_quota:
        name: service_2
        anything_goes: [1, {x: y}]
`)
	require.NoError(t, err)
	r, _ := c.Lookup("test-domain", desc("key2", "v"))
	require.NotNil(t, r)
	require.Equal(t, uint32(20), r.RequestsPerUnit)

	_, err = loadString("domain: d\ndescriptors:\n  - key: k\n    metadata: {a: !!binary /w==}\n")
	// protobuf's message varies its space on purpose: check its parts.
	require.ErrorContains(t, err, "f.yaml: error parsing metadata: proto:")
	require.ErrorContains(t, err, `invalid UTF-8 in string: "\xff"`)
}
