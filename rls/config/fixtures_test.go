package config_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/rls/config"
	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
)

// ratelimitModule is the envoyproxy/ratelimit version whose test/config
// fixtures this package must load or refuse exactly as that service does.
const ratelimitModule = "github.com/envoyproxy/ratelimit@v1.4.1-0.20260122083618-3fb702589d36"

// fixtureDir downloads the module through the Go module proxy (a no-op when
// it is in the module cache) and returns its test/config directory.
func fixtureDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", ratelimitModule).Output()
	require.NoError(t, err, "go mod download %s", ratelimitModule)
	var m struct{ Dir string }
	require.NoError(t, json.Unmarshal(out, &m))
	return filepath.Join(m.Dir, "test", "config")
}

func load(t *testing.T, dir string, merge bool, names ...string) (*config.Config, error) {
	t.Helper()
	var files []config.File
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		require.NoError(t, err)
		files = append(files, config.File{Name: n, Content: b})
	}
	return config.Load(files, merge)
}

// TestFixtures loads every fixture of envoyproxy/ratelimit's config tests, in
// the combinations its tests use, and expects its result: success or the
// same error text. A fixture this table does not list fails the test.
func TestFixtures(t *testing.T) {
	dir := fixtureDir(t)
	cases := []struct {
		files []string
		merge bool
		err   string // "" means it loads
	}{
		{files: []string{"basic_config.yaml"}},
		{files: []string{"shadowmode_config.yaml"}},
		{files: []string{"wildcard.yaml"}},
		{files: []string{"share_threshold.yaml"}},
		{files: []string{"merge_domain_key1.yaml", "merge_domain_key2.yaml"}, merge: true},
		{files: []string{"merge_domain_key1.yaml", "merge_domain_key2.yaml"},
			err: "merge_domain_key2.yaml: duplicate domain 'test-domain' in config file"},
		{files: []string{"merge_domain_key1.yaml", "merge_domain_key1.yaml"}, merge: true,
			err: "merge_domain_key1.yaml: duplicate descriptor composite key 'test-domain.key1_value1'"},
		{files: []string{"empty_domain.yaml"}, err: "empty_domain.yaml: config file cannot have empty domain"},
		{files: []string{"basic_config.yaml", "duplicate_domain.yaml"},
			err: "duplicate_domain.yaml: duplicate domain 'test-domain' in config file"},
		{files: []string{"empty_key.yaml"}, err: "empty_key.yaml: descriptor has empty key"},
		{files: []string{"duplicate_key.yaml"},
			err: "duplicate_key.yaml: duplicate descriptor composite key 'test-domain.key1_value1'"},
		{files: []string{"bad_limit_unit.yaml"}, err: "bad_limit_unit.yaml: invalid rate limit unit 'foo'"},
		{files: []string{"replaces_self.yaml"},
			err: "replaces_self.yaml: replaces should not contain name of same descriptor"},
		{files: []string{"replaces_empty.yaml"},
			err: "replaces_empty.yaml: should not have an empty replaces entry"},
		{files: []string{"bad_yaml.yaml"},
			err: "bad_yaml.yaml: error loading config file: yaml: line 2: found unexpected end of stream"},
		{files: []string{"misspelled_key.yaml"}, err: "misspelled_key.yaml: config error, unknown key 'ratelimit'"},
		{files: []string{"misspelled_key2.yaml"},
			err: "misspelled_key2.yaml: config error, unknown key 'requestsperunit'"},
		{files: []string{"non_string_key.yaml"},
			err: "non_string_key.yaml: config error, key is not of type string: 0.25"},
		{files: []string{"non_map_list.yaml"},
			err: "non_map_list.yaml: config error, yaml file contains list of type other than map: a"},
		{files: []string{"unlimited_with_unit.yaml"},
			err: "unlimited_with_unit.yaml: should not specify rate limit unit when unlimited"},
	}
	covered := map[string]bool{}
	for _, c := range cases {
		for _, f := range c.files {
			covered[f] = true
		}
		_, err := load(t, dir, c.merge, c.files...)
		if c.err == "" {
			require.NoError(t, err, "%v", c.files)
			continue
		}
		require.Error(t, err, "%v", c.files)
		require.Equal(t, c.err, err.Error())
		require.ErrorIs(t, err, admit.ErrInvalidConfig)
		var ce *config.Error
		require.True(t, errors.As(err, &ce))
	}
	all, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	require.NoError(t, err)
	var missing []string
	for _, p := range all {
		if !covered[filepath.Base(p)] {
			missing = append(missing, filepath.Base(p))
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "fixtures without an expectation")
}

func desc(kv ...string) []*common.RateLimitDescriptor_Entry {
	var es []*common.RateLimitDescriptor_Entry
	for i := 0; i < len(kv); i += 2 {
		es = append(es, &common.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

// TestBasicLookup matches descriptors against basic_config.yaml: key-only
// defaults, key_value overrides, whitelisted values, nesting, depth.
func TestBasicLookup(t *testing.T) {
	c, err := load(t, fixtureDir(t), false, "basic_config.yaml")
	require.NoError(t, err)
	type want struct {
		rpu  uint32
		unit pb.RateLimitResponse_RateLimit_Unit
	}
	min, sec, hour, day := pb.RateLimitResponse_RateLimit_MINUTE, pb.RateLimitResponse_RateLimit_SECOND,
		pb.RateLimitResponse_RateLimit_HOUR, pb.RateLimitResponse_RateLimit_DAY
	cases := []struct {
		domain  string
		entries []*common.RateLimitDescriptor_Entry
		want    *want
	}{
		{"foo_domain", desc("key1", "value1", "subkey1", "x"), nil},
		{"test-domain", desc(), nil},
		{"test-domain", desc("key1", "value1"), nil},
		{"test-domain", desc("key1", "value1", "subkey1", "something"), &want{5, sec}},
		{"test-domain", desc("key1", "value1", "subkey1", "subvalue1"), &want{10, sec}},
		{"test-domain", desc("key1", "value1", "subkey1", "subvalue1", "deeper", "x"), nil},
		{"test-domain", desc("key2", "value1"), &want{20, min}},
		{"test-domain", desc("key2", "value2"), &want{30, min}},
		{"test-domain", desc("key2", "value3"), nil},
		{"test-domain", desc("key3", "foo"), &want{1, hour}},
		{"test-domain", desc("key4", "foo"), &want{1, day}},
		{"test-domain", desc("key5", "value5"), &want{15, day}},
		{"test-domain", desc("key5", "value5", "subkey5", "subvalue5"), &want{25, day}},
		{"test-domain", desc("key7", "unspecified"), &want{70, min}},
		{"test-domain", desc("key8", "x"), nil},
	}
	for _, tc := range cases {
		r, _ := c.Lookup(tc.domain, tc.entries)
		if tc.want == nil {
			require.Nil(t, r, "%s %v", tc.domain, tc.entries)
			continue
		}
		require.NotNil(t, r, "%s %v", tc.domain, tc.entries)
		require.Equal(t, tc.want.rpu, r.RequestsPerUnit, "%v", tc.entries)
		require.Equal(t, tc.want.unit, r.Unit, "%v", tc.entries)
	}
	rule := func(es []*common.RateLimitDescriptor_Entry) *config.Rule {
		r, _ := c.Lookup("test-domain", es)
		return r
	}
	r := rule(desc("key6", "x"))
	require.NotNil(t, r)
	require.True(t, r.Unlimited)
	require.Equal(t, "key4_rate_limit", rule(desc("key4", "x")).Name)
	require.Equal(t, "test-domain.key1_value1.subkey1_subvalue1",
		rule(desc("key1", "value1", "subkey1", "subvalue1")).Key)
}

// TestWildcardLookup matches wildcard.yaml: a trailing "*" is a prefix, a
// "*" inside a value matches any run too (envoyproxy/ratelimit's main branch
// since 2026-03; this fixture's version still read it as a literal), exact
// values beat wildcards.
func TestWildcardLookup(t *testing.T) {
	c, err := load(t, fixtureDir(t), false, "wildcard.yaml")
	require.NoError(t, err)
	for _, tc := range []struct {
		entries []*common.RateLimitDescriptor_Entry
		key     string // "" means no match
	}{
		{desc("wild", "foo1"), "test-domain.wild_foo*"},
		{desc("wild", "foo"), "test-domain.wild_foo*"},
		{desc("wild", "fo"), ""},
		{desc("noWild", "foo"), "test-domain.noWild_foo"},
		{desc("noWild", "foo1"), ""},
		{desc("noVal", "anything"), "test-domain.noVal"},
		{desc("midWild", "barab"), "test-domain.midWild_bar*b"},
		{desc("midWild", "bara"), ""},
		{desc("midWild", "bar*b"), "test-domain.midWild_bar*b"},
		{desc("nestedWild", "val1", "wild", "goo2"), "test-domain.nestedWild_val1.wild_goo*"},
		{desc("nestedWild", "val1", "wild", "foo2"), ""},
	} {
		r, shared := c.Lookup("test-domain", tc.entries)
		require.Nil(t, shared)
		if tc.key == "" {
			require.Nil(t, r, "%v", tc.entries)
			continue
		}
		require.NotNil(t, r, "%v", tc.entries)
		require.Equal(t, tc.key, r.Key)
	}
}

// TestShareThresholdLookup matches share_threshold.yaml: an entry matched
// through a wildcard with share_threshold is keyed by the wildcard, at any
// depth, and only such entries.
func TestShareThresholdLookup(t *testing.T) {
	c, err := load(t, fixtureDir(t), false, "share_threshold.yaml")
	require.NoError(t, err)
	for _, tc := range []struct {
		entries []*common.RateLimitDescriptor_Entry
		rpu     uint32
		shared  []string
	}{
		{desc("files", "files/a.pdf"), 100, []string{"files/*"}},
		{desc("nested", "parent", "files", "nested/x"), 200, []string{"", "nested/*"}},
		{desc("files", "top/1", "files", "nested/2"), 300, []string{"top/*", "nested/*"}},
		{desc("route", "api/v1", "method", "GET"), 60, []string{"api/*", ""}},
		{desc("path", "path/a", "file", "file/b", "type", "c"), 120, []string{"path/*", "", ""}},
		{desc("user", "user/1", "resource", "res/2", "action", "read"), 150, []string{"user/*", "res/*", ""}},
		{desc("file", "test1"), 50, nil},
		{desc("file", "test2"), 100, []string{"test*"}},
	} {
		r, shared := c.Lookup("test-domain", tc.entries)
		require.NotNil(t, r, "%v", tc.entries)
		require.Equal(t, tc.rpu, r.RequestsPerUnit, "%v", tc.entries)
		require.Equal(t, tc.shared, shared, "%v", tc.entries)
	}
}
