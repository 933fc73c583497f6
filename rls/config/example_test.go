package config_test

import (
	"errors"
	"fmt"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/rls/config"
	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// Load reads files in envoyproxy/ratelimit's format, here from memory
// (ReadDir reads them from a directory); Lookup then finds the rule a
// request's descriptor matches: the deepest level of its entries, trying
// key_value, then a wildcard value, then the key alone.
func ExampleConfig_Lookup() {
	yaml := `
domain: example
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 600}
    descriptors:
      - key: path
        value: /search*
        rate_limit: {unit: minute, requests_per_unit: 60, burst: 10}
`
	cfg, err := config.Load([]config.File{{Name: "example.yaml", Content: []byte(yaml)}}, false)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, entries := range [][]*common.RateLimitDescriptor_Entry{
		{{Key: "api_key", Value: "k1"}},
		{{Key: "api_key", Value: "k1"}, {Key: "path", Value: "/search/books"}},
		{{Key: "user", Value: "u1"}},
	} {
		rule, _ := cfg.Lookup("example", entries)
		if rule == nil {
			fmt.Println("no limit")
			continue
		}
		fmt.Printf("%s: %d per %v, bucket of %d\n", rule.Key, rule.RequestsPerUnit, rule.Unit, rule.Capacity())
	}
	// Output:
	// example.api_key: 600 per MINUTE, bucket of 600
	// example.api_key.path_/search*: 60 per MINUTE, bucket of 10
	// no limit
}

// A file is refused with envoyproxy/ratelimit's message, naming the file;
// the error wraps admit.ErrInvalidConfig.
func ExampleError() {
	_, err := config.Load([]config.File{{Name: "bad.yaml", Content: []byte(`
domain: example
descriptors:
  - key: api_key
    rate_limit: {unit: fortnight, requests_per_unit: 1}
`)}}, false)
	var cerr *config.Error
	fmt.Println(errors.As(err, &cerr), cerr.File)
	fmt.Println(err)
	fmt.Println(errors.Is(err, admit.ErrInvalidConfig))
	// Output:
	// true bad.yaml
	// bad.yaml: invalid rate limit unit 'fortnight'
	// true
}
