package config

import (
	"fmt"

	"github.com/admit-go/admit"
	"go.yaml.in/yaml/v2"
	"google.golang.org/protobuf/types/known/structpb"
)

// Error is a configuration error: the file's name and what is wrong with it.
// Its text is envoyproxy/ratelimit's ("name: message") and it wraps
// admit.ErrInvalidConfig.
type Error struct {
	File string // the File.Name given to Load
	Msg  string // envoyproxy/ratelimit's message
}

// Error returns the file's name and the message: "name: message".
func (e *Error) Error() string { return e.File + ": " + e.Msg }

// Unwrap returns admit.ErrInvalidConfig.
func (e *Error) Unwrap() error { return admit.ErrInvalidConfig }

func errorf(file, format string, args ...any) *Error {
	return &Error{File: file, Msg: fmt.Sprintf(format, args...)}
}

// validKeys are the mapping keys a file may hold, at any depth: those of
// envoyproxy/ratelimit, plus burst and debt.
var validKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true,
	"rate_limit": true, "unit": true, "requests_per_unit": true,
	"unlimited": true, "shadow_mode": true, "quota_mode": true, "name": true,
	"replaces": true, "detailed_metric": true, "value_to_metric": true,
	"share_threshold": true, "metadata": true, "burst": true, "debt": true,
}

type yamlReplaces struct {
	Name string `yaml:"name"`
}

type yamlRateLimit struct {
	RequestsPerUnit uint32         `yaml:"requests_per_unit"`
	Burst           uint32         `yaml:"burst"`
	Debt            bool           `yaml:"debt"`
	Unit            string         `yaml:"unit"`
	Unlimited       bool           `yaml:"unlimited"`
	Name            string         `yaml:"name"`
	Replaces        []yamlReplaces `yaml:"replaces"`
}

type yamlDescriptor struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *yamlRateLimit   `yaml:"rate_limit"`
	Descriptors    []yamlDescriptor `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	QuotaMode      bool             `yaml:"quota_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
	ValueToMetric  bool             `yaml:"value_to_metric"`
	ShareThreshold bool             `yaml:"share_threshold"`
	// Metadata is arbitrary YAML that envoyproxy/ratelimit returns in the
	// response's dynamic metadata under RESPONSE_DYNAMIC_METADATA, which
	// admit-rls refuses: it is checked as there, then ignored.
	Metadata map[string]any `yaml:"metadata"`
}

type yamlRoot struct {
	Domain      string           `yaml:"domain"`
	Descriptors []yamlDescriptor `yaml:"descriptors"`
}

// parse decodes one file: first as a generic tree whose keys are checked,
// then into the typed form.
func parse(name string, content []byte) (*yamlRoot, error) {
	tree := map[any]any{}
	if err := yaml.Unmarshal(content, &tree); err != nil {
		return nil, errorf(name, "error loading config file: %s", err)
	}
	if err := checkKeys(name, tree); err != nil {
		return nil, err
	}
	var root yamlRoot
	if err := yaml.Unmarshal(content, &root); err != nil {
		return nil, errorf(name, "error loading config file: %s", err)
	}
	return &root, nil
}

// checkKeys walks a decoded mapping: every key a string from validKeys,
// every list a list of mappings, every leaf a string, int, bool or null.
func checkKeys(name string, m map[any]any) error {
	for k, v := range m {
		ks, ok := k.(string)
		if !ok {
			return errorf(name, "config error, key is not of type string: %v", k)
		}
		if !validKeys[ks] {
			return errorf(name, "config error, unknown key '%s'", ks)
		}
		if ks == "metadata" {
			continue // arbitrary: checked when converted (checkMetadata)
		}
		switch v := v.(type) {
		case []any:
			for _, e := range v {
				em, ok := e.(map[any]any)
				if !ok {
					return errorf(name, "config error, yaml file contains list of type other than map: %v", e)
				}
				if err := checkKeys(name, em); err != nil {
					return err
				}
			}
		case map[any]any:
			if err := checkKeys(name, v); err != nil {
				return err
			}
		case string, int, bool, nil:
		default:
			return errorf(name, "error checking config")
		}
	}
	return nil
}

// checkMetadata checks that a descriptor's metadata converts to a protobuf
// Struct, as envoyproxy/ratelimit converts it (its keys printed with %v).
func checkMetadata(m map[string]any) error {
	if len(m) == 0 {
		return nil
	}
	var conv func(v any) any
	conv = func(v any) any {
		switch v := v.(type) {
		case map[any]any:
			out := make(map[string]any, len(v))
			for k, e := range v {
				out[fmt.Sprintf("%v", k)] = conv(e)
			}
			return out
		case []any:
			out := make([]any, len(v))
			for i, e := range v {
				out[i] = conv(e)
			}
			return out
		}
		return v
	}
	top := make(map[string]any, len(m))
	for k, v := range m {
		top[k] = conv(v)
	}
	_, err := structpb.NewStruct(top)
	return err
}
