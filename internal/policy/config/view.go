package config

import (
	"slices"
	"strings"
)

// PolicyView is a policy as plain values, for encoding/json: what an admin
// endpoint shows of the policy in force. It is a copy; changing it changes
// nothing.
type PolicyView struct {
	// Domains in name order.
	Domains []DomainView `json:"domains"`
}

// DomainView is one domain and where it came from.
type DomainView struct {
	Domain string `json:"domain"`
	// Source is Domain.Source: the file the domain was loaded from, or
	// "embedded:default.yaml".
	Source      string           `json:"source"`
	Descriptors []DescriptorView `json:"descriptors"`
}

// DescriptorView is one descriptor of a domain's tree.
//
// The descriptors of one level are listed by key and, for one key, in the
// order Domain.Match tries them: exact values (sorted), then wildcard
// values in file order, then the key without a value.
type DescriptorView struct {
	Key string `json:"key"`
	// Value is empty for a key-only descriptor; a wildcard ends in "*".
	Value string `json:"value,omitempty"`
	// StatKey is Rule.StatKey, for a descriptor with limits.
	StatKey string `json:"stat_key,omitempty"`
	// RateLimits are the descriptor's limits (rate_limit or rate_limits).
	RateLimits     []LimitView `json:"rate_limits,omitempty"`
	ShadowMode     bool        `json:"shadow_mode,omitempty"`
	QuotaMode      bool        `json:"quota_mode,omitempty"`
	DetailedMetric bool        `json:"detailed_metric,omitempty"`
	// Refunds is false when the rule takes no refunds (Rule.NoRefunds),
	// absent when it takes them.
	Refunds *bool `json:"refunds,omitempty"`
	// ShareThreshold: every value this wildcard matches counts in one
	// bucket (for its limits and those nested under it).
	ShareThreshold bool             `json:"share_threshold,omitempty"`
	Descriptors    []DescriptorView `json:"descriptors,omitempty"`
}

// LimitView is one limit. Unit, UnitMultiplier and RequestsPerUnit are as
// the file gave them; Period and Burst are the resulting arithmetic
// (Burst is the capacity of a bucket algorithm, 0 for a window).
type LimitView struct {
	Name            string   `json:"name,omitempty"`
	Unlimited       bool     `json:"unlimited,omitempty"`
	DenyAll         bool     `json:"deny_all,omitempty"`
	Algorithm       string   `json:"algorithm,omitempty"`
	Unit            string   `json:"unit,omitempty"`
	UnitMultiplier  int64    `json:"unit_multiplier,omitempty"`
	RequestsPerUnit int64    `json:"requests_per_unit"`
	Burst           int64    `json:"burst,omitempty"`
	Period          string   `json:"period,omitempty"`
	RetryJitter     string   `json:"retry_jitter,omitempty"`
	Replaces        []string `json:"replaces,omitempty"`
	// Overdraft is rate_limit.overdraft as the file gave it; absent when
	// the file does not say (the daemon's default decides).
	Overdraft *bool `json:"overdraft,omitempty"`
	// Key is Limit.Key: limits with equal keys decide alike.
	Key string `json:"key"`
}

// View returns the policy as plain values.
func (p *Policy) View() PolicyView {
	v := PolicyView{Domains: make([]DomainView, 0, len(p.sorted))}
	for _, d := range p.sorted {
		v.Domains = append(v.Domains, DomainView{Domain: d.Name, Source: d.Source, Descriptors: d.root.view()})
	}
	return v
}

// view lists the descriptors one level below n.
func (n *node) view() []DescriptorView {
	type child struct {
		e    Entry
		rank int // 0 exact, 1 wildcard, 2 key only
		pos  int // file order, for wildcards
		n    *node
	}
	var cs []child
	for e, c := range n.exact {
		cs = append(cs, child{e: e, rank: 0, n: c})
	}
	for i, w := range n.wildcard {
		cs = append(cs, child{e: Entry{Key: w.key, Value: w.value}, rank: 1, pos: i, n: w.n})
	}
	for k, c := range n.keyOnly {
		cs = append(cs, child{e: Entry{Key: k}, rank: 2, n: c})
	}
	slices.SortFunc(cs, func(a, b child) int {
		if c := strings.Compare(a.e.Key, b.e.Key); c != 0 {
			return c
		}
		if a.rank != b.rank {
			return a.rank - b.rank
		}
		if a.rank == 1 {
			return a.pos - b.pos
		}
		return strings.Compare(a.e.Value, b.e.Value)
	})
	views := make([]DescriptorView, 0, len(cs))
	for _, c := range cs {
		dv := DescriptorView{Key: c.e.Key, Value: c.e.Value, ShareThreshold: c.n.shared, Descriptors: c.n.view()}
		if r := c.n.rule; r != nil {
			dv.StatKey, dv.ShadowMode, dv.QuotaMode, dv.DetailedMetric = r.StatKey, r.ShadowMode, r.QuotaMode, r.DetailedMetric
			if r.NoRefunds {
				dv.Refunds = new(bool)
			}
			for _, l := range r.Limits {
				dv.RateLimits = append(dv.RateLimits, l.view())
			}
		}
		views = append(views, dv)
	}
	return views
}

func (l *Limit) view() LimitView {
	v := LimitView{Name: l.Name, Unlimited: l.Unlimited, DenyAll: l.DenyAll, Replaces: slices.Clone(l.Replaces), Key: l.Key}
	if l.RetryJitter > 0 {
		v.RetryJitter = l.RetryJitter.String()
	}
	if l.Unlimited {
		return v
	}
	if l.Unit != UnitNone {
		v.Unit, v.UnitMultiplier = l.Unit.String(), l.UnitMultiplier
	}
	if l.DenyAll {
		return v
	}
	if l.Overdraft != OverdraftDefault {
		on := l.Overdraft == OverdraftOn
		v.Overdraft = &on
	}
	v.Algorithm = l.Rate.Algorithm().String()
	v.RequestsPerUnit = l.Rate.Requests()
	v.Burst = l.Rate.Burst()
	v.Period = l.Rate.Period().String()
	return v
}

// OverdraftRules returns the StatKey of each rule of d that has a limit
// saying overdraft: true, in the order View lists them.
func (d *Domain) OverdraftRules() []string {
	var keys []string
	var walk func([]DescriptorView)
	walk = func(ds []DescriptorView) {
		for _, dv := range ds {
			for _, l := range dv.RateLimits {
				if l.Overdraft != nil && *l.Overdraft {
					keys = append(keys, dv.StatKey)
					break
				}
			}
			walk(dv.Descriptors)
		}
	}
	walk(d.root.view())
	return keys
}
