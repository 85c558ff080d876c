package engine

import (
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
)

const sharePolicy = `
domain: d
descriptors:
  - key: path
    value: /uploads/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /thumbs/*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: bucket
    value: cold-*
    share_threshold: true
    descriptors:
      - key: tenant
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: route
    value: /api/*/orders
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  # The same arithmetic as /uploads/*, without sharing: a value written
  # like the shared pattern must not land in the shared bucket.
  - key: file
    value: /uploads*
    rate_limit: {unit: minute, requests_per_unit: 2}
`

// TestShareThreshold: every value a share_threshold wildcard matches is
// charged on one bucket, per values of the other entries; other wildcards
// keep a bucket per value.
func TestShareThreshold(t *testing.T) {
	e := newEngine(t, sharePolicy)
	steps := []struct {
		request []string
		want    algorithms.Code
	}{
		{[]string{"path", "/uploads/a.png"}, algorithms.Allowed},
		{[]string{"path", "/uploads/b.png"}, algorithms.Allowed},
		{[]string{"path", "/uploads/c.png"}, algorithms.Denied}, // the shared 2 are spent
		{[]string{"path", "/uploads/*"}, algorithms.Denied},     // the pattern itself is one of its values
		{[]string{"path", "/thumbs/a.png"}, algorithms.Allowed},
		{[]string{"path", "/thumbs/a.png"}, algorithms.Allowed},
		{[]string{"path", "/thumbs/b.png"}, algorithms.Allowed}, // a bucket of its own
		{[]string{"path", "/thumbs/a.png"}, algorithms.Denied},
		{[]string{"file", "/uploads/*"}, algorithms.Allowed}, // not the shared bucket
		{[]string{"route", "/api/v1/orders"}, algorithms.Allowed},
		{[]string{"route", "/api/v2/orders"}, algorithms.Denied}, // a wildcard in the middle shares too
		{[]string{"bucket", "cold-eu", "tenant", "acme"}, algorithms.Allowed},
		{[]string{"bucket", "cold-us", "tenant", "acme"}, algorithms.Denied},   // shared across cold-*
		{[]string{"bucket", "cold-us", "tenant", "other"}, algorithms.Allowed}, // per tenant
	}
	for i, s := range steps {
		r := decide(t, e, &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries(s.request...)}}})
		if r.Code != s.want {
			t.Errorf("step %d %v: %v, want %v", i, s.request, r.Code, s.want)
		}
	}
}
