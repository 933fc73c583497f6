package config

import (
	"fmt"
	"sort"
	"strings"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// File is one configuration file: its name (used in errors) and content.
type File struct {
	Name    string
	Content []byte
}

// Rule is the rate_limit of one configured descriptor.
type Rule struct {
	// Key is the descriptor's path in the configuration,
	// "domain.key_value.key": the name envoyproxy/ratelimit gives it.
	Key             string
	Name            string
	Unit            pb.RateLimitResponse_RateLimit_Unit
	RequestsPerUnit uint32
	// Burst is the bucket's capacity as written; 0 means RequestsPerUnit.
	Burst      uint32
	Unlimited  bool
	ShadowMode bool
	// Debt charges every hit of the rule whatever the request's outcome,
	// down to a balance of minus one burst (debt: true, an admit-rls
	// extension for usage reported after the response).
	Debt           bool
	Replaces       []string
	DetailedMetric bool
}

// UnitDuration returns the length of a unit as envoyproxy/ratelimit counts
// it (a month is 30 days, a year 365), and 0 for UNKNOWN or an undefined
// value.
func UnitDuration(u pb.RateLimitResponse_RateLimit_Unit) time.Duration {
	switch u {
	case pb.RateLimitResponse_RateLimit_SECOND:
		return time.Second
	case pb.RateLimitResponse_RateLimit_MINUTE:
		return time.Minute
	case pb.RateLimitResponse_RateLimit_HOUR:
		return time.Hour
	case pb.RateLimitResponse_RateLimit_DAY:
		return 24 * time.Hour
	case pb.RateLimitResponse_RateLimit_WEEK:
		return 7 * 24 * time.Hour
	case pb.RateLimitResponse_RateLimit_MONTH:
		return 30 * 24 * time.Hour
	case pb.RateLimitResponse_RateLimit_YEAR:
		return 365 * 24 * time.Hour
	}
	return 0
}

// Capacity returns the rule's bucket capacity: Burst, or RequestsPerUnit
// when Burst is 0. A capacity of 0 is a limit of zero: every request that
// costs anything is over it.
func (r *Rule) Capacity() int64 {
	if r.Burst != 0 {
		return int64(r.Burst)
	}
	return int64(r.RequestsPerUnit)
}

// node is one level of a domain's descriptor tree.
type node struct {
	children  map[string]*node // by "key_value", or "key" for a key-only descriptor
	wildcards []wildcard       // children whose map key holds a "*", in file order
	rule      *Rule
	// shared, with share_threshold, is the child's map key, the pattern
	// ("path_files/*") whose matched values share one bucket.
	shared string
}

// wildcard is a child's map key holding "*", split on "*".
type wildcard struct {
	key   string
	parts []string
}

// match reports whether s ("key_value") matches the pattern: its parts in
// order, the first at the start and the last at the end, without overlap.
func (w wildcard) match(s string) bool {
	first, last := w.parts[0], w.parts[len(w.parts)-1]
	if !strings.HasPrefix(s, first) {
		return false
	}
	s = s[len(first):]
	if !strings.HasSuffix(s, last) {
		return false
	}
	s = s[:len(s)-len(last)]
	for _, p := range w.parts[1 : len(w.parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return true
}

// Config is a loaded configuration: domains and their descriptor trees.
// It is immutable and safe for concurrent use.
type Config struct {
	domains map[string]*node
}

// Load builds a Config from files, checked in order. With merge, files that
// name the same domain add to it (MERGE_DOMAIN_CONFIG); without, a second
// file for a domain is an error. The error is an *Error naming the file.
func Load(files []File, merge bool) (*Config, error) {
	c := &Config{domains: map[string]*node{}}
	for _, f := range files {
		root, err := parse(f.Name, f.Content)
		if err != nil {
			return nil, err
		}
		if root.Domain == "" {
			return nil, errorf(f.Name, "config file cannot have empty domain")
		}
		d, ok := c.domains[root.Domain]
		if ok && !merge {
			return nil, errorf(f.Name, "duplicate domain '%s' in config file", root.Domain)
		}
		if !ok {
			d = &node{children: map[string]*node{}}
			c.domains[root.Domain] = d
		}
		if err := d.load(f.Name, root.Domain+".", root.Descriptors); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (n *node) load(file, parent string, ds []yamlDescriptor) error {
	for _, yd := range ds {
		if yd.Key == "" {
			return errorf(file, "descriptor has empty key")
		}
		k := yd.Key
		if yd.Value != "" {
			k += "_" + yd.Value
		}
		path := parent + k
		if _, dup := n.children[k]; dup {
			return errorf(file, "duplicate descriptor composite key '%s'", path)
		}
		if yd.QuotaMode {
			return errorf(file, "descriptor '%s': quota_mode is not implemented by admit-rls", path)
		}
		var rule *Rule
		if rl := yd.RateLimit; rl != nil {
			v, known := pb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(rl.Unit)]
			unit := pb.RateLimitResponse_RateLimit_Unit(v)
			valid := known && unit != pb.RateLimitResponse_RateLimit_UNKNOWN
			switch {
			case rl.Unlimited && valid:
				return errorf(file, "should not specify rate limit unit when unlimited")
			case !rl.Unlimited && !valid:
				return errorf(file, "invalid rate limit unit '%s'", rl.Unit)
			case rl.Unlimited && rl.Burst != 0:
				return errorf(file, "descriptor '%s': should not specify burst when unlimited", path)
			case rl.Unlimited && rl.Debt:
				return errorf(file, "descriptor '%s': should not specify debt when unlimited", path)
			case !rl.Unlimited && rl.RequestsPerUnit == 0 && rl.Burst != 0:
				// Its buckets would never refill: held for ever, in Redis
				// under keys the clients choose.
				return errorf(file, "descriptor '%s': burst %d with requests_per_unit 0 never refills; give a rate, or drop burst for a limit of zero", path, rl.Burst)
			case !rl.Unlimited && rl.RequestsPerUnit == 0 && rl.Debt:
				return errorf(file, "descriptor '%s': debt with requests_per_unit 0: a limit of zero holds nothing to charge", path)
			}
			rule = &Rule{
				Key: path, Name: rl.Name, Unit: unit, RequestsPerUnit: rl.RequestsPerUnit,
				Burst: rl.Burst, Unlimited: rl.Unlimited, ShadowMode: yd.ShadowMode, Debt: rl.Debt,
				DetailedMetric: yd.DetailedMetric,
			}
			for _, r := range rl.Replaces {
				if r.Name == "" {
					return errorf(file, "should not have an empty replaces entry")
				}
				if r.Name == rl.Name {
					return errorf(file, "replaces should not contain name of same descriptor")
				}
				rule.Replaces = append(rule.Replaces, r.Name)
			}
		}
		wild := strings.Contains(k, "*")
		if yd.ShareThreshold && !wild {
			return errorf(file, "share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", k)
		}
		if err := checkMetadata(yd.Metadata); err != nil {
			return errorf(file, "error parsing metadata: %s", err)
		}
		if wild {
			n.wildcards = append(n.wildcards, wildcard{key: k, parts: strings.Split(k, "*")})
		}
		child := &node{children: map[string]*node{}, rule: rule}
		if yd.ShareThreshold {
			child.shared = k
		}
		if err := child.load(file, path+".", yd.Descriptors); err != nil {
			return err
		}
		n.children[k] = child
	}
	return nil
}

// Rules returns every rule of every domain, in no particular order.
func (c *Config) Rules() []*Rule {
	var rs []*Rule
	var walk func(n *node)
	walk = func(n *node) {
		if n.rule != nil {
			rs = append(rs, n.rule)
		}
		for _, ch := range n.children {
			walk(ch)
		}
	}
	for _, d := range c.domains {
		walk(d)
	}
	return rs
}

// HasDomain reports whether the configuration holds the domain.
func (c *Config) HasDomain(domain string) bool {
	_, ok := c.domains[domain]
	return ok
}

// Lookup returns the rule a descriptor matches in a domain, or nil when
// none does (an unknown domain, no path, a path that ends before the last
// entry or a level without a rate_limit). The result is shared: do not
// modify it.
//
// shared is nil unless an entry matched a wildcard with share_threshold;
// then shared[i] is, for each such entry i, the wildcard value ("files/*")
// that stands for the entry's value in the bucket's key, so that every
// matching value draws from one bucket.
func (c *Config) Lookup(domain string, entries []*common.RateLimitDescriptor_Entry) (rule *Rule, shared []string) {
	level := c.domains[domain]
	if level == nil {
		return nil, nil
	}
	for i, e := range entries {
		k := e.GetKey() + "_" + e.GetValue()
		next := level.children[k]
		if next == nil {
			for _, w := range level.wildcards {
				if w.match(k) {
					next = level.children[w.key]
					if next.shared != "" {
						if shared == nil {
							shared = make([]string, len(entries))
						}
						// What the matched values share: the pattern's
						// value ("files/*"), or the whole pattern when the
						// key holds the "*" ("foo*"), as
						// envoyproxy/ratelimit keys its shared window.
						shared[i] = strings.TrimPrefix(next.shared, e.GetKey()+"_")
					}
					break
				}
			}
		}
		if next == nil {
			next = level.children[e.GetKey()]
		}
		if next == nil {
			break
		}
		if next.rule != nil && i == len(entries)-1 {
			rule = next.rule
		}
		if len(next.children) == 0 {
			break
		}
		level = next
	}
	if rule == nil {
		shared = nil
	}
	return rule, shared
}

// Dump returns every rule, one line each, in order of key, as
// envoyproxy/ratelimit's /rlconfig prints it: "key: unit=MINUTE
// requests_per_unit=60, shadow_mode: false, quota_mode: false" (an
// unlimited rule with the unit and count it was written with, UNKNOWN and
// 0 if none, as there), then this service's extensions where set:
// ", burst: n" and ", debt: true".
func (c *Config) Dump() string {
	rs := c.Rules()
	sort.Slice(rs, func(i, j int) bool { return rs[i].Key < rs[j].Key })
	var b strings.Builder
	for _, r := range rs {
		// quota_mode: true is refused at load.
		fmt.Fprintf(&b, "%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: false", r.Key, r.Unit, r.RequestsPerUnit, r.ShadowMode)
		if r.Burst != 0 {
			fmt.Fprintf(&b, ", burst: %d", r.Burst)
		}
		if r.Debt {
			b.WriteString(", debt: true")
		}
		b.WriteByte('\n')
	}
	return b.String()
}
