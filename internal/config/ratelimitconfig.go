package config

import (
	"fmt"
	"math"
	"strconv"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// RateLimitConfig is one domain's policy as an xDS control plane sends it:
// envoyproxy/ratelimit's ratelimit.config.ratelimit.v3.RateLimitConfig
// resource, with ratelimitd's extensions for its limits.
type RateLimitConfig struct {
	// Config is the resource. Its Name names it in errors and becomes the
	// domain's Source, as "xds:NAME".
	Config *rlsconfv3.RateLimitConfig
	// Extensions, when not nil, add ratelimitd's fields to limits named
	// in the resource (rate_limit.name), since the resource has no field
	// for them:
	//
	//	{"limits": {"per_user": {"algorithm": "token_bucket", "burst": 20}}}
	//
	// Each named limit gets the fields given, as if its policy file's
	// rate_limit block said them: algorithm, burst, unit_multiplier,
	// retry_jitter, and any rate_limit field ratelimitd reads. A name no
	// limit has, or a field the parser does not know, is a problem of the
	// resource.
	Extensions *structpb.Struct
}

// FromRateLimitConfigs returns the policy of the domains in configs, one
// domain per resource, built through the same checks as policy files
// (within limits l, the descriptors of all resources counted together), or
// every problem found, as Errors whose File is "xds:NAME" and whose Field
// is the path in the resource (descriptors[0].rate_limit.unit), Line 0. No
// resources is an empty policy: every domain is unknown.
//
// The resource is read as upstream reads it: unit UNKNOWN is a missing
// unit; requests_per_unit 0 denies every request; an unlimited limit's unit
// and requests_per_unit are ignored (upstream's conversion always fills
// them). detailed_metric and shadow_mode are as in a file.
func FromRateLimitConfigs(configs []RateLimitConfig, l PolicyBounds) (*Policy, error) {
	if err := l.Check(); err != nil {
		return nil, err
	}
	var (
		domains domainList
		errs    Errors
		budget  = l.MaxDescriptors
	)
	for _, c := range configs {
		source := "xds:" + c.Config.GetName()
		doc, err := rateLimitConfigYAML(c)
		if err != nil {
			errs = append(errs, &FieldError{File: source, Field: "extensions", Problem: err.Error()})
			continue
		}
		data, err := yaml.Marshal(doc)
		if err != nil {
			errs = append(errs, &FieldError{File: source, Problem: err.Error()})
			continue
		}
		d, used, ferrs := parseDomain(source, data, budget, l.MaxDescriptors)
		budget -= used
		for _, fe := range ferrs {
			fe.Line = 0 // lines of the YAML built here, not of anything the sender wrote
		}
		errs = append(errs, ferrs...)
		if d == nil {
			continue
		}
		if err := domains.add(d, source, 0); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return newPolicy(domains.list), nil
}

// rateLimitConfigYAML returns c as the YAML document of a policy file.
func rateLimitConfigYAML(c RateLimitConfig) (*yaml.Node, error) {
	ext := map[string]*structpb.Struct{}
	if c.Extensions != nil {
		for k, v := range c.Extensions.GetFields() {
			if k != "limits" {
				return nil, fmt.Errorf("unknown field %q (want limits)", k)
			}
			limits := v.GetStructValue()
			if limits == nil {
				return nil, fmt.Errorf("limits: want a struct of limit names")
			}
			for name, lv := range limits.GetFields() {
				fields := lv.GetStructValue()
				if fields == nil {
					return nil, fmt.Errorf("limits.%s: want a struct of rate_limit fields", name)
				}
				ext[name] = fields
			}
		}
	}
	used := map[string]bool{}
	root := mapping()
	put(root, "domain", scalar(c.Config.GetDomain()))
	descs, err := descriptorsYAML(c.Config.GetDescriptors(), ext, used)
	if err != nil {
		return nil, err
	}
	put(root, "descriptors", descs)
	for name := range ext {
		if !used[name] {
			return nil, fmt.Errorf("limits.%s: no limit of this resource is named %q", name, name)
		}
	}
	return root, nil
}

func descriptorsYAML(ds []*rlsconfv3.RateLimitDescriptor, ext map[string]*structpb.Struct, used map[string]bool) (*yaml.Node, error) {
	seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, d := range ds {
		m := mapping()
		put(m, "key", scalar(d.GetKey()))
		if d.GetValue() != "" {
			put(m, "value", scalar(d.GetValue()))
		}
		if rl := d.GetRateLimit(); rl != nil {
			lm, err := limitYAML(rl, ext, used)
			if err != nil {
				return nil, err
			}
			put(m, "rate_limit", lm)
		}
		if md := d.GetMetadata(); len(md.GetFields()) > 0 {
			put(m, "metadata", structYAML(md))
		}
		if d.GetShadowMode() {
			put(m, "shadow_mode", boolean(true))
		}
		if d.GetDetailedMetric() {
			put(m, "detailed_metric", boolean(true))
		}
		if len(d.GetDescriptors()) > 0 {
			sub, err := descriptorsYAML(d.GetDescriptors(), ext, used)
			if err != nil {
				return nil, err
			}
			put(m, "descriptors", sub)
		}
		seq.Content = append(seq.Content, m)
	}
	return seq, nil
}

func limitYAML(rl *rlsconfv3.RateLimitPolicy, ext map[string]*structpb.Struct, used map[string]bool) (*yaml.Node, error) {
	m := mapping()
	if rl.GetName() != "" {
		put(m, "name", scalar(rl.GetName()))
	}
	if rl.GetUnlimited() {
		put(m, "unlimited", boolean(true))
	} else {
		if rl.GetUnit() != rlsconfv3.RateLimitUnit_UNKNOWN {
			put(m, "unit", scalar(rl.GetUnit().String()))
		}
		put(m, "requests_per_unit", integer(int64(rl.GetRequestsPerUnit())))
	}
	if len(rl.GetReplaces()) > 0 {
		seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, r := range rl.GetReplaces() {
			rm := mapping()
			put(rm, "name", scalar(r.GetName()))
			seq.Content = append(seq.Content, rm)
		}
		put(m, "replaces", seq)
	}
	if fields, ok := ext[rl.GetName()]; ok && rl.GetName() != "" {
		used[rl.GetName()] = true
		for k, v := range fields.GetFields() {
			n, err := valueYAML(v)
			if err != nil {
				return nil, fmt.Errorf("limits.%s.%s: %v", rl.GetName(), k, err)
			}
			put(m, k, n)
		}
	}
	return m, nil
}

// valueYAML returns an extension's value as a YAML scalar: a whole number
// as an integer, a string, or a boolean.
func valueYAML(v *structpb.Value) (*yaml.Node, error) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return scalar(k.StringValue), nil
	case *structpb.Value_BoolValue:
		return boolean(k.BoolValue), nil
	case *structpb.Value_NumberValue:
		f := k.NumberValue
		if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return nil, fmt.Errorf("%v is not a whole number", f)
		}
		return integer(int64(f)), nil
	}
	return nil, fmt.Errorf("want a string, a number or a boolean")
}

// structYAML returns a descriptor's metadata as the YAML a policy file
// would hold (the parser makes it a Struct again, the same): mappings,
// lists, and scalars tagged with their types.
func structYAML(s *structpb.Struct) *yaml.Node {
	m := mapping()
	for k, v := range s.GetFields() {
		put(m, k, anyYAML(v))
	}
	return m
}

func anyYAML(v *structpb.Value) *yaml.Node {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StructValue:
		return structYAML(k.StructValue)
	case *structpb.Value_ListValue:
		seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, e := range k.ListValue.GetValues() {
			seq.Content = append(seq.Content, anyYAML(e))
		}
		return seq
	case *structpb.Value_StringValue:
		return scalar(k.StringValue)
	case *structpb.Value_BoolValue:
		return boolean(k.BoolValue)
	case *structpb.Value_NumberValue:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: strconv.FormatFloat(k.NumberValue, 'g', -1, 64)}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
}

func mapping() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"} }

func put(m *yaml.Node, key string, v *yaml.Node) { m.Content = append(m.Content, scalar(key), v) }

func scalar(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s, Style: yaml.DoubleQuotedStyle}
}

func integer(n int64) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(n, 10)}
}

func boolean(b bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(b)}
}
