package authz

import (
	"slices"
	"strings"
)

// Caller names the caller id as the policy knows it, for bounds kept per
// caller (the quota service's share of its bucket table): the names of the
// policy's clients it matches, sorted, without repeats, joined by ",";
// "" when it matches none (an anonymous caller, or one the policy refuses).
func (p *Policy) Caller(id Identity) string {
	byToken, e := p.tokenClients(id)
	if e != nil {
		return ""
	}
	var names []string
	p.clientsOf(id, byToken, func(c *client) {
		if !slices.Contains(names, c.name) {
			names = append(names, c.name)
		}
	})
	slices.Sort(names)
	return strings.Join(names, ",")
}

// Caller names the caller id by the policy in force (Policy.Caller).
func (a *Authorizer) Caller(id Identity) string { return a.policy.Load().Caller(id) }
