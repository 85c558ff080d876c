package config

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimitd/ratelimitd/internal/policy/yamlnode"
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
// is the path in the resource (descriptors[0].rate_limit.unit), Line 0;
// once 1000 problems are listed, the resources left are not checked (a
// last problem counts them). No resources is an empty policy: every
// domain is unknown.
//
// Every field of the resource is read as the field of the same name in a
// policy file, and as upstream reads it: unit UNKNOWN is a missing unit;
// requests_per_unit 0 denies every request; an unlimited limit's unit and
// requests_per_unit are ignored (upstream's conversion always fills them);
// quota_mode, shadow_mode, detailed_metric, name, replaces and unlimited
// are as in a file; the resource's name names it. A field ratelimitd does
// not read (see readFields), and a field unknown to the version of
// go-control-plane's ratelimit module it is built with (a newer control
// plane's), are problems named by their path (descriptors[2].quota_mode,
// or descriptors[2] and the field's number): refused, never ignored.
func FromRateLimitConfigs(configs []RateLimitConfig, l PolicyBounds) (*Policy, error) {
	if err := l.Check(); err != nil {
		return nil, err
	}
	var (
		domains domainList
		errs    Errors
		budget  = l.MaxDescriptors
	)
	for i, c := range configs {
		if len(errs) >= maxProblems {
			errs = append(errs, &FieldError{File: "xds", Problem: fmt.Sprintf("%d more resources not checked, after %d problems", len(configs)-i, len(errs))})
			break
		}
		source := "xds:" + c.Config.GetName()
		if ferrs := unreadFields(source, c.Config); len(ferrs) > 0 {
			errs = append(errs, ferrs...)
			continue
		}
		doc, err := rateLimitConfigYAML(c)
		if err != nil {
			errs = append(errs, &FieldError{File: source, Field: "extensions", Problem: err.Error()})
			continue
		}
		d, used, ferrs := parseDomainNode(source, doc, budget, l.MaxDescriptors)
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
			put(m, "shadow_mode", trueNode)
		}
		if d.GetDetailedMetric() {
			put(m, "detailed_metric", trueNode)
		}
		if d.GetQuotaMode() {
			put(m, "quota_mode", trueNode)
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
		put(m, "unlimited", trueNode)
	} else if !concurrencyOnly(rl, ext) {
		if rl.GetUnit() != rlsconfv3.RateLimitUnit_UNKNOWN {
			u, ok := unitNodes[rl.GetUnit()]
			if !ok {
				u = scalar(rl.GetUnit().String()) // a number unknown to the module
			}
			put(m, "unit", u)
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

// concurrencyOnly reports whether rl's extension makes it a concurrency
// (max_in_flight and lease in place of a rate) and rl leaves its rate
// unset: unit UNKNOWN, requests_per_unit 0, which then say nothing. A
// concurrency whose resource sets either is refused as a file's would be.
func concurrencyOnly(rl *rlsconfv3.RateLimitPolicy, ext map[string]*structpb.Struct) bool {
	fields, ok := ext[rl.GetName()]
	return ok && rl.GetName() != "" && fields.GetFields()["algorithm"].GetStringValue() == "concurrency" &&
		rl.GetUnit() == rlsconfv3.RateLimitUnit_UNKNOWN && rl.GetRequestsPerUnit() == 0
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

// put adds key: v to the mapping m.
func put(m *yaml.Node, key string, v *yaml.Node) {
	k, ok := fieldNames[key]
	if !ok {
		k = scalar(key)
	}
	m.Content = append(m.Content, k, v)
}

// fieldNames holds one node per field name of a policy file, which every
// mapping built here shares (the parser does not change the nodes it
// reads), so that a resource of many descriptors costs a few nodes each.
// The same for trueNode and the units' names.
var (
	fieldNames = func() map[string]*yaml.Node {
		m := map[string]*yaml.Node{}
		for _, names := range [][]string{fileFields, descriptorFields, limitFields, replacesFields} {
			for _, name := range names {
				m[name] = scalar(name)
			}
		}
		return m
	}()
	trueNode  = boolean(true)
	unitNodes = func() map[rlsconfv3.RateLimitUnit]*yaml.Node {
		m := map[rlsconfv3.RateLimitUnit]*yaml.Node{}
		for n, name := range rlsconfv3.RateLimitUnit_name {
			m[rlsconfv3.RateLimitUnit(n)] = scalar(name)
		}
		return m
	}()
)

func scalar(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s, Style: yaml.DoubleQuotedStyle}
}

func integer(n int64) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(n, 10)}
}

func boolean(b bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(b)}
}

// readFields lists, per message of a RateLimitConfig resource, the fields
// FromRateLimitConfigs reads. A message of another type (the metadata
// Struct) is read whole, its fields not listed. A field set in a resource
// and not listed here is refused: so a newer module, whose messages have
// fields no one has mapped yet, makes ratelimitd refuse them until they
// are mapped, rather than ignore them.
var readFields = map[protoreflect.FullName][]protoreflect.Name{
	"ratelimit.config.ratelimit.v3.RateLimitConfig": {"name", "domain", "descriptors"},
	"ratelimit.config.ratelimit.v3.RateLimitDescriptor": {"key", "value", "rate_limit", "descriptors",
		"shadow_mode", "detailed_metric", "quota_mode", "metadata"},
	"ratelimit.config.ratelimit.v3.RateLimitPolicy":  {"unit", "requests_per_unit", "unlimited", "name", "replaces"},
	"ratelimit.config.ratelimit.v3.RateLimitReplace": {"name"},
}

// maxFieldProblems bounds the problems of unread fields listed for one
// resource; the rest are counted.
const maxFieldProblems = 100

// unreadFields returns a problem for every field of c that
// FromRateLimitConfigs would not read: set and not in readFields, or
// unknown to the module (protobuf's unknown fields, kept by the decoder).
func unreadFields(source string, c *rlsconfv3.RateLimitConfig) Errors {
	var (
		errs    Errors
		dropped int
	)
	report := func(field, format string, args ...any) {
		if len(errs) == maxFieldProblems {
			dropped++
			return
		}
		errs = append(errs, &FieldError{File: source, Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	var walk func(m protoreflect.Message, path string)
	walk = func(m protoreflect.Message, path string) {
		read, listed := readFields[m.Descriptor().FullName()]
		if !listed {
			return // read whole
		}
		m.Range(func(f protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			fpath := yamlnode.Join(path, string(f.Name()))
			switch {
			case !slices.Contains(read, f.Name()):
				report(fpath, "ratelimitd does not read this field: refused rather than ignored")
			case f.IsList() && f.Message() != nil:
				l := v.List()
				for i := range l.Len() {
					walk(l.Get(i).Message(), fmt.Sprintf("%s[%d]", fpath, i))
				}
			case f.Message() != nil && !f.IsMap():
				walk(v.Message(), fpath)
			}
			return true
		})
		for b := m.GetUnknown(); len(b) > 0; {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 {
				report(path, "malformed unknown field")
				return
			}
			b = b[n:]
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				report(path, "malformed unknown field %d", num)
				return
			}
			b = b[n:]
			report(path, "unknown field number %d (%s has no such field in the version ratelimitd reads; a newer control plane's?): refused rather than ignored", num, m.Descriptor().Name())
		}
	}
	walk(c.ProtoReflect(), "")
	if dropped > 0 {
		errs = append(errs, &FieldError{File: source, Problem: fmt.Sprintf("%d more fields not listed", dropped)})
	}
	return errs
}
